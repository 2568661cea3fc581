"""Fitness shaping: turns the population's raw rewards into the weights of the update.

Each function maps a 1-D float tensor of rewards to a tensor of the same shape. They are pure and pluggable:
`ESConfig.fitness_shaping` takes one of the registered names or any callable with the same signature.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .registry import Registry

__all__ = ["FITNESS_SHAPING", "centered_rank", "get_fitness_shaping", "no_shaping", "zscore"]

FitnessShaping = Callable[[torch.Tensor], torch.Tensor]

ZSCORE_EPS = 1e-8

FITNESS_SHAPING: Registry[FitnessShaping] = Registry("fitness_shaping")
"""`ESConfig.fitness_shaping` -> the shaping function."""


@FITNESS_SHAPING.register("zscore")
def zscore(rewards: torch.Tensor) -> torch.Tensor:
    """Standardises rewards within the population: `(R - mean R) / (std R + 1e-8)` (population std, ddof=0).

    Args:
        rewards: Rewards of the population, shape `(N,)`.

    Returns:
        The z-scores; all zeros when every reward is equal.
    """
    rewards = rewards.double()
    centred = rewards - rewards.mean()
    std = rewards.std(correction=0)
    if std == 0:
        return torch.zeros_like(rewards)
    return centred / (std + ZSCORE_EPS)


@FITNESS_SHAPING.register("centered_rank")
def centered_rank(rewards: torch.Tensor) -> torch.Tensor:
    """Salimans et al.'s centred ranks: ranks scaled to [-0.5, 0.5]; tied rewards share their average rank.

    Args:
        rewards: Rewards of the population, shape `(N,)`.

    Returns:
        The centred ranks (all zeros when every reward is equal, and for a population of one).
    """
    n = rewards.numel()
    if n < 2:
        return torch.zeros_like(rewards, dtype=torch.float64)
    rewards = rewards.double()
    # Average rank of ties: count how many are strictly smaller and how many are equal.
    smaller = (rewards[None, :] < rewards[:, None]).sum(dim=1).double()
    equal = (rewards[None, :] == rewards[:, None]).sum(dim=1).double()
    ranks = smaller + (equal - 1) / 2
    return ranks / (n - 1) - 0.5


@FITNESS_SHAPING.register("none")
def no_shaping(rewards: torch.Tensor) -> torch.Tensor:
    """Uses the raw rewards as weights (what the paper calls reward normalisation off).

    Args:
        rewards: Rewards of the population, shape `(N,)`.

    Returns:
        The rewards as float64.
    """
    return rewards.double().clone()


def get_fitness_shaping(shaping: str | FitnessShaping) -> FitnessShaping:
    """Resolves a fitness-shaping name or callable.

    Args:
        shaping: A key of [`FITNESS_SHAPING`] or a callable `rewards -> weights`.

    Returns:
        The shaping function.
    """
    return shaping if callable(shaping) else FITNESS_SHAPING.resolve(shaping)
