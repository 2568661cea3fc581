"""Pure-torch ES math: noise, fitness shaping, estimators and the centre. No trainer or engine imports."""

from .centre import ESCentre
from .low_rank import NON_MATRIX_NOISE, PERTURBATIONS, LowRankCentre, low_rank_factors
from .noise import GaussianNoise, NoiseSource, NoiseTable, make_noise_source, stable_seed
from .population import ESEstimate, Member, estimate_update, make_population, member_seed
from .shaping import FITNESS_SHAPING, centered_rank, get_fitness_shaping, no_shaping, zscore

__all__ = [
    "FITNESS_SHAPING",
    "NON_MATRIX_NOISE",
    "PERTURBATIONS",
    "ESCentre",
    "ESEstimate",
    "GaussianNoise",
    "LowRankCentre",
    "Member",
    "NoiseSource",
    "NoiseTable",
    "centered_rank",
    "estimate_update",
    "get_fitness_shaping",
    "low_rank_factors",
    "make_noise_source",
    "make_population",
    "member_seed",
    "no_shaping",
    "stable_seed",
    "zscore",
]
