"""Gradio widget for the Hub Space of this metric (`evaluate`'s standard Space app); not used by hf_es itself."""

import os

import evaluate
from evaluate.utils import launch_gradio_widget

module = evaluate.load(os.path.dirname(os.path.abspath(__file__)))
launch_gradio_widget(module)
