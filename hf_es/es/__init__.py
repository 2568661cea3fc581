"""Pure-torch ES math: noise, fitness shaping, estimators and the centre, each choice in a [`Registry`]. No trainer
or engine imports."""

from .centre import ESCentre, check_same_noise_on_every_process, find_disagreeing_processes, noise_digest
from .diversity import PopulationDiversity, population_diversity
from .low_rank import NON_MATRIX_NOISE, PERTURBATIONS, LowRankCentre, low_rank_factors, make_centre
from .noise import (
    NOISE_SOURCES,
    GaussianNoise,
    NoiseSource,
    NoiseTable,
    make_noise_source,
    stable_seed,
    table_size_for_model,
)
from .placement import (
    MASTER_DEVICES,
    MasterPlacement,
    choose_master_device,
    master_bytes_needed,
    master_device_for,
    noise_chunk_size_for,
    plan_master_placement,
)
from .population import ESTIMATORS, ESEstimate, Member, estimate_update, make_population, member_seed
from .registry import Registry
from .shaping import FITNESS_SHAPING, centered_rank, get_fitness_shaping, no_shaping, zscore
from .sharding import ShardedNoise, ShardSpec

__all__ = [
    "ESTIMATORS",
    "FITNESS_SHAPING",
    "MASTER_DEVICES",
    "MasterPlacement",
    "NOISE_SOURCES",
    "NON_MATRIX_NOISE",
    "PERTURBATIONS",
    "ESCentre",
    "ESEstimate",
    "GaussianNoise",
    "LowRankCentre",
    "Member",
    "NoiseSource",
    "NoiseTable",
    "PopulationDiversity",
    "Registry",
    "ShardSpec",
    "ShardedNoise",
    "centered_rank",
    "check_same_noise_on_every_process",
    "choose_master_device",
    "find_disagreeing_processes",
    "estimate_update",
    "get_fitness_shaping",
    "low_rank_factors",
    "make_centre",
    "make_noise_source",
    "make_population",
    "master_bytes_needed",
    "master_device_for",
    "member_seed",
    "no_shaping",
    "noise_chunk_size_for",
    "noise_digest",
    "population_diversity",
    "plan_master_placement",
    "stable_seed",
    "table_size_for_model",
    "zscore",
]
