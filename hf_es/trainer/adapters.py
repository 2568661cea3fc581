"""Which parameters an [`ESTrainer`] evolves: a PEFT adapter, a `target_modules`-style selection, or all of them.

The evolved set is the model's *trainable* parameters (`requires_grad=True`), the convention PEFT and
`transformers.Trainer` already use: `get_peft_model` freezes the base weights and leaves the adapter trainable, and
`ESConfig.es_target_modules` freezes what it does not select. The generation backend hands only trainable tensors to
the ES centre, so noise, update and the fp32 master cover exactly the evolved parameters, keyed by their stable
`named_parameters()` names (PEFT's `base_model.model....lora_A.default.weight` with an adapter), which every process
regenerates the same noise for.

LoRA starts with `B = 0`, so `W + B A = W`: a perturbation of `A` alone does not change the output until `B` has
moved, while a perturbation of `B` changes it through `eps_B A`. ES needs no gradient, so both are evolved from the
first step; the first updates move mostly `B` (the reward only sees `A` through second-order terms
`sigma^2 eps_B eps_A` while `B = 0`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

import torch
from accelerate.utils import is_peft_model
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.trainer_utils import set_seed
from transformers.utils import logging

from ..es.selection import select_parameters

logger = logging.get_logger(__name__)

__all__ = [
    "MERGED_DIR_NAME",
    "ScheduleOnlyOptimizer",
    "adapter_summary",
    "drift_weights",
    "load_model",
    "merged_model",
    "prepare_evolved_parameters",
    "save_merged_model",
]

MERGED_DIR_NAME = "merged"


class ScheduleOnlyOptimizer(torch.optim.Optimizer):
    """Carries the learning-rate schedule for `Trainer`; ES updates the weights itself, with no optimizer state."""

    def __init__(self, learning_rate: float):
        super().__init__([torch.zeros(0, requires_grad=True)], {"lr": learning_rate})

    def step(self, closure=None):
        return None


def load_model(model_id: str, args: Any) -> PreTrainedModel:
    """TRL's model creation from `args.model_init_kwargs` (dtype `"auto"` unless given; placed by Trainer)."""
    from trl.trainer.utils import create_model_from_path

    kwargs = dict(args.model_init_kwargs or {})
    kwargs["dtype"] = kwargs.get("dtype", kwargs.pop("torch_dtype", "auto"))
    kwargs.setdefault("trust_remote_code", args.trust_remote_code)
    kwargs.setdefault("device_map", None)  # every process holds the whole model on its own device
    return create_model_from_path(model_id, **kwargs)


def prepare_evolved_parameters(model: PreTrainedModel, args: Any, peft_config: Any = None) -> PreTrainedModel:
    """Wraps `model` with `peft_config` (as TRL's GRPOTrainer does) and freezes what `args.es_target_modules` leaves
    out, so that the trainable parameters are exactly those ES evolves.

    Args:
        model: The causal LM (or a `PeftModel`).
        args: The `ESConfig` (`seed`, `use_vllm`, `es_target_modules`, `save_merged_model`).
        peft_config: A `peft.PeftConfig` (e.g. `LoraConfig(...)`), or `None`.

    Returns:
        The model ES trains: the `PeftModel` when `peft_config` is given, else `model` itself.

    Raises:
        `ImportError`: `peft_config` given without `peft` installed.
        `TypeError` / `ValueError`: a wrong `peft_config`, a `PeftModel` with a second config, a selection that
            matches nothing, no trainable parameter, or a combination vLLM cannot evolve.
    """
    target_modules = getattr(args, "es_target_modules", None)
    if args.use_vllm and (peft_config is not None or is_peft_model(model) or target_modules is not None):
        raise ValueError(
            "use_vllm=True evolves every weight of the vLLM engine, so it cannot be combined with a PEFT adapter or "
            "es_target_modules. Use the transformers backend (use_vllm=False), or merge the adapter into the model "
            "first (`model = peft_model.merge_and_unload()`) and train the full model with vLLM."
        )
    if peft_config is not None:
        model = _wrap_with_peft(model, peft_config, seed=args.seed)
    if target_modules is not None:
        trainable = [name for name, param in model.named_parameters() if param.requires_grad]
        selected = set(select_parameters(trainable, target_modules))
        for name, param in model.named_parameters():
            if name not in selected:
                param.requires_grad_(False)
    num_evolved = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if num_evolved == 0:
        raise ValueError(
            "The model has no trainable parameter, so ES has nothing to evolve. Unfreeze the weights to train "
            "(`model.requires_grad_(True)`), or pass a peft_config."
        )
    if args.use_vllm and any(not p.requires_grad for p in model.parameters()):
        raise ValueError(
            "use_vllm=True evolves every weight, but some parameters of this model are frozen (requires_grad=False). "
            "Unfreeze them (`model.requires_grad_(True)`) or use the transformers backend (use_vllm=False)."
        )
    if getattr(args, "save_merged_model", False) and not is_peft_model(model):
        logger.warning("save_merged_model=True has no effect without a PEFT adapter: the full model is saved anyway.")
    total = sum(p.numel() for p in model.parameters())
    logger.info(f"ES evolves {num_evolved:,} of {total:,} parameters ({100 * num_evolved / total:.3g}%).")
    return model


