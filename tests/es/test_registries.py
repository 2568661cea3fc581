"""The registries of hf_es.es: registered names build the objects, ESConfig accepts exactly those names."""

import pytest

from hf_es.es import (
    ESTIMATORS,
    FITNESS_SHAPING,
    NOISE_SOURCES,
    PERTURBATIONS,
    GaussianNoise,
    LowRankCentre,
    Registry,
    make_centre,
    make_noise_source,
)
from hf_es.trainer import ESConfig


def test_registry_registers_once_and_names_the_choices():
    registry = Registry("colour")
    assert registry.register("red", 1) == 1

    @registry.register("blue")
    def blue():
        return 2

    assert registry.resolve("blue") is blue and sorted(registry) == ["blue", "red"]
    with pytest.raises(ValueError, match=r"colour must be one of \['blue', 'red'\], got 'green'"):
        registry.resolve("green")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("red", 3)


def test_a_registered_noise_source_is_accepted_by_the_config(tmp_path):
    with pytest.raises(ValueError, match=r"noise_type must be one of \['gaussian', 'table'\], got 'mine'"):
        ESConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", noise_type="mine")
    NOISE_SOURCES.register("mine", lambda table_size, chunk_size, num_parameters: GaussianNoise(chunk_size))
    try:
        assert ESConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", noise_type="mine")
        assert isinstance(make_noise_source("mine", chunk_size=8), GaussianNoise)
    finally:
        del NOISE_SOURCES["mine"]


@pytest.mark.parametrize(
    "field, registry",
    [("estimator", ESTIMATORS), ("perturbation", PERTURBATIONS), ("fitness_shaping", FITNESS_SHAPING)],
)
def test_config_errors_list_the_registered_names(tmp_path, field, registry):
    with pytest.raises(ValueError, match=rf"{field} must be one of {sorted(registry)}".replace("[", r"\[")):
        ESConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **{field: "unknown"})


def test_make_centre_builds_the_named_perturbation():
    import torch

    weights = {"w": torch.ones(4, 3), "b": torch.zeros(3)}
    centre = make_centre("low_rank", weights, GaussianNoise(), rank=2, non_matrix_noise="none")
    assert isinstance(centre, LowRankCentre) and (centre.rank, centre.non_matrix_noise) == (2, "none")
    assert type(make_centre("full", weights, GaussianNoise(), rank=2)).__name__ == "ESCentre"
