"""The engine registry: `ESConfig.generation_backend` (and the evaluation's `--backend`) name an engine here.

Adding an engine is one file with a [`GenerationBackend`] subclass plus one line below (see docs/ENGINES.md).
Engines with optional dependencies are registered with [`lazy`], which imports their module only when chosen.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

from ..es.registry import Registry
from .base import GenerationBackend
from .transformers_backend import TransformersGenerationBackend

__all__ = ["BACKENDS", "auto_backend_name", "lazy", "make_backend"]

BACKENDS: Registry[Callable[..., GenerationBackend]] = Registry("generation_backend")
"""Engine name -> constructor taking explicit keyword arguments (`model`, `tokenizer`, engine settings)."""


def lazy(module: str, name: str) -> Callable[..., GenerationBackend]:
    """A constructor of the class `name` of `hf_es.generation.<module>` that imports the module only when called, for
    engines with optional dependencies.

    Args:
        module: Module relative to `hf_es.generation`, e.g. `".vllm_backend"`.
        name: The backend class in it.

    Returns:
        A function taking the class's keyword arguments.
    """

    def construct(**kwargs: Any) -> GenerationBackend:
        return getattr(importlib.import_module(module, __package__), name)(**kwargs)

    return construct


BACKENDS.register("transformers", TransformersGenerationBackend)
BACKENDS.register("vllm", lazy(".vllm_backend", "VLLMGenerationBackend"))  # optional dependency


def make_backend(name: str, **kwargs: Any) -> GenerationBackend:
    """Creates the engine registered as `name`.

    Args:
        name: A key of [`BACKENDS`] (`"transformers"`, `"vllm"`, ...).
        **kwargs: The engine's constructor arguments, e.g. `model=..., tokenizer=..., batch_size=...` for
            [`TransformersGenerationBackend`] or `model=..., tokenizer=..., gpu_memory_utilization=...` for
            [`~hf_es.generation.vllm_backend.VLLMGenerationBackend`].

    Returns:
        The backend.
    """
    return BACKENDS.resolve(name)(**kwargs)


def auto_backend_name() -> str:
    """What `"auto"` means where an engine is chosen for inference: vLLM when it is installed and a GPU is visible,
    else transformers."""
    import torch

    return "vllm" if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available() else "transformers"
