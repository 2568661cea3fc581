"""Checks of the reward functions a trainer is given, before any is called: callables, weights, dataset columns."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .calls import TRAINER_REWARD_ARGS

__all__ = [
    "RewardFunc",
    "check_reward_columns",
    "check_reward_funcs",
    "missing_column_message",
    "reward_func_name",
    "reward_weights_tensor",
]

RewardFunc = Callable[..., Sequence[float | None]]


def reward_func_name(func: Any) -> str:
    """The name a reward function is logged under (`rewards/<name>/mean`)."""
    return getattr(func, "__name__", type(func).__name__)


def check_reward_funcs(reward_funcs: RewardFunc | Sequence[RewardFunc] | None) -> list[RewardFunc]:
    """The reward functions as a non-empty list of callables, or a clear error (reward models given by name are
    loaded before, by [`hf_es.scoring.reward_model.resolve_reward_models`])."""
    funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    if reward_funcs is None or not funcs:
        raise ValueError("ESTrainer needs at least one reward function (reward_funcs=...).")
    for func in funcs:
        if isinstance(func, str):
            raise TypeError(
                f"Reward model {func!r} given by name: load it with "
                "hf_es.scoring.reward_model.resolve_reward_models(reward_funcs) first (ESTrainer does)."
            )
        if not callable(func):
            raise TypeError(f"Reward functions must be callables, got {type(func).__name__}.")
    return funcs


def missing_column_message(column: str, columns: Sequence[str], dataset_name: str) -> str:
    """The end of an error message for a reward function that needs a column the dataset lacks."""
    return (
        f"needs the dataset column {column!r}, but {dataset_name} has no such "
        f"column (columns: {list(columns)}). Reward functions receive every column except 'prompt' as a "
        f"keyword argument: add the column, or rename the one holding the gold answers, e.g. "
        f"`{dataset_name} = {dataset_name}.rename_column('answer', {column!r})`."
    )


def reward_weights_tensor(reward_weights: Sequence[float] | None, num_reward_funcs: int) -> torch.Tensor:
    """`args.reward_weights` as a float64 tensor (all ones when unset), checked against the number of functions."""
    weights = reward_weights or [1.0] * num_reward_funcs
    if len(weights) != num_reward_funcs:
        raise ValueError(
            f"reward_weights has {len(weights)} entries but there are {num_reward_funcs} reward functions."
        )
    return torch.tensor(weights, dtype=torch.float64)


def check_reward_columns(reward_funcs: Sequence[RewardFunc], columns: Sequence[str], dataset_name: str) -> None:
    """Fails early when a reward function declares a required argument that is no column of the dataset."""
    if not columns:
        return
    for func in reward_funcs:
        try:
            parameters = inspect.signature(func).parameters.values()
        except (TypeError, ValueError):
            continue
        for parameter in parameters:
            required = parameter.default is inspect.Parameter.empty and parameter.kind in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                inspect.Parameter.KEYWORD_ONLY,
            )
            if required and parameter.name not in TRAINER_REWARD_ARGS and parameter.name not in columns:
                raise ValueError(
                    f"Reward function {reward_func_name(func)!r} "
                    + missing_column_message(parameter.name, columns, dataset_name)
                )
