"""Rewards summed over the completions of one process and reduced over processes into evaluation metrics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["RewardTally"]


class RewardTally:
    """Accumulates rewards over completions on one process and turns them into evaluation metrics.

    Args:
        reward_func_names: Names of the reward functions, in order.
    """

    def __init__(self, reward_func_names: Sequence[str]):
        self.names = list(reward_func_names)
        num = len(self.names)
        # total sum | scorable completions | per-function sums | per-function counts | completion tokens | completions
        self.sums = torch.zeros(2 * num + 4, dtype=torch.float64)

    def add(self, per_function: torch.Tensor, total: torch.Tensor, completion_ids: Sequence[Sequence[int]]) -> None:
        """Adds one batch: per-function rewards `(completions, funcs)` with NaN for "not applicable", weighted
        totals `(completions,)` (NaN: unscorable) and the completions' token ids."""
        num = len(self.names)
        scorable = ~torch.isnan(total)
        self.sums[0] += total[scorable].sum()
        self.sums[1] += scorable.sum()
        self.sums[2 : 2 + num] += per_function.nan_to_num(0.0).sum(dim=0)
        self.sums[2 + num : 2 + 2 * num] += (~per_function.isnan()).sum(dim=0)
        self.sums[2 + 2 * num] += sum(len(ids) for ids in completion_ids)
        self.sums[3 + 2 * num] += len(completion_ids)

    def metrics(self, accelerator: Any, prefix: str = "eval") -> dict[str, float]:
        """Sums over all processes (one all-reduce) and returns `{prefix}_reward` (mean over scorable completions),
        `{prefix}_rewards/<fn>/mean` and `{prefix}_completions/mean_length`."""
        sums = self.sums
        if accelerator.num_processes > 1:
            sums = accelerator.reduce(sums.to(accelerator.device), reduction="sum").cpu()
        num = len(self.names)
        scorable = float(sums[1])
        metrics = {f"{prefix}_reward": float(sums[0]) / scorable if scorable else float("nan")}
        for j, name in enumerate(self.names):
            applicable = float(sums[2 + num + j])
            if applicable:
                metrics[f"{prefix}_rewards/{name}/mean"] = float(sums[2 + j]) / applicable
        metrics[f"{prefix}_completions/mean_length"] = float(sums[2 + 2 * num]) / max(float(sums[3 + 2 * num]), 1.0)
        return metrics
