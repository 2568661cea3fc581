"""Population layout and the ES update coefficients (one-point and antithetic estimators)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .noise import stable_seed
from .registry import Registry
from .shaping import FitnessShaping

__all__ = ["ESTIMATORS", "ESEstimate", "Member", "estimate_update", "make_population", "member_seed"]

ESTIMATORS: Registry[Callable[[int], list[tuple[int, float]]]] = Registry("estimator")
"""`ESConfig.estimator` -> `layout(population_size)`: the `(direction, sign)` of each member, in index order."""


@ESTIMATORS.register("one_point")
def one_point(population_size: int) -> list[tuple[int, float]]:
    """N independent directions, each at +sigma."""
    return [(index, 1.0) for index in range(population_size)]


@ESTIMATORS.register("antithetic")
def antithetic(population_size: int) -> list[tuple[int, float]]:
    """N/2 directions, each at +sigma (even index) and -sigma (the next one)."""
    if population_size % 2:
        raise ValueError(
            f"estimator='antithetic' evaluates members in +/- pairs, so population_size must be even, got "
            f"{population_size}."
        )
    return [(index // 2, 1.0 - 2.0 * (index % 2)) for index in range(population_size)]


def member_seed(noise_seed: int, step: int, direction: int) -> int:
    """Seed of the noise direction `direction` at update `step`."""
    return stable_seed(noise_seed, step, direction)


@dataclass(frozen=True)
class Member:
    """One member of the population: the centre moved by `sign * sigma` along the direction seeded by `seed`.

    Attributes:
        index: Position in the population, `0 <= index < N`.
        direction: Index of the noise direction (members of an antithetic pair share it).
        sign: `+1.0` or `-1.0`.
        seed: Seed of the noise direction.
        sampling_seed: Seed of the completion sampler; shared by both members of an antithetic pair (common
            random numbers), so that only the weights differ between them.
    """

    index: int
    direction: int
    sign: float
    seed: int
    sampling_seed: int


def make_population(noise_seed: int, step: int, population_size: int, estimator: str = "one_point") -> list[Member]:
    """Lays out the N members of one step. Identical on every process, so only rewards need to be exchanged.

    Args:
        noise_seed: The run's noise seed.
        step: The update index (global step).
        population_size: N.
        estimator: A key of [`ESTIMATORS`]: `"one_point"` (N independent directions) or `"antithetic"` (N/2
            directions, each evaluated at +sigma and -sigma).

    Returns:
        The members, in index order.
    """
    layout = ESTIMATORS.resolve(estimator)(population_size)
    return [
        Member(
            index=index,
            direction=direction,
            sign=sign,
            seed=member_seed(noise_seed, step, direction),
            sampling_seed=stable_seed(noise_seed, step, direction, "sampling"),
        )
        for index, (direction, sign) in enumerate(layout)
    ]


@dataclass
class ESEstimate:
    """What one step's rewards say about the update.

    Attributes:
        seeds: Seed of each direction that moves the centre.
        coefficients: Weight of each direction in `theta += learning_rate * sum_j coefficients[j] * eps_j`.
        shaped: Shaped reward of every member (0 for excluded members), shape `(N,)`.
        num_valid: Number of members whose reward entered the estimate.
        skipped: True when no update is made (all valid rewards tied, or fewer than two valid members).
    """

    seeds: list[int]
    coefficients: list[float]
    shaped: torch.Tensor
    num_valid: int
    skipped: bool


def estimate_update(members: list[Member], rewards: torch.Tensor, shaping: FitnessShaping) -> ESEstimate:
    """Turns the population's rewards into update coefficients.

    One-point: `theta += alpha * (1/N) * sum_i z_i * eps_i`. Antithetic: member `-` of a pair sits at
    `theta - sigma * eps`, so the same sum reads `(1/N) * sum_p (z_p+ - z_p-) * eps_p`. Members with a non-finite
    reward (excluded by the reward-failure policy) are left out of the shaping and the mean; an antithetic pair with
    one excluded member is dropped whole.

    Args:
        members: The population from [`make_population`].
        rewards: Reward of each member, shape `(N,)`; NaN marks an excluded member.
        shaping: Fitness-shaping function.

    Returns:
        The [`ESEstimate`].
    """
    rewards = rewards.double()
    valid = torch.isfinite(rewards)
    by_direction: dict[int, list[Member]] = {}
    for member in members:
        by_direction.setdefault(member.direction, []).append(member)
    for group in by_direction.values():
        if not all(valid[m.index] for m in group):
            for m in group:
                valid[m.index] = False

    shaped = torch.zeros_like(rewards)
    num_valid = int(valid.sum())
    valid_rewards = rewards[valid]
    if num_valid < 2 or bool((valid_rewards == valid_rewards[0]).all()):
        return ESEstimate(seeds=[], coefficients=[], shaped=shaped, num_valid=num_valid, skipped=True)
    shaped[valid] = shaping(valid_rewards).double()

    seeds, coefficients = [], []
    for group in by_direction.values():
        coefficient = sum(m.sign * float(shaped[m.index]) for m in group) / num_valid
        if coefficient != 0.0:
            seeds.append(group[0].seed)
            coefficients.append(coefficient)
    return ESEstimate(seeds=seeds, coefficients=coefficients, shaped=shaped, num_valid=num_valid, skipped=False)
