"""vLLM's weights as ES sees them: Hugging Face-named live views, kept live on CPU, and refused when quantized.

[`hf_named_views`] returns views of vLLM's parameters under their Hugging Face names, un-fusing `qkv_proj` into
`q_proj | k_proj | v_proj` and `gate_up_proj` into `gate_proj | up_proj` (contiguous row slices), with tied embeddings
once, so [`hf_es.es.ESCentre`] regenerates the same noise (keyed by the HF name) as with the transformers backend.
vLLM's CPU backend repacks every Linear (and the LM head) for its GEMM kernels after loading and replaces the parameter
with an empty tensor, so writing into `named_parameters()` would silently miss the matmuls: while the engine loads,
[`keep_live_cpu_weights`] makes Linear layers keep their parameter and call `torch.nn.functional.linear` on it. On
CUDA, unquantized Linear layers read their parameter directly already. vLLM is imported inside the functions only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from .transformers_backend import refuse_quantized_weights

if TYPE_CHECKING:
    from vllm import LLM

__all__ = ["engine_model", "hf_named_views", "keep_live_cpu_weights", "refuse_quantized_engine"]


@contextlib.contextmanager
def keep_live_cpu_weights() -> Iterator[None]:
    """Makes vLLM's CPU backend keep every 2-D Linear / LM-head weight as a live parameter while a model loads.

    vLLM's CPU backend (`dispatch_cpu_unquantized_gemm`, called from `process_weights_after_loading`) copies each
    Linear weight into a kernel-specific packed layout and, for Linear layers, replaces the parameter with an empty
    tensor. Inside this context the dispatch instead binds `torch.nn.functional.linear` to the parameter itself, so
    writing into the parameter changes what the model computes. Non-2-D weights (MoE experts, causal convolutions)
    keep vLLM's own dispatch. Has no effect on other platforms.
    """
    from vllm.model_executor.layers import utils as layer_utils

    original = layer_utils.dispatch_cpu_unquantized_gemm

    def dispatch_live(layer: torch.nn.Module, remove_weight: bool) -> None:
        if layer.weight.ndim != 2:
            original(layer, remove_weight)
            return
        layer.cpu_linear = torch.nn.functional.linear

    layer_utils.dispatch_cpu_unquantized_gemm = dispatch_live
    try:
        yield
    finally:
        layer_utils.dispatch_cpu_unquantized_gemm = original


def hf_named_views(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Maps a vLLM model's parameters to Hugging Face parameter names, as views that share the engine's storage.

    Fused parameters listed in the model's `packed_modules_mapping` (e.g. `qkv_proj: [q_proj, k_proj, v_proj]`,
    `gate_up_proj: [gate_proj, up_proj]`) are split along their output dimension with the layer's `output_sizes`;
    each piece is a contiguous row slice, hence a contiguous view. Shared parameters (tied embeddings) appear once.

    Args:
        model: The `torch.nn.Module` inside the vLLM worker (tensor parallel size 1).

    Returns:
        HF name -> view into the live engine tensor.

    Raises:
        RuntimeError: If a parameter has been replaced by an empty tensor (packed CPU weights) or a fused layer's
            pieces do not add up to its parameter.
    """
    packed = dict(getattr(model, "packed_modules_mapping", None) or {})
    views: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        if param.numel() == 0:
            raise RuntimeError(
                f"vLLM parameter {name} is empty: the engine repacked its weights, so in-place perturbation would not "
                "reach the matmuls. Create the engine inside `keep_live_cpu_weights()` (VLLMGenerationBackend does)."
            )
        module_path, _, leaf = name.rpartition(".")
        prefix, _, module_name = module_path.rpartition(".")
        parts = packed.get(module_name)
        if not parts:
            views[name] = param.data
            continue
        module = model.get_submodule(module_path)
        sizes = list(getattr(module, "output_sizes", []))
        if getattr(module, "tp_size", 1) != 1:
            raise NotImplementedError("HF-named views of tensor-parallel shards are not supported (use tp size 1).")
        if len(sizes) != len(parts) or sum(sizes) != param.shape[0]:
            raise RuntimeError(
                f"Cannot un-fuse {name}: pieces {parts} with output sizes {sizes} do not match shape "
                f"{tuple(param.shape)}."
            )
        offset = 0
        for part, size in zip(parts, sizes):
            hf_name = f"{prefix}.{part}.{leaf}" if prefix else f"{part}.{leaf}"
            views[hf_name] = param.data.narrow(0, offset, size)
            offset += size
    return views


def engine_model(llm: LLM) -> torch.nn.Module:
    """The model inside an in-process vLLM engine (unwrapped from any CUDA-graph wrapper by `get_model()`)."""
    try:
        model_runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    except AttributeError as error:
        raise RuntimeError(
            "The vLLM engine does not run in this process, so its weights cannot be perturbed in place. Set "
            "VLLM_ENABLE_V1_MULTIPROCESSING=0 before creating the engine (VLLMGenerationBackend does this unless the "
            "variable is already set to 1)."
        ) from error
    return model_runner.get_model()


def refuse_quantized_engine(model: torch.nn.Module, quantization: str | None = None) -> None:
    """Stops before any perturbation when a vLLM model holds quantized weights (fp8, AWQ, GPTQ, bitsandbytes, ...).

    Quantized layers keep packed integers or low-precision values plus scales, so adding Gaussian noise to them
    would not move the weights the way ES assumes (and cannot be restored exactly).

    Args:
        model: The model inside the engine.
        quantization: The engine's `model_config.quantization`, if any.

    Raises:
        ValueError: Naming the first quantized layer (or the engine's quantization method).
    """
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if method is not None and not type(method).__name__.startswith("Unquantized"):
            raise ValueError(
                f"Layer {name!r} of the vLLM engine is quantized ({type(method).__name__}"
                f"{f', quantization={quantization!r}' if quantization else ''}); ES perturbs plain floating-point "
                "weights only. Load an unquantized (bf16/fp16/fp32) checkpoint."
            )
    refuse_quantized_weights(dict(model.named_parameters()))
    if quantization:
        raise ValueError(
            f"The vLLM engine runs with quantization={quantization!r}; ES perturbs plain floating-point weights only. "
            "Load an unquantized (bf16/fp16/fp32) checkpoint."
        )
