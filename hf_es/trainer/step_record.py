"""The typed record of one ES step: what each member scored, and whether a process failed.

Each process fills the members it evaluated; [`StepRecord.all_reduce`] sums the records of all processes in one
collective (members not evaluated on a process hold zeros there), packing the fields into one tensor only inside
[`StepRecord.to_tensor`] / [`StepRecord.from_tensor`]. That tensor is `(N + 1) x (F + 5 + B)` float64 for N members,
F reward functions and B prompts per step: besides each member's rewards and completion counts, its success rate on
each prompt (the N x B matrix of [`hf_es.es.population_diversity`], 8 N B bytes, e.g. 16 KiB for N=32, B=64), so
what crosses processes never depends on the model's size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ..es import population_diversity

__all__ = ["MemberStats", "StepRecord"]


@dataclass
class MemberStats:
    """What one population member produced in one step.

    Attributes:
        reward: Mean total reward over its scorable completions; NaN when the member is left out of the update
            (no scorable completion, or `reward_failure="skip_member"`).
        reward_per_function: Mean of each reward function over the completions it scored (NaN: none).
        mean_length: Mean completion length in tokens.
        clipped_ratio: Fraction of completions cut at `max_completion_length`.
        num_tokens: Tokens generated.
        num_unscorable: Completions for which every reward function returned `None`.
        success: Per prompt of the step, the fraction of its scorable completions judged correct (see
            `ESConfig.success_threshold`); NaN for a prompt without one, and everywhere when the member is left out.
    """

    reward: float = 0.0
    reward_per_function: list[float] = field(default_factory=list)
    mean_length: float = 0.0
    clipped_ratio: float = 0.0
    num_tokens: float = 0.0
    num_unscorable: float = 0.0
    success: list[float] = field(default_factory=list)

    def values(self) -> list[float]:
        return [
            self.reward,
            *self.reward_per_function,
            self.mean_length,
            self.clipped_ratio,
            self.num_tokens,
            self.num_unscorable,
            *self.success,
        ]

    @classmethod
    def from_values(cls, values: list[float], num_funcs: int) -> MemberStats:
        reward, per_function, rest = values[0], values[1 : 1 + num_funcs], values[1 + num_funcs :]
        return cls(reward, list(per_function), *rest[:4], success=list(rest[4:]))


@dataclass
class StepRecord:
    """The members of one step, indexed by `member.index`, and whether any process failed."""

    members: list[MemberStats]
    process_failed: bool = False

    @classmethod
    def empty(cls, num_members: int, num_funcs: int, num_prompts: int) -> StepRecord:
        """Zeros for every member: the same shape on every process, whichever members it evaluates."""
        return cls(
            [
                MemberStats(reward_per_function=[0.0] * num_funcs, success=[0.0] * num_prompts)
                for _ in range(num_members)
            ]
        )

    @property
    def rewards(self) -> torch.Tensor:
        """`(members,)` float64 rewards, NaN for members left out of the update."""
        return torch.tensor([m.reward for m in self.members], dtype=torch.float64)

    @property
    def success(self) -> torch.Tensor:
        """`(members, prompts)` float64 success rates, NaN where unknown."""
        return torch.tensor([m.success for m in self.members], dtype=torch.float64)

    def to_tensor(self) -> torch.Tensor:
        """`(members + 1, fields)` float64; the last row's first entry counts failed processes."""
        rows = [m.values() for m in self.members]
        failed = [float(self.process_failed)] + [0.0] * (len(rows[0]) - 1)
        return torch.tensor([*rows, failed], dtype=torch.float64)

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor, num_funcs: int) -> StepRecord:
        rows = tensor.tolist()
        members = [MemberStats.from_values(row, num_funcs) for row in rows[:-1]]
        return cls(members, process_failed=rows[-1][0] > 0)

    def all_reduce(self, accelerator: Any) -> StepRecord:
        """The sum of every process's record (one collective; a no-op with one process)."""
        if accelerator.num_processes == 1:
            return self
        num_funcs = len(self.members[0].reward_per_function)
        summed = accelerator.reduce(self.to_tensor().to(accelerator.device), reduction="sum").cpu()
        return StepRecord.from_tensor(summed, num_funcs)

    def metrics(self, reward_func_names: list[str]) -> dict[str, float]:
        """Population metrics with GRPOTrainer's names where they exist (`reward`, `rewards/<fn>/mean`, ...)."""
        valid = [m for m in self.members if math.isfinite(m.reward)]
        metrics: dict[str, float] = {}
        if valid:
            rewards = torch.tensor([m.reward for m in valid], dtype=torch.float64)
            metrics["reward"] = float(rewards.mean())
            metrics["reward_std"] = float(rewards.std(correction=0))
            metrics["population/reward_max"] = float(rewards.max())
            metrics["population/reward_min"] = float(rewards.min())
            for j, name in enumerate(reward_func_names):
                column = torch.tensor([m.reward_per_function[j] for m in valid], dtype=torch.float64)
                finite = column[torch.isfinite(column)]
                if finite.numel():  # std across members, as TRL's is across completions
                    metrics[f"rewards/{name}/mean"] = float(finite.mean())
                    metrics[f"rewards/{name}/std"] = float(finite.std(correction=0))
        diversity = population_diversity(self.success)
        if diversity.num_prompts:
            metrics.update(diversity.metrics())
        count = len(self.members)
        metrics["population/skipped_members"] = float(count - len(valid))
        metrics["completions/mean_length"] = sum(m.mean_length for m in self.members) / count
        metrics["completions/clipped_ratio"] = sum(m.clipped_ratio for m in self.members) / count
        metrics["completions/unscorable"] = sum(m.num_unscorable for m in self.members)
        metrics["num_generated_tokens"] = sum(m.num_tokens for m in self.members)
        return metrics