def _wrap_with_peft(model: PreTrainedModel, peft_config: Any, seed: int) -> PreTrainedModel:
    try:
        from peft import PeftConfig, get_peft_model
    except ImportError as error:
        raise ImportError(
            "You passed `peft_config` but the `peft` library is not installed. Install it with "
            "`pip install 'hf_es[peft]'`."
        ) from error
    if not isinstance(peft_config, PeftConfig):
        raise TypeError(
            f"`peft_config` must be a `peft.PeftConfig` instance (e.g. `peft.LoraConfig`), got "
            f"{type(peft_config).__name__}."
        )
    if is_peft_model(model):
        raise ValueError(
            "You passed a `PeftModel` together with a `peft_config`. Either pass the `PeftModel` alone (its trainable "
            "adapter is evolved), or merge and unload its adapter (`model.merge_and_unload()`) and pass the base model "
            "with the new `peft_config`."
        )
    # Every process must draw the same adapter initialisation (LoRA's A is random): the centre is never broadcast.
    set_seed(seed)
    return get_peft_model(model, peft_config)


@torch.no_grad()
def merged_model(model: PreTrainedModel) -> PreTrainedModel:
    """A copy of a `PeftModel` with its adapter merged into the base weights (the model itself is untouched).

    Merging in place and unmerging would not give the base weights back bit for bit (in bf16 nor in fp32), so the
    merge runs on a copy: this needs the memory of a second model for as long as the copy lives.

    Args:
        model: A `PeftModel` (with the weights to merge in place: the ES centre, not a perturbed member).

    Returns:
        A plain `PreTrainedModel` (`merge_and_unload()` of the copy).
    """
    if not is_peft_model(model):
        raise ValueError(f"merged_model needs a PeftModel, got {type(model).__name__}.")
    return copy.deepcopy(model).merge_and_unload()


def save_merged_model(
    model: PreTrainedModel, output_dir: str, processing_class: PreTrainedTokenizerBase | None = None
) -> str:
    """Writes the merged full model (and tokenizer) of a `PeftModel` to `<output_dir>/merged`.

    Args:
        model: The `PeftModel` at the ES centre.
        output_dir: Where the adapter is saved.
        processing_class: Saved next to the merged weights so the folder loads on its own.

    Returns:
        The folder written.
    """
    merged_dir = os.path.join(output_dir, MERGED_DIR_NAME)
    merged = merged_model(model)
    merged.save_pretrained(merged_dir)
    if processing_class is not None:
        processing_class.save_pretrained(merged_dir)
    del merged
    return merged_dir


def drift_weights(model: PreTrainedModel, centre_weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The full set of tuned weights to compare with the base checkpoint, keyed by the base model's names.

    With a PEFT adapter these are the merged weights (adapter names do not exist in the base checkpoint); with a
    partial selection, the parameters ES does not evolve are included unchanged, so drift reports them as unchanged
    instead of missing.

    Args:
        model: The trained model at the ES centre.
        centre_weights: The ES centre's fp32 master (`centre.state_dict()`), more precise than bf16 live weights.

    Returns:
        Name -> tensor for every parameter of the (merged) model.
    """
    if is_peft_model(model):
        return {name: param.detach() for name, param in merged_model(model).named_parameters()}
    weights = {name: param.detach() for name, param in model.named_parameters()}
    weights.update(centre_weights)
    return weights


def adapter_summary(model: PreTrainedModel, target_modules: str | list[str] | None = None) -> dict[str, Any]:
    """What ES evolved, for the model card: the PEFT adapter's type, rank and target modules, or the selection.

    Args:
        model: The trained model.
        target_modules: `ESConfig.es_target_modules`.

    Returns:
        `evolved_parameters`, `total_parameters`, and either `peft_type`, `r`, `lora_alpha`, `target_modules`
        (with an adapter) or `es_target_modules`.
    """
    summary: dict[str, Any] = {
        "evolved_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "total_parameters": sum(p.numel() for p in model.parameters()),
    }
    if is_peft_model(model):
        config = model.peft_config[model.active_adapter]
        modules = getattr(config, "target_modules", None)
        summary.update(
            peft_type=str(getattr(config.peft_type, "value", config.peft_type)),
            r=getattr(config, "r", None),
            lora_alpha=getattr(config, "lora_alpha", None),
            target_modules=sorted(modules) if isinstance(modules, (set, list)) else modules,
        )
    elif target_modules is not None:
        summary["es_target_modules"] = target_modules
    return summary
