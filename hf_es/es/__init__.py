"""Pure-torch ES math: noise, fitness shaping, estimators and the centre. No trainer or engine imports."""

from .centre import ESCentre, check_same_noise_on_every_process, find_disagreeing_processes, noise_digest
from .low_rank import NON_MATRIX_NOISE, PERTURBATIONS, LowRankCentre, low_rank_factors
from .noise import GaussianNoise, NoiseSource, NoiseTable, make_noise_source, stable_seed, table_size_for_model
from .placement import MASTER_DEVICES, MasterPlacement, choose_master_device, master_device_for
from .population import ESEstimate, Member, estimate_update, make_population, member_seed
from .shaping import FITNESS_SHAPING, centered_rank, get_fitness_shaping, no_shaping, zscore
from .sharding import ShardedNoise, ShardSpec

__all__ = [
    "FITNESS_SHAPING",
    "MASTER_DEVICES",
    "MasterPlacement",
    "NON_MATRIX_NOISE",
    "PERTURBATIONS",
    "ESCentre",
    "ESEstimate",
    "GaussianNoise",
    "LowRankCentre",
    "Member",
    "NoiseSource",
    "NoiseTable",
    "ShardSpec",
    "ShardedNoise",
    "centered_rank",
    "check_same_noise_on_every_process",
    "choose_master_device",
    "find_disagreeing_processes",
    "estimate_update",
    "get_fitness_shaping",
    "low_rank_factors",
    "make_noise_source",
    "make_population",
    "master_device_for",
    "member_seed",
    "no_shaping",
    "noise_digest",
    "stable_seed",
    "table_size_for_model",
    "zscore",
]
