"""Verifier-projected diversity of an ES population: how differently its members succeed across the step's prompts.

From the `(members, prompts)` matrix of success rates p_i(x) (the fraction of member i's completions of prompt x that
the verifier judges correct), [`population_diversity`] returns, each averaged over prompts:

- coverage, `1 - prod_i (1 - p_i(x))`: the chance that at least one member, sampling once, solves x;
- the same-mean reference, `1 - (1 - pbar(x))^n`, with `pbar(x)` the members' mean rate: the coverage of n members
  that all succeed at the mean rate. By the AM-GM inequality coverage is never below it, so their gap (coverage minus
  reference) is >= 0, and 0 exactly when every member has the same rate on every prompt;
- the Jensen-Shannon diversity of the members' Bernoulli success distributions, `H(pbar(x)) - mean_i H(p_i(x))` in
  nats, with `H(p) = -p ln p - (1 - p) ln(1 - p)`: the mutual information between "which member" (uniform) and
  "success", in `[0, ln 2]`; 0 when all members agree, `ln 2` when half always succeed and half always fail.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["PopulationDiversity", "population_diversity"]


@dataclass(frozen=True)
class PopulationDiversity:
    """The population's diversity numbers of one step (NaN when no prompt has a scorable completion).

    Attributes:
        coverage: Mean over prompts of `1 - prod_i (1 - p_i(x))`.
        coverage_same_mean: Mean over prompts of `1 - (1 - pbar(x))^n(x)`.
        coverage_gap: `coverage - coverage_same_mean` (>= 0).
        js_diversity: Mean over prompts of `H(pbar(x)) - mean_i H(p_i(x))`, in nats.
        num_prompts: Prompts that entered the means (those with at least one member's rate).
    """

    coverage: float
    coverage_same_mean: float
    coverage_gap: float
    js_diversity: float
    num_prompts: int

    def metrics(self, prefix: str = "population/") -> dict[str, float]:
        """The four numbers under their logged names (`population/coverage`, ...)."""
        return {
            f"{prefix}coverage": self.coverage,
            f"{prefix}coverage_same_mean": self.coverage_same_mean,
            f"{prefix}coverage_gap": self.coverage_gap,
            f"{prefix}js_diversity": self.js_diversity,
        }


def _bernoulli_entropy(p: torch.Tensor) -> torch.Tensor:
    # `entr` is -x ln x with entr(0) = 0, so certain outcomes have entropy 0 rather than NaN.
    return torch.special.entr(p) + torch.special.entr(1 - p)


def population_diversity(success: torch.Tensor) -> PopulationDiversity:
    """Coverage, its same-mean reference and the Jensen-Shannon diversity of a population's success rates.

    Per prompt x, with M(x) the members whose rate is known (finite) and n(x) = |M(x)|:

        coverage(x)  = 1 - prod_{i in M(x)} (1 - p_i(x))
        same_mean(x) = 1 - (1 - pbar(x))^n(x),      pbar(x) = mean_{i in M(x)} p_i(x)
        js(x)        = H(pbar(x)) - mean_{i in M(x)} H(p_i(x))   (nats)

    each averaged over the prompts with n(x) >= 1. A NaN entry (member i had no scorable completion of x: every
    reward function returned `None`, or the member was left out of the update) is excluded from that prompt only;
    a prompt without any known rate is excluded from the averages.

    Args:
        success: `(members, prompts)` success rates in `[0, 1]`, NaN where unknown.

    Returns:
        [`PopulationDiversity`]; all NaN (and `num_prompts=0`) when no entry is known.

    Raises:
        ValueError: If `success` is not 2-D or a known rate lies outside `[0, 1]`.
    """
    if success.dim() != 2:
        raise ValueError(f"success must be a (members, prompts) matrix, got shape {tuple(success.shape)}.")
    p = success.to(torch.float64)
    known = ~torch.isnan(p)
    if bool(((p[known] < 0) | (p[known] > 1)).any()):
        raise ValueError("success rates must lie in [0, 1] (NaN for unknown entries).")
    count = known.sum(dim=0)
    prompts = count > 0
    if not bool(prompts.any()):
        nan = float("nan")
        return PopulationDiversity(nan, nan, nan, nan, 0)
    p, known, count = p[:, prompts], known[:, prompts], count[prompts].to(torch.float64)
    # Unknown entries become neutral elements: a factor 1 in the product, 0 in the sums.
    failure = torch.where(known, 1 - p, torch.ones_like(p))
    coverage = 1 - failure.prod(dim=0)
    mean = torch.where(known, p, torch.zeros_like(p)).sum(dim=0) / count
    same_mean = 1 - (1 - mean).pow(count)
    member_entropy = torch.where(known, _bernoulli_entropy(p.nan_to_num(0.0)), torch.zeros_like(p)).sum(dim=0)
    js = _bernoulli_entropy(mean) - member_entropy / count
    coverage_value, same_mean_value = float(coverage.mean()), float(same_mean.mean())
    return PopulationDiversity(
        coverage=coverage_value,
        coverage_same_mean=same_mean_value,
        coverage_gap=float((coverage - same_mean).mean()),
        js_diversity=float(js.clamp_min(0.0).mean()),  # >= 0 by concavity of H; clamp rounding below 0
        num_prompts=int(prompts.sum()),
    )
