# Copyright 2026 The hf_es Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
"""Pure-Python Pass@K estimator (no dependency on `evaluate`, `datasets` or `numpy`).

This file lives next to `pass_at_k.py` so that the metric folder is self-contained: `evaluate` copies both files into
its module cache (relative import), and the folder can be pushed as-is to a Hub Space.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from fractions import Fraction

__all__ = [
    "counts_from_correctness",
    "estimate_pass_at_k",
    "estimate_pass_at_k_exact",
    "estimate_pass_at_k_per_problem",
    "normalize_ks",
    "validate_counts",
]


def _check_one(num_samples: int, num_correct: int, k: int, problem: str = "") -> None:
    where = f" for {problem}" if problem else ""
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive integer{where}, got {num_samples!r}.")
    if isinstance(num_correct, bool) or not isinstance(num_correct, int) or not 0 <= num_correct <= num_samples:
        raise ValueError(
            f"num_correct must be an integer in [0, num_samples={num_samples}]{where}, got {num_correct!r}."
        )
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}.")
    if k > num_samples:
        raise ValueError(
            f"k={k} is larger than the number of samples n={num_samples}{where}: Pass@{k} cannot be estimated from "
            f"{num_samples} samples. Sample at least {k} completions for every problem, or lower k."
        )


def estimate_pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    r"""
    Unbiased Pass@K estimate for one problem (Chen et al., 2021).

    Pass@K = 1 - C(n - c, k) / C(n, k), computed in the numerically stable product form
    1 - \prod_{i = n - c + 1}^{n} (1 - k / i), which never forms a binomial coefficient and so cannot overflow
    (n = 1,024 or more is fine). The result is within a few ulps times `num_correct` of the exact value.

    Args:
        num_samples (`int`):
            Number of sampled completions `n` for the problem (`n >= 1`).
        num_correct (`int`):
            Number of those completions that are correct, `0 <= c <= n`.
        k (`int`):
            The `K` of Pass@K, `1 <= k <= n`.

    Returns:
        `float`: the probability that at least one of `k` completions drawn without replacement from the `n` is correct.

    Raises:
        `ValueError`: if `k > n` (Pass@K is not estimable) or if any argument is out of range.

    Example:

    ```python
    >>> from hf_es.metrics.estimators import estimate_pass_at_k
    >>> estimate_pass_at_k(num_samples=4, num_correct=1, k=2)
    0.5
    ```
    """
    _check_one(num_samples, num_correct, k)
    if num_samples - num_correct < k:
        return 1.0
    product = 1.0
    for i in range(num_samples - num_correct + 1, num_samples + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def estimate_pass_at_k_exact(num_samples: int, num_correct: int, k: int) -> Fraction:
    """
    Exact Pass@K as a `fractions.Fraction`, 1 - C(n - c, k) / C(n, k) with arbitrary-precision integers.

    Slow for large `n`; meant as a reference to check [`estimate_pass_at_k`] against.

    Args:
        num_samples (`int`): Number of samples `n`.
        num_correct (`int`): Number of correct samples `c`.
        k (`int`): The `K` of Pass@K, `1 <= k <= n`.

    Returns:
        `fractions.Fraction`: the exact estimate.
    """
    _check_one(num_samples, num_correct, k)
    return 1 - Fraction(math.comb(num_samples - num_correct, k), math.comb(num_samples, k))


def normalize_ks(k: int | Iterable[int]) -> list[int]:
    """
    Turn `k` (an int or an iterable of ints) into a sorted list of distinct positive ints.

    Args:
        k (`int` or iterable of `int`): the requested K values.

    Returns:
        `list[int]`: sorted, de-duplicated K values.
    """
    ks = [k] if isinstance(k, int) else list(k)
    if not ks:
        raise ValueError("k must be a positive integer or a non-empty list of positive integers.")
    for value in ks:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"k must be a positive integer or a list of positive integers, got {value!r}.")
    return sorted(set(ks))


def _problem_name(index: int, problem_ids: Sequence[Hashable] | None) -> str:
    if problem_ids is None:
        return f"problem {index}"
    return f"problem {problem_ids[index]!r} (index {index})"


def validate_counts(
    num_samples: Sequence[int],
    num_correct: Sequence[int],
    k: int | Iterable[int],
    problem_ids: Sequence[Hashable] | None = None,
) -> list[int]:
    """
    Check per-problem counts before estimating; every problem must have at least `max(k)` samples.

    Args:
        num_samples (`Sequence[int]`): `n` per problem.
        num_correct (`Sequence[int]`): `c` per problem.
        k (`int` or iterable of `int`): the requested K values.
        problem_ids (`Sequence`, *optional*): names of the problems, used in error messages.

    Returns:
        `list[int]`: the normalised K values (see [`normalize_ks`]).

    Raises:
        `ValueError`: naming the first offending problem (never silently skips it).
    """
    ks = normalize_ks(k)
    if len(num_samples) != len(num_correct):
        raise ValueError(
            f"num_samples and num_correct must have one entry per problem, got {len(num_samples)} and "
            f"{len(num_correct)}."
        )
    if problem_ids is not None and len(problem_ids) != len(num_samples):
        raise ValueError(f"problem_ids has {len(problem_ids)} entries for {len(num_samples)} problems.")
    if len(num_samples) == 0:
        raise ValueError("Pass@K needs at least one problem, got none.")
    for index, (n, c) in enumerate(zip(num_samples, num_correct)):
        _check_one(int(n), int(c), ks[-1], _problem_name(index, problem_ids))
    return ks


def estimate_pass_at_k_per_problem(
    num_samples: Sequence[int],
    num_correct: Sequence[int],
    k: int | Iterable[int],
    problem_ids: Sequence[Hashable] | None = None,
) -> dict[int, list[float]]:
    """
    Pass@K of every problem, for every requested K.

    Args:
        num_samples (`Sequence[int]`): `n` per problem (may differ between problems).
        num_correct (`Sequence[int]`): `c` per problem.
        k (`int` or iterable of `int`): the K values.
        problem_ids (`Sequence`, *optional*): problem names for error messages.

    Returns:
        `dict[int, list[float]]`: maps each K to the per-problem estimates, in problem order. The benchmark Pass@K
        is the mean of each list.

    Raises:
        `ValueError`: if some problem has fewer than `max(k)` samples (the message names it), or counts are invalid.
    """
    ks = validate_counts(num_samples, num_correct, k, problem_ids)
    return {kk: [estimate_pass_at_k(int(n), int(c), kk) for n, c in zip(num_samples, num_correct)] for kk in ks}


def counts_from_correctness(
    predictions: Sequence[Sequence[bool | int | float]],
) -> tuple[list[int], list[int]]:
    """
    Convert per-sample correctness (one list per problem) into `(num_samples, num_correct)`.

    Args:
        predictions (`Sequence[Sequence[bool | int | float]]`):
            For each problem, one entry per sampled completion: `True`/`1` if correct, `False`/`0` otherwise.
            Rewards of `1.0` / `0.0` are accepted; any other value is an error (threshold partial rewards yourself).

    Returns:
        `tuple[list[int], list[int]]`: `num_samples` and `num_correct` per problem.
    """
    num_samples, num_correct = [], []
    for index, samples in enumerate(predictions):
        if isinstance(samples, (str, bytes)) or not isinstance(samples, Iterable):
            raise ValueError(f"predictions[{index}] must be a list of per-sample correctness values, got {samples!r}.")
        samples = list(samples)
        correct = 0
        for value in samples:
            if value is True or value is False or value in (0, 1):
                correct += int(bool(value))
            else:
                raise ValueError(
                    f"predictions[{index}] contains {value!r}; expected booleans (or 0/1 rewards) marking each "
                    "sample correct or not."
                )
        num_samples.append(len(samples))
        num_correct.append(correct)
    return num_samples, num_correct
