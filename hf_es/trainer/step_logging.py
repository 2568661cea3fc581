"""Per-step metrics of [`ESTrainer`]: one member's stats, the step's metrics, the merge into `Trainer.log`, and the
completions sample printed with `log_completions`. Metric names follow TRL's `GRPOTrainer`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..rewards import get_reward_stats
from .step_record import MemberStats, StepRecord

__all__ = ["add_step_metrics", "completions_sample", "member_stats", "merge_train_metrics", "print_completions"]

# Verifier failure counters copied into the logs (timeouts, errors, missing answers; this process).
_REWARD_COUNTERS = ("timeouts", "errors", "no_answer", "untimed")


def member_stats(result: Any, scores: Any, num_reward_funcs: int) -> MemberStats:
    """The few numbers one member contributes to the step: mean reward (NaN when unscorable), per-function means,
    completion lengths and token counts of `result` (a `GenerationResult`)."""
    lengths = [len(ids) for ids in result.completion_ids]
    return MemberStats(
        reward=scores.mean() if scores is not None else float("nan"),
        reward_per_function=scores.per_function.nanmean(dim=0).tolist() if scores else [0.0] * num_reward_funcs,
        mean_length=sum(lengths) / len(lengths),
        clipped_ratio=sum(result.truncated) / len(result.truncated),
        num_tokens=float(result.num_tokens),
        num_unscorable=float((~scores.scorable).sum()) if scores is not None else 0.0,
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
