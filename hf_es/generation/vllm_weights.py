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
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch

from ..es.sharding import (
    ShardSpec,
    column_parallel_spec,
    replicated_spec,
    row_parallel_spec,
    vocab_parallel_spec,
)
from .transformers_backend import refuse_quantized_weights

if TYPE_CHECKING:
    from vllm import LLM

__all__ = [
    "engine_model",
    "hf_named_shards",
    "hf_named_views",
    "install_live_cpu_weights",
    "keep_live_cpu_weights",
    "refuse_quantized_engine",
]


@contextlib.contextmanager
def keep_live_cpu_weights() -> Iterator[None]:
    """Makes vLLM's CPU backend keep every 2-D Linear / LM-head weight as a live parameter while a model loads.

    vLLM's CPU backend (`dispatch_cpu_unquantized_gemm`, called from `process_weights_after_loading`) copies each
    Linear weight into a kernel-specific packed layout and, for Linear layers, replaces the parameter with an empty
    tensor. Inside this context the dispatch instead binds `torch.nn.functional.linear` to the parameter itself, so
    writing into the parameter changes what the model computes. Non-2-D weights (MoE experts, causal convolutions)
    keep vLLM's own dispatch. Has no effect on other platforms. Worker processes apply it with
    [`install_live_cpu_weights`] (see [`hf_es.generation.vllm_worker`]).
    """
    undo = install_live_cpu_weights()
    try:
        yield
    finally:
        undo()


def install_live_cpu_weights() -> Callable[[], None]:
    """Applies [`keep_live_cpu_weights`]'s dispatch in this process until the returned function undoes it.

    Returns:
        A function restoring vLLM's dispatch (a no-op when the live dispatch was already installed).
    """
    from vllm.model_executor.layers import utils as layer_utils

    original = layer_utils.dispatch_cpu_unquantized_gemm
    if getattr(original, "hf_es_live", False):
        return lambda: None

    def dispatch_live(layer: torch.nn.Module, remove_weight: bool) -> None:
        if layer.weight.ndim != 2:
            original(layer, remove_weight)
            return
        layer.cpu_linear = torch.nn.functional.linear

    dispatch_live.hf_es_live = True
    layer_utils.dispatch_cpu_unquantized_gemm = dispatch_live

    def undo() -> None:
        layer_utils.dispatch_cpu_unquantized_gemm = original

    return undo


