"""Per-step metrics of [`ESTrainer`]: one member's stats, the step's metrics, the merge into `Trainer.log`, and the
completions sample printed with `log_completions`. Metric names follow TRL's `GRPOTrainer`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..rewards import get_reward_stats
from .step_record import MemberStats, StepRecord

__all__ = [
    "add_step_metrics",
    "completions_sample",
    "member_stats",
    "merge_train_metrics",
    "print_completions",
    "reaches_threshold",
    "success_rates",
    "resolve_success_threshold",
]

# Verifier failure counters copied into the logs (timeouts, errors, missing answers; this process).
_REWARD_COUNTERS = ("timeouts", "errors", "no_answer", "untimed")


def resolve_success_threshold(configured: float | None, reward_weights: torch.Tensor) -> float:
    """The total reward at or above which a completion counts as correct (`ESConfig.success_threshold`).

    Args:
        configured: The configured threshold, or `None` for the default: the largest total that verifiers scoring
            in `[0, 1]` can give, the sum of the positive reward weights (every positively weighted function gives 1,
            every negatively weighted one 0). With one binary verifier and the default weight that is 1.0: correct
            means "reward equals its maximum".
        reward_weights: `(functions,)` weights of the total.
    """
    if configured is not None:
        return float(configured)
    return float(reward_weights.clamp_min(0).sum())


def reaches_threshold(total: torch.Tensor, threshold: float) -> torch.Tensor:
    """Whether each total reward counts as correct (`False` for NaN).

    Args:
        total: Weighted total rewards.
        threshold: From [`resolve_success_threshold`].
    """
    # Weighted sums round (0.1 + 0.2 is no float 0.3): a total within 1e-9 relative of the threshold reaches it.
    return total >= threshold - 1e-9 * max(1.0, abs(threshold))


def success_rates(scores: Any, num_prompts: int, threshold: float) -> list[float]:
    """Per prompt, the fraction of its scorable completions whose total reward reaches `threshold`; NaN for a prompt
    without a scorable completion, and for every prompt when `scores` is `None` (the member is left out).

    Args:
        scores: The member's `Scores` (completions grouped by prompt, as generated), or `None`.
        num_prompts: Prompts of the step.
        threshold: From [`resolve_success_threshold`].
    """
    if scores is None:
        return [float("nan")] * num_prompts
    total = scores.total.reshape(num_prompts, -1)
    scorable = ~torch.isnan(total)
    correct = reaches_threshold(total, threshold) & scorable
    counts = scorable.sum(dim=1).to(torch.float64)
    rates = correct.sum(dim=1).to(torch.float64) / counts
    return torch.where(counts > 0, rates, torch.full_like(rates, float("nan"))).tolist()


def member_stats(
    result: Any, scores: Any, num_reward_funcs: int, *, num_prompts: int, threshold: float
) -> MemberStats:
    """The few numbers one member contributes to the step: mean reward (NaN when unscorable), per-function means,
    completion lengths and token counts of `result` (a `GenerationResult`), and its success rate per prompt
    ([`success_rates`] at `threshold`, from [`resolve_success_threshold`])."""
    lengths = [len(ids) for ids in result.completion_ids]
    return MemberStats(
        reward=scores.mean() if scores is not None else float("nan"),
        reward_per_function=scores.per_function.nanmean(dim=0).tolist() if scores else [0.0] * num_reward_funcs,
        mean_length=sum(lengths) / len(lengths),
        clipped_ratio=sum(result.truncated) / len(result.truncated),
        num_tokens=float(result.num_tokens),
        num_unscorable=float((~scores.scorable).sum()) if scores is not None else 0.0,
        success=success_rates(scores, num_prompts, threshold),
    )


def completions_sample(
    prompt_texts: list[str], result: Any, scores: Any, num_generations: int, reward_func_names: list[str]
) -> dict[str, Any]:
    """The prompts, completions and per-function rewards of one member, as `print_completions` reads them."""
    return {
        "prompts": [p for p in prompt_texts for _ in range(num_generations)],
        "completions": result.completions,
        "rewards": {n: scores.per_function[:, j].tolist() for j, n in enumerate(reward_func_names)},
    }


def add_step_metrics(
    metrics: Mapping[str, list[float]],
    record: StepRecord,
    reward_func_names: list[str],
    skipped: bool,
    update_norm: float,
    timing: Mapping[str, float],
    wall: float,
) -> int:
    """Appends one step's metrics to `metrics` (lists averaged at the next log); returns the step's generated
    tokens."""
    step_metrics = record.metrics(reward_func_names)
    for key, value in step_metrics.items():
        metrics[key].append(value)
    metrics["update_norm"].append(update_norm)
    metrics["frac_zero_std"].append(1.0 if skipped else 0.0)
    tokens = step_metrics["num_generated_tokens"]
    for key, seconds in timing.items():
        metrics[f"timing/{key}"].append(seconds)
    metrics["timing/step"].append(wall)
    metrics["tokens_per_second"].append(tokens / wall if wall > 0 else 0.0)
    return int(tokens)


def merge_train_metrics(
    logs: dict[str, float],
    metrics: Mapping[str, list[float]],
    total_generated_tokens: int,
    reward_funcs: list[Callable],
) -> None:
    """Adds the interval's averaged step metrics and the verifiers' failure counters (reset) to `logs`, and drops
    `grad_norm` (ES has no gradients)."""
    for key, values in metrics.items():
        if values:
            logs[key] = sum(values) / len(values)
    logs["total_generated_tokens"] = total_generated_tokens
    logs.pop("grad_norm", None)
    for func in reward_funcs:
        for key, value in get_reward_stats(func, reset=True).items():
            if key.rsplit("/", 1)[-1] in _REWARD_COUNTERS:
                logs[key] = value


def print_completions(samples: dict[str, Any], count: int | None, step: int) -> None:
    """TRL's rich table of a [`completions_sample`] (plain lines when `rich` is not installed)."""
    try:
        from trl.trainer.utils import print_prompt_completions_sample

        print_prompt_completions_sample(
            samples["prompts"], samples["completions"], samples["rewards"], None, step, count
        )
    except ImportError:  # `rich` is not installed
        for prompt, completion in list(zip(samples["prompts"], samples["completions"]))[: count or None]:
            print(f"step {step} | prompt={prompt[-80:]!r} | completion={completion[:200]!r}")
