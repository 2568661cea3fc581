"""Low-rank ES directions (EGGROLL, Sarkar et al. 2025): every matrix is perturbed along `A B^T / sqrt(r)`.

For a 2-D weight `W` (m x n) the direction of a member is `E = A B^T / sqrt(r)` with `A` (m x r) and `B` (n x r)
i.i.d. N(0, 1), so every entry of `E` still has unit variance and `sigma` keeps its meaning. The factors are
regenerated from the member's seed and the parameter's stable name by the run's [`NoiseSource`] (the first
`(m + n) * r` values of the stream the full-rank method would draw for that tensor), so every process rebuilds them
from the seeds alone. A member then costs `(m + n) * r` numbers per matrix instead of `m * n`, and `x -> x E^T` is two
thin matmuls, which is what lets a whole population share one batched forward pass
([`hf_es.generation.low_rank`]). The update `theta += alpha * sum_j c_j A_j B_j^T / sqrt(r)` is a sum of N rank-r
terms, hence of rank up to N r.

Non-matrix parameters (norm scales, biases) either get the ordinary full-rank noise or stay fixed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .centre import ESCentre
from .noise import NoiseSource
from .registry import Registry

__all__ = ["NON_MATRIX_NOISE", "PERTURBATIONS", "LowRankCentre", "low_rank_factors", "make_centre"]

NON_MATRIX_NOISE = ("full", "none")


def low_rank_factors(
    noise: NoiseSource, seed: int, name: str, shape: torch.Size | tuple[int, int], rank: int, device="cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Regenerates the factors of one member's direction for one matrix.

    Args:
        noise: The run's noise source.
        seed: The member's seed.
        name: Stable parameter name.
        shape: `(m, n)`, the matrix shape.
        rank: r.
        device: Where the factors should live.

    Returns:
        `(A, B)`, float32 tensors of shapes `(m, r)` and `(n, r)`; the direction is `A @ B.T / sqrt(r)`.
    """
    rows, cols = shape
    flat = noise.full(seed, name, ((rows + cols) * rank,), device)
    return flat[: rows * rank].view(rows, rank), flat[rows * rank :].view(cols, rank)


class LowRankCentre(ESCentre):
    """An [`ESCentre`] whose directions are low-rank on every matrix (fp32 master, live dtype as in `ESCentre`).

    Args:
        parameters: Live tensors to evolve, keyed by stable name, tied weights once.
        noise: Where the factors (and non-matrix directions) come from.
        rank: r, the rank of each member's direction on each matrix.
        non_matrix_noise: `"full"` gives non-matrix parameters the ordinary full-rank noise; `"none"` keeps them
            fixed (they are neither perturbed nor updated).
        master_device: Device of the master copy (see [`ESCentre`]).
    """

    def __init__(
        self,
        parameters: Mapping[str, torch.Tensor],
        noise: NoiseSource,
        rank: int = 1,
        non_matrix_noise: str = "full",
        master_device: torch.device | str | None = None,
    ):
        if rank < 1:
            raise ValueError(f"perturbation_rank must be >= 1, got {rank}.")
        if non_matrix_noise not in NON_MATRIX_NOISE:
            raise ValueError(f"Unknown non_matrix_noise {non_matrix_noise!r}; use one of {NON_MATRIX_NOISE}.")
        super().__init__(parameters, noise, master_device=master_device)
        self.rank = rank
        self.non_matrix_noise = non_matrix_noise

    def is_matrix(self, name: str) -> bool:
        """Whether `name` gets a low-rank direction (2-D tensors do; all others follow `non_matrix_noise`)."""
        return self.master[name].dim() == 2

    def factors(self, seed: int, name: str, device: torch.device | str | None = None):
        """`(A, B)` of the member seeded by `seed` for the matrix `name` (see [`low_rank_factors`])."""
        master = self.master[name]
        return low_rank_factors(self.noise, seed, name, master.shape, self.rank, device or master.device)

    def direction(self, seed: int, name: str) -> torch.Tensor | None:
        """The whole float32 direction of one tensor (`None` for a fixed non-matrix tensor); for tests and tools."""
        master = self.master[name]
        if self.is_matrix(name):
            a, b = self.factors(seed, name)
            return a @ b.T / math.sqrt(self.rank)
        if self.non_matrix_noise == "none":
            return None
        return self.noise.full(seed, name, master.shape, master.device)

    def _perturb_tensor_(self, name: str, live: torch.Tensor, seed: int, scale: float) -> None:
        if not self.is_matrix(name):
            if self.non_matrix_noise == "full":
                super()._perturb_tensor_(name, live, seed, scale)
            else:
                live.copy_(self.master[name])
            return
        master = self.master[name]
        a, b = self.factors(seed, name)
        member = torch.addmm(master, a, b.T, alpha=scale / math.sqrt(self.rank))
        live.copy_(member)

    def _update_tensor_(
        self, name: str, master: torch.Tensor, seeds: list[int], steps: list[float]
    ) -> torch.Tensor | float:
        if not self.is_matrix(name):
            return super()._update_tensor_(name, master, seeds, steps) if self.non_matrix_noise == "full" else 0.0
        factors = [self.factors(seed, name) for seed in seeds]
        # sum_j s_j A_j B_j^T = [A_1 .. A_N] @ [s_1 B_1 .. s_N B_N]^T: one (m x Nr) @ (Nr x n) matmul.
        stacked_a = torch.cat([a for a, _ in factors], dim=1)
        stacked_b = torch.cat([b * step for (_, b), step in zip(factors, steps)], dim=1)
        delta = stacked_a @ stacked_b.T
        delta /= math.sqrt(self.rank)
        master += delta
        return torch.linalg.vector_norm(delta).double().square()


PERTURBATIONS: Registry[Callable[..., ESCentre]] = Registry("perturbation")
"""`ESConfig.perturbation` -> `factory(parameters, noise, *, master_device, rank, non_matrix_noise)`, the centre."""


@PERTURBATIONS.register("full")
def _full_rank_centre(
    parameters: Mapping[str, torch.Tensor],
    noise: NoiseSource,
    *,
    master_device: torch.device | str | None = None,
    **low_rank_options: Any,
) -> ESCentre:
    # `rank` and `non_matrix_noise` shape low-rank directions only: every full-rank tensor gets the full noise.
    return ESCentre(parameters, noise, master_device=master_device)


# Its constructor takes the factory's arguments as they are.
PERTURBATIONS.register("low_rank", LowRankCentre)


def make_centre(
    perturbation: str,
    parameters: Mapping[str, torch.Tensor],
    noise: NoiseSource,
    *,
    master_device: torch.device | str | None = None,
    rank: int = 1,
    non_matrix_noise: str = "full",
) -> ESCentre:
    """Snapshots `parameters` as the ES centre of the perturbation named by `ESConfig.perturbation`.

    Args:
        perturbation: A key of [`PERTURBATIONS`]: `"full"` (the paper's i.i.d. noise, [`ESCentre`]) or
            `"low_rank"` ([`LowRankCentre`]).
        parameters: Live tensors to evolve, keyed by stable name, tied weights once.
        noise: The run's noise source.
        master_device: Device of the fp32 master copy (see [`ESCentre`]).
        rank: r, the rank of each low-rank direction (`perturbation_rank`).
        non_matrix_noise: What low-rank directions do to non-matrix parameters (`low_rank_non_matrix_noise`).

    Returns:
        The centre.
    """
    factory = PERTURBATIONS.resolve(perturbation)
    return factory(parameters, noise, master_device=master_device, rank=rank, non_matrix_noise=non_matrix_noise)