def hf_named_views(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Maps a vLLM model's parameters to Hugging Face parameter names, as views that share the engine's storage.

    Args:
        model: The `torch.nn.Module` inside a vLLM worker (with tensor parallelism: the rank's shard).

    Returns:
        HF name -> view into the live engine tensor (the rank's slice of it, see [`hf_named_shards`]).
    """
    return {name: view for name, (view, _) in hf_named_shards(model).items()}


def hf_named_shards(model: torch.nn.Module) -> dict[str, tuple[torch.Tensor, ShardSpec]]:
    """Maps a (tensor-parallel) vLLM model's parameters to Hugging Face names, each with the part of it this rank holds.

    Fused parameters listed in the model's `packed_modules_mapping` (e.g. `qkv_proj: [q_proj, k_proj, v_proj]`,
    `gate_up_proj: [gate_proj, up_proj]`) are split along their output dimension into the rank's rows of each
    component; each piece is a contiguous row slice, hence a contiguous view. Column-parallel layers hold a block of
    rows (KV heads may be replicated across ranks when the TP size exceeds their count), row-parallel layers a block of
    input columns (their bias is replicated), vocab-parallel embeddings / LM heads a block of vocabulary rows (without
    vLLM's padding rows), everything else (norms) is replicated. Shared parameters (tied embeddings) appear once.

    Args:
        model: The `torch.nn.Module` inside a vLLM worker.

    Returns:
        HF name -> (view into the live engine tensor, its [`hf_es.es.ShardSpec`] within the whole HF tensor).

    Raises:
        RuntimeError: If a parameter has been replaced by an empty tensor (packed CPU weights) or a fused layer's
            pieces do not add up to its parameter.
    """
    from vllm.distributed import get_tensor_model_parallel_rank, model_parallel_is_initialized
    from vllm.model_executor.layers.linear import (
        ColumnParallelLinear,
        MergedColumnParallelLinear,
        QKVParallelLinear,
        RowParallelLinear,
    )
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    # Replicated tensors (norms) have no rank of their own: the engine's TP rank decides which copy reports them.
    engine_rank = get_tensor_model_parallel_rank() if model_parallel_is_initialized() else 0
    packed = dict(getattr(model, "packed_modules_mapping", None) or {})
    shards: dict[str, tuple[torch.Tensor, ShardSpec]] = {}
    for name, param in model.named_parameters():
        if param.numel() == 0:
            raise RuntimeError(
                f"vLLM parameter {name} is empty: the engine repacked its weights, so in-place perturbation would not "
                "reach the matmuls. Create the engine inside `keep_live_cpu_weights()` (VLLMGenerationBackend does; "
                "worker processes import hf_es.generation.vllm_worker with HF_ES_VLLM_LIVE_WEIGHTS=1)."
            )
        module_path, _, leaf = name.rpartition(".")
        prefix, _, module_name = module_path.rpartition(".")
        module = model.get_submodule(module_path)
        rank, tp = getattr(module, "tp_rank", 0), getattr(module, "tp_size", 1)
        data, shape = param.data, tuple(param.shape)
        parts = packed.get(module_name)
        if parts and isinstance(module, (QKVParallelLinear, MergedColumnParallelLinear)):
            if isinstance(module, QKVParallelLinear):
                heads = [module.total_num_heads, module.total_num_kv_heads, module.total_num_kv_heads]
                sizes = [n * module.head_size for n in heads[:2]] + [module.total_num_kv_heads * module.v_head_size]
                replicas = [1, module.num_kv_head_replicas, module.num_kv_head_replicas]
            else:
                sizes, replicas = list(module.output_sizes), [1] * len(module.output_sizes)
            specs = [column_parallel_spec((size, *shape[1:]), rank, tp, rep) for size, rep in zip(sizes, replicas)]
            if len(specs) != len(parts) or sum(spec.size for spec in specs) != shape[0]:
                raise RuntimeError(
                    f"Cannot un-fuse {name}: pieces {parts} with output sizes {sizes} do not match shape {shape}."
                )
            offset = 0
            for part, spec in zip(parts, specs):
                hf_name = f"{prefix}.{part}.{leaf}" if prefix else f"{part}.{leaf}"
                shards[hf_name] = (data.narrow(0, offset, spec.size), spec)
                offset += spec.size
            continue
        if isinstance(module, VocabParallelEmbedding):
            indices = module.shard_indices
            if indices.num_added_elements:
                raise NotImplementedError(f"{name}: ES does not evolve added (LoRA) vocabulary rows.")
            spec = vocab_parallel_spec((module.org_vocab_size, *shape[1:]), rank, tp, module.padding_size)
            if (spec.start, spec.size) != (indices.org_vocab_start_index, indices.num_org_elements):
                raise RuntimeError(f"{name}: vLLM's vocabulary shard {indices} differs from {spec}.")
            shards[name] = (data.narrow(0, 0, spec.size), spec)
        elif isinstance(module, ColumnParallelLinear) and tp > 1:
            shards[name] = (data, column_parallel_spec((shape[0] * tp, *shape[1:]), rank, tp))
        elif isinstance(module, RowParallelLinear) and tp > 1 and param.ndim == 2:
            shards[name] = (data, row_parallel_spec((shape[0], shape[1] * tp), rank, tp))
        else:
            shards[name] = (data, replicated_spec(shape, engine_rank))
    return shards


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
