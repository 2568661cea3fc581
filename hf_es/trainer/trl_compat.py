"""`GRPOTrainer` constructor arguments that have no ES meaning: accepted by name (TRL's own scripts pass them, often
as `None`), refused with the reason and what to do instead when they are set.

The table below is the one place that says so; `tests/trainer/test_trl_signature.py` derives the argument list from
the installed TRL so that an upgrade that adds an argument fails until it is handled here or in `ESTrainer`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GRPO_ONLY_ARGUMENTS", "refuse_grpo_only_arguments"]

GRPO_ONLY_ARGUMENTS: dict[str, str] = {
    "quantization_config": (
        "ES perturbs and updates plain floating-point weights in place with Gaussian noise; quantized (e.g. "
        "bitsandbytes 4/8-bit) weights cannot carry a sigma-sized perturbation or an fp32 update. Load the model in "
        "bf16/fp32 and drop quantization_config; to save memory evolve an adapter (peft_config=...) or use "
        "ESConfig(perturbation='low_rank')."
    ),
    "tools": (
        "ESTrainer generates single-turn completions with its colocated engine, so tool calls inside generation "
        "are not run. Score tool use in a reward function (reward_funcs), or put tool results into the prompts."
    ),
    "rollout_func": (
        "ES must generate with the perturbed weights of each population member, which a custom rollout function "
        "cannot see. Wrap your generation as an hf_es GenerationBackend and pass generation_backend=... (see "
        "docs/ENGINES.md)."
    ),
    "environment_factory": (
        "multi-turn environments are not part of ES generation (one completion per prompt and member). Evaluate the "
        "environment's outcome in a reward function, or pass a custom generation_backend=... (see docs/ENGINES.md)."
    ),
}
"""`GRPOTrainer.__init__` argument -> why ES refuses a non-`None` value and what to do instead."""


def refuse_grpo_only_arguments(**arguments: Any) -> None:
    """Raises a `ValueError` naming each GRPO-only constructor argument that is set, with the reason and the fix.

    Args:
        **arguments: Argument name -> value, as passed to `ESTrainer` (`None` is accepted).
    """
    unknown = set(arguments) - set(GRPO_ONLY_ARGUMENTS)
    if unknown:
        raise TypeError(f"Not GRPO-only arguments: {sorted(unknown)}")
    given = [name for name, value in arguments.items() if value is not None]
    if given:
        details = " ".join(f"`{name}`: {GRPO_ONLY_ARGUMENTS[name]}" for name in given)
        raise ValueError(f"ESTrainer got {', '.join(given)}, which has no Evolution Strategies meaning. {details}")
