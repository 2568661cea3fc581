"""Pieces shared by `ESTrainer` and the GRPO baseline trainer (`scripts/train_grpo.py`), so both evaluate and save
the same way."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from transformers.trainer import TRAINING_ARGS_NAME

__all__ = ["RewardTally", "write_redacted_training_args"]


class RewardTally:
    """Accumulates rewards over completions on one process and turns them into evaluation metrics.

    Args:
        reward_func_names: Names of the reward functions, in order.
    """

    def __init__(self, reward_func_names: Sequence[str]):
        self.names = list(reward_func_names)
        num = len(self.names)
        # reward sum | per-function sums | per-function applicable counts | completion tokens | completions
        self.sums = torch.zeros(2 * num + 3, dtype=torch.float64)

    def add(self, per_function: torch.Tensor, total: torch.Tensor, completion_ids: Sequence[Sequence[int]]) -> None:
        """Adds one batch: per-function rewards `(completions, funcs)` with NaN for "not applicable", weighted
        totals `(completions,)` and the completions' token ids."""
        num = len(self.names)
        self.sums[0] += total.sum()
        self.sums[1 : 1 + num] += per_function.nan_to_num(0.0).sum(dim=0)
        self.sums[1 + num : 1 + 2 * num] += (~per_function.isnan()).sum(dim=0)
        self.sums[1 + 2 * num] += sum(len(ids) for ids in completion_ids)
        self.sums[2 + 2 * num] += len(completion_ids)

    def metrics(self, accelerator: Any, prefix: str = "eval") -> dict[str, float]:
        """Sums over all processes (one all-reduce) and returns `{prefix}_reward`, `{prefix}_rewards/<fn>/mean` and
        `{prefix}_completions/mean_length`."""
        sums = self.sums
        if accelerator.num_processes > 1:
            sums = accelerator.reduce(sums.to(accelerator.device), reduction="sum").cpu()
        num = len(self.names)
        count = max(float(sums[2 + 2 * num]), 1.0)
        metrics = {f"{prefix}_reward": float(sums[0]) / count}
        for j, name in enumerate(self.names):
            applicable = float(sums[1 + num + j])
            if applicable:
                metrics[f"{prefix}_rewards/{name}/mean"] = float(sums[1 + j]) / applicable
        metrics[f"{prefix}_completions/mean_length"] = float(sums[1 + 2 * num]) / count
        return metrics


def write_redacted_training_args(output_dir: str, args: Any) -> None:
    """Replaces `Trainer`'s pickled `training_args.bin` (which holds the Hub token) with redacted JSON."""
    pickled = os.path.join(output_dir, TRAINING_ARGS_NAME)
    if os.path.isfile(pickled):
        os.remove(pickled)
    with open(os.path.join(output_dir, "training_args.json"), "w") as f:
        f.write(args.to_json_string())
