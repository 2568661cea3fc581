"""Generation engines behind one interface, chosen by name from [`BACKENDS`]: transformers `generate` here, vLLM
in `vllm_backend` (optional dependency, imported when chosen)."""

from .base import GenerationBackend, GenerationResult, PhaseTimer, SamplingConfig
from .registry import BACKENDS, auto_backend_name, make_backend
from .transformers_backend import TransformersGenerationBackend

__all__ = [
    "BACKENDS",
    "GenerationBackend",
    "GenerationResult",
    "PhaseTimer",
    "SamplingConfig",
    "TransformersGenerationBackend",
    "auto_backend_name",
    "make_backend",
]
