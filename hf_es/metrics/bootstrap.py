# Copyright 2026 The hf_es Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
"""
Paired bootstrap interval of the difference between two methods' per-problem scores, over problems and, when a
method has several training seeds, over seeds too.

Hand-written with numpy rather than `scipy.stats.bootstrap`: the resampling is hierarchical (seeds of each method,
then problems shared by both), which scipy's one-level resampling does not express.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["NO_DIFFERENCE", "PairedDifference", "paired_bootstrap"]

NO_DIFFERENCE = "no difference measured"
"""How a difference whose interval contains 0 is reported: neither agreement nor disagreement with a claim."""


@dataclass(frozen=True)
class PairedDifference:
    """The mean difference `a - b` with its percentile bootstrap interval.

    Attributes:
        difference: Observed mean over problems of (a's mean over its seeds) - (b's mean over its seeds).
        low, high: The interval's bounds.
        confidence: Its level (e.g. 0.95).
        num_problems: Problems the two methods share.
        num_seeds: Seeds of `a` and of `b`.
        n_boot: Resamples.
        seed: Seed of the resampling.
    """

    difference: float
    low: float
    high: float
    confidence: float
    num_problems: int
    num_seeds: tuple[int, int]
    n_boot: int
    seed: int

    @property
    def excludes_zero(self) -> bool:
        """Whether the interval lies entirely on one side of 0."""
        return self.low > 0 or self.high < 0

    def verdict(self, agrees: str = "agrees", disagrees: str = "disagrees") -> str:
        """`agrees` when the interval lies above 0 (a > b), `disagrees` below, [`NO_DIFFERENCE`] when it holds 0."""
        if not self.excludes_zero:
            return NO_DIFFERENCE
        return agrees if self.low > 0 else disagrees

    def fmt(self, scale: float = 100.0, digits: int = 1) -> str:
        """`+d [low, high]` times `scale`, e.g. `+7.8 [+1.6, +14.1]`."""
        return (
            f"{scale * self.difference:+.{digits}f} [{scale * self.low:+.{digits}f}, {scale * self.high:+.{digits}f}]"
        )

    def describe(self) -> str:
        """What the interval was computed over, e.g. `95% paired bootstrap over 32 problems and 2 vs 1 seeds`."""
        seeds = "" if self.num_seeds == (1, 1) else f" and {self.num_seeds[0]} vs {self.num_seeds[1]} seeds"
        return (
            f"{100 * self.confidence:g}% paired bootstrap over {self.num_problems} problems{seeds}, "
            f"{self.n_boot} resamples, seed {self.seed}"
        )


def _as_matrix(values: Sequence[float] | Sequence[Sequence[float]] | np.ndarray, name: str) -> np.ndarray:
    matrix = np.asarray(values, dtype=np.float64)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    if matrix.ndim != 2 or matrix.shape[0] == 0:
        raise ValueError(f"{name} must be (problems,) or (seeds, problems) scores, got shape {matrix.shape}.")
    if not np.isfinite(matrix).all():
        raise ValueError(f"{name} holds non-finite scores; leave out problems a method was not scored on.")
    return matrix


def paired_bootstrap(
    a: Sequence[float] | Sequence[Sequence[float]] | np.ndarray,
    b: Sequence[float] | Sequence[Sequence[float]] | np.ndarray,
    *,
    n_boot: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairedDifference:
    """Percentile bootstrap interval of `mean(a) - mean(b)` over the same problems.

    Each resample draws the problems with replacement (the same draw for both methods: the pairing) and, for a
    method with several seeds, its seeds with replacement (independently per method: seed `s` of one method is no
    pair of seed `s` of the other); the statistic is the mean over the drawn problems of the difference of the two
    methods' means over their drawn seeds. With one seed each this is the ordinary paired bootstrap of the mean
    per-problem difference.

    Args:
        a, b: Per-problem scores (e.g. per-problem Pass@K), `(problems,)` or `(seeds, problems)`, columns in the
            same problem order; the seed counts may differ.
        n_boot: Resamples.
        confidence: Level of the interval.
        seed: Seed of the resampling: the same inputs and seed give the same interval.

    Returns:
        [`PairedDifference`].
    """
    first, second = _as_matrix(a, "a"), _as_matrix(b, "b")
    if first.shape[1] != second.shape[1] or first.shape[1] == 0:
        raise ValueError(
            f"a and b must score the same, non-zero number of problems, got {first.shape} and {second.shape}."
        )
    if not 0 < confidence < 1 or n_boot < 1:
        raise ValueError(f"need 0 < confidence < 1 and n_boot >= 1, got {confidence} and {n_boot}.")
    rng = np.random.default_rng(seed)
    num_problems = first.shape[1]
    problems = rng.integers(0, num_problems, size=(n_boot, num_problems))

    def resampled_means(matrix: np.ndarray) -> np.ndarray:
        """`(n_boot, problems)`: the method's mean over its resampled seeds, for every problem."""
        if matrix.shape[0] == 1:
            return np.broadcast_to(matrix[0], (n_boot, num_problems))
        seeds = rng.integers(0, matrix.shape[0], size=(n_boot, matrix.shape[0]))
        return matrix[seeds].mean(axis=1)

    per_problem = resampled_means(first) - resampled_means(second)
    statistics = np.take_along_axis(per_problem, problems, axis=1).mean(axis=1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(statistics, [tail, 100 - tail])
    return PairedDifference(
        difference=float(first.mean(axis=0).mean() - second.mean(axis=0).mean()),
        low=float(low),
        high=float(high),
        confidence=confidence,
        num_problems=num_problems,
        num_seeds=(first.shape[0], second.shape[0]),
        n_boot=n_boot,
        seed=seed,
    )
