"""Generation engines behind one interface: transformers `generate` here, vLLM in `vllm_backend`."""

from .base import GenerationBackend, GenerationResult, SamplingConfig
from .transformers_backend import TransformersGenerationBackend

__all__ = ["GenerationBackend", "GenerationResult", "SamplingConfig", "TransformersGenerationBackend"]
