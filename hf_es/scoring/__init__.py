"""Scoring completions with TRL-style reward functions, shared by `ESTrainer`, the GRPO baseline and evaluation.

- [`score_completions`] / [`Scores`] / [`FAILURE_POLICIES`] / [`RewardFunctionError`] (`score.py`): one call of
  every reward function per batch, TRL's `None` convention and the failure policy.
- [`check_reward_funcs`], [`check_reward_columns`], [`reward_weights_tensor`], [`reward_func_name`] (`checks.py`):
  what a trainer checks before the first call.
- [`RewardTally`] (`tally.py`): rewards summed over completions and processes into evaluation metrics.
- [`call_with_timeout`], [`missing_column`] (`calls.py`): one reward-function call under a deadline, and reading a
  missing dataset column from its exception.
- [`call_with_deadline`], [`ScoringPool`] / [`get_pool`] (`timeout.py`): per-sample deadlines for verifiers, by an
  in-process signal timer or by worker processes that are killed when they miss one.
"""

import importlib
from typing import TYPE_CHECKING

from .calls import TRAINER_REWARD_ARGS, RewardTimeout, call_with_timeout, missing_column
from .timeout import SampleTimeout, ScoringPool, call_with_deadline, get_pool, signal_timer_available

__all__ = [
    "FAILURE_POLICIES",
    "TRAINER_REWARD_ARGS",
    "RewardFunc",
    "RewardFunctionError",
    "RewardTally",
    "RewardTimeout",
    "SampleTimeout",
    "Scores",
    "ScoringPool",
    "call_with_deadline",
    "call_with_timeout",
    "check_reward_columns",
    "check_reward_funcs",
    "get_pool",
    "missing_column",
    "missing_column_message",
    "reward_func_name",
    "reward_inputs",
    "reward_weights_tensor",
    "score_completions",
    "signal_timer_available",
]

if TYPE_CHECKING:
    from .checks import (
        RewardFunc,
        check_reward_columns,
        check_reward_funcs,
        missing_column_message,
        reward_func_name,
        reward_weights_tensor,
    )
    from .score import FAILURE_POLICIES, RewardFunctionError, Scores, reward_inputs, score_completions
    from .tally import RewardTally

# Public name -> the submodule that defines it, imported on first access (see `__getattr__`).
_LAZY = {
    "RewardFunc": "checks",
    "check_reward_columns": "checks",
    "check_reward_funcs": "checks",
    "missing_column_message": "checks",
    "reward_func_name": "checks",
    "reward_weights_tensor": "checks",
    "FAILURE_POLICIES": "score",
    "RewardFunctionError": "score",
    "Scores": "score",
    "reward_inputs": "score",
    "score_completions": "score",
    "RewardTally": "tally",
}


def __getattr__(name: str):
    # Lazy: the verifiers in `hf_es.rewards` (and the worker processes that run them) import this package for its
    # deadlines and must not pay for importing torch, which only the tensor-valued scoring needs.
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
