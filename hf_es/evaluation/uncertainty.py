"""Comparisons of evaluated checkpoints with their uncertainty: per-problem scores from the results file and the
paired bootstrap interval ([`hf_es.metrics.bootstrap`]) of the difference, over problems and training seeds."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..metrics.bootstrap import PairedDifference, paired_bootstrap
from ..metrics.estimators import estimate_pass_at_k

__all__ = ["compare_checkpoints", "compare_entries", "comparison_line", "per_problem_scores"]


def per_problem_scores(entry: Mapping[str, Any], metric: str, k: int | None = None) -> dict[str, float] | None:
    """One checkpoint's score on each problem of its summary, in the results file's problem order.

    Args:
        entry: A checkpoint's entry of the results JSON (`problems` and `summary`).
        metric: `"pass@k"` (the unbiased estimate from the problem's `num_correct` of `num_samples`), `"maj@k"` or
            `"greedy_accuracy"`.
        k: K of `pass@k` / `maj@k`.

    Returns:
        `{problem id: score}` over the problems the summary counts, or `None` when a problem lacks the metric.
    """
    records = list((entry.get("problems") or {}).items())
    # The summary counts the dataset's problems, stored first; any after them come from a larger earlier selection.
    records = records[: (entry.get("summary") or {}).get("num_problems", len(records))]
    scores: dict[str, float] = {}
    for problem, record in records:
        if metric == "pass@k":
            scores[problem] = estimate_pass_at_k(record["num_samples"], record["num_correct"], k)
        elif metric == "maj@k":
            if record.get("maj_correct") is None:
                return None
            scores[problem] = float(record["maj_correct"][k - 1])
        elif metric == "greedy_accuracy":
            if record.get("greedy_correct") is None:
                return None
            scores[problem] = float(record["greedy_correct"])
        else:
            raise ValueError(f"Unknown metric {metric!r}: use 'pass@k', 'maj@k' or 'greedy_accuracy'.")
    return scores


def compare_entries(
    first: Sequence[Mapping[str, Any]],
    second: Sequence[Mapping[str, Any]],
    metric: str,
    k: int | None = None,
    *,
    n_boot: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairedDifference | None:
    """The paired bootstrap interval of `first - second` on the problems every entry scored.

    Args:
        first, second: Each method's checkpoint entries, one per training seed (one for a single checkpoint).
        metric, k: As in [`per_problem_scores`].
        n_boot, confidence, seed: Of [`paired_bootstrap`].

    Returns:
        The [`PairedDifference`], or `None` when an entry lacks the metric or no problem is shared.
    """
    tables = [per_problem_scores(entry, metric, k) for entry in (*first, *second)]
    if not first or not second or any(table is None for table in tables):
        return None
    shared = [problem for problem in tables[0] if all(problem in table for table in tables[1:])]
    if not shared:
        return None
    rows = [[table[problem] for problem in shared] for table in tables]
    return paired_bootstrap(rows[: len(first)], rows[len(first) :], n_boot=n_boot, confidence=confidence, seed=seed)


def comparison_line(first: str, second: str, label: str, difference: PairedDifference | None) -> str:
    """One line, in fractions of problems: `B - A, pass@1: +0.031 [-0.012, +0.074] (...): no difference measured`."""
    if difference is None:
        return f"{first} - {second}, {label}: not comparable (no shared problems with this metric)"
    verdict = difference.verdict(f"{first} higher", f"{second} higher")
    return f"{first} - {second}, {label}: {difference.fmt(1.0, 3)} ({difference.describe()}): {verdict}"


def compare_checkpoints(
    results: Mapping[str, Any], models: Sequence[str], num_samples: int, *, n_boot: int = 10_000, seed: int = 0
) -> list[dict[str, Any]]:
    """Every checkpoint after the first against the first, at Pass@1, Pass@M and greedy accuracy (when evaluated).

    Args:
        results: The results JSON.
        models: Checkpoint names, the reference first.
        num_samples: M.
        n_boot, seed: Of [`paired_bootstrap`].

    Returns:
        One dict per comparison: `first`, `second`, `metric`, the [`PairedDifference`] fields and `line` (from
        [`comparison_line`]).
    """
    metrics = [("pass@k", k, f"pass@{k}") for k in sorted({1, num_samples})] + [("greedy_accuracy", None, "greedy")]
    reference, rows = models[0], []
    for name in models[1:]:
        entries = [results["checkpoints"][key] for key in (name, reference)]
        for metric, k, label in metrics:
            difference = compare_entries(entries[:1], entries[1:], metric, k, n_boot=n_boot, seed=seed)
            if difference is None and metric == "greedy_accuracy":
                continue
            fields = dataclasses.asdict(difference) if difference is not None else {}
            line = comparison_line(name, reference, label, difference)
            rows.append({"first": name, "second": reference, "metric": label, **fields, "line": line})
    return rows
