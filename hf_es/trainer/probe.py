"""Start-up proof that ES perturbations reach the computation, group by group of evolved weights.

ES writes noise into the tensors a backend's `live_weights()` returns. If an engine or a kernel computes with its
own copy or layout of a weight (a repacked Linear weight in vLLM's CPU runner, constants frozen by `torch.compile`
with `max_autotune`, a vendor layout, any future kernel), that noise never reaches generation and the run trains on
nothing, silently. Before the first step (and after a resume) [`check_perturbations_land`] perturbs each group of
evolved weights in turn, checks that the centre's next-token logits on a few short prompts change, restores, and
checks that they are bit-identical to before.

Cost: one forward for the reference, then per group one perturbation and restore (memory-bound passes over the
weights) and two forwards over the prompts: 9 forwards of 3 short prompts for a model without adapters (four groups),
measured at 6.7 s for SmolLM2-135M in bf16 on one shared CPU thread, 5.4 s of it forwards (`python -m bench.probe`).
This module sits in the trainer's layer because it groups weights with the drift report's name rules
([`hf_es.analysis.names.module_type`]).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..analysis.names import module_type
from ..generation.base import GenerationBackend

__all__ = ["PROBE_PROMPTS", "PerturbationProbe", "PerturbationsDoNotLand", "check_perturbations_land", "weight_group"]

logger = logging.getLogger(__name__)

PROBE_PROMPTS = ("The capital of France is", "def fibonacci(n):", "Question: what is 12 * 7?\nAnswer:")
# Large enough to move bf16 weights (a unit normal direction times 0.05 exceeds bf16's resolution at |w| ~ 1) and
# the logits of any working engine; the centre is restored exactly afterwards, so the size does no harm.
PROBE_SCALE = 0.05
PROBE_SEED = 0x5EED
_GROUPS = {
    "embedding": "embeddings / LM head",
    "lm_head": "embeddings / LM head",
    "norm": "norms",
    "mlp": "MLP",
    "bias": "other",
    "other": "other",
}
_ADAPTER_MARKERS = ("lora_", "modules_to_save", "prompt_encoder", "ia3_", "adaption_")


class PerturbationsDoNotLand(RuntimeError):
    """A group of evolved weights does not change what the backend computes, or does not restore exactly."""


@dataclass
class PerturbationProbe:
    """What the start-up check did.

    Attributes:
        groups: Evolved parameter names by weight group, in the order checked.
        skipped: Groups the perturbation leaves unchanged by design (e.g. norms with `low_rank_non_matrix_noise=
            "none"`), not checked.
        forwards: Number of `prompt_logits` calls.
        seconds: Wall time of the whole check.
    """

    groups: dict[str, list[str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    forwards: int = 0
    seconds: float = 0.0


def weight_group(name: str) -> str:
    """The group of an evolved parameter: `"attention"`, `"MLP"`, `"embeddings / LM head"`, `"norms"`, `"adapters"`
    or `"other"`.

    Args:
        name: Hugging Face parameter name (PEFT names included).

    Returns:
        The group name.
    """
    if any(marker in name for marker in _ADAPTER_MARKERS):
        return "adapters"
    kind = module_type(name)
    return "attention" if kind.startswith("attn_") else _GROUPS[kind]


def _likely_cause(backend: GenerationBackend) -> str:
    return (
        f"{type(backend).__name__} computes with another copy or layout of these weights than the tensors "
        "live_weights() returns (an engine that repacks or caches weights, e.g. vLLM's CPU runner without "
        "keep_live_cpu_weights, torch.compile freezing weights as constants (max_autotune), a vendor kernel layout, or "
        "a detached copy)"
    )


@torch.no_grad()
def check_perturbations_land(
    backend: GenerationBackend, prompts: Sequence[str] = PROBE_PROMPTS, scale: float = PROBE_SCALE
) -> PerturbationProbe:
    """Proves, group by group, that writing a member into the live weights changes the logits and restoring undoes it.

    Needs a centre (`backend.init_centre`, full or low rank); leaves the backend at the exact centre.

    Args:
        backend: The generation backend, with its centre initialised.
        prompts: A few short prompts.
        scale: The perturbation scale (`sign * sigma`) of the probe member.

    Returns:
        The [`PerturbationProbe`] (also logged).

    Raises:
        PerturbationsDoNotLand: Naming the weight group whose perturbation leaves the logits unchanged, or after whose
            restore the logits differ from the centre's, and the likely cause.
    """
    start = time.perf_counter()
    centre = backend.centre
    if centre is None:
        raise RuntimeError("check_perturbations_land needs the centre: call init_centre() first.")
    live = centre.parameters  # the tensors ES writes (what live_weights() returned when the centre was made)
    probe = PerturbationProbe()
    for name in live:
        probe.groups.setdefault(weight_group(name), []).append(name)
    prompts = list(prompts)
    if any(tensor.is_meta for tensor in live.values()):
        # A tensor-parallel or out-of-process vLLM engine: its weights live in its workers, out of this process's reach.
        logger.warning(
            "Cannot prove that perturbations reach generation: the engine's weights are in other processes."
        )
        probe.skipped = list(probe.groups)
        return probe
    try:
        reference = backend.prompt_logits(prompts)
    except NotImplementedError as error:
        logger.warning(f"Cannot prove that perturbations reach generation: {error}")
        probe.skipped = list(probe.groups)
        return probe
    probe.forwards = 1
    try:
        for group, names in probe.groups.items():
            members = set(names)
            backend.perturb(PROBE_SEED, scale)
            # Only this group moves: the others go back to the centre before anything is computed.
            for name, tensor in live.items():
                if name not in members:
                    tensor.copy_(centre.master[name])
            # Stops at the first moved tensor: a full comparison costs more than the forwards.
            moved = any(not torch.equal(live[name], centre.master[name].to(live[name].dtype)) for name in names)
            if not moved:
                probe.skipped.append(group)
                continue
            perturbed = backend.prompt_logits(prompts)
            backend.restore()
            restored = backend.prompt_logits(prompts)
            probe.forwards += 2
            if torch.equal(perturbed, reference):
                raise PerturbationsDoNotLand(
                    f"Perturbing the {group} weights ({len(names)} tensors, e.g. {names[0]!r}) leaves the logits "
                    f"unchanged: ES's in-place writes do not reach generation. Likely cause: {_likely_cause(backend)}. "
                    "Training would optimise nothing."
                )
            if not torch.equal(restored, reference):
                worst = float((restored - reference).abs().max())
                raise PerturbationsDoNotLand(
                    f"After restoring the {group} weights ({names[0]!r}, ...) the logits differ from the centre's "
                    f"(max |diff| {worst:.3g}): the engine keeps something computed with perturbed weights (a cache, "
                    "compiled constants) or is not deterministic, so members would not be evaluated at their own weights."
                )
    finally:
        backend.restore()
    probe.seconds = time.perf_counter() - start
    logger.info(
        f"Perturbations land: {', '.join(g for g in probe.groups if g not in probe.skipped)} change the logits and "
        f"restore bit-exactly ({probe.forwards} forwards over {len(prompts)} prompts, {probe.seconds:.2f} s"
        + (f"; not perturbed by this centre: {', '.join(probe.skipped)}" if probe.skipped else "")
        + ")."
    )
    return probe
