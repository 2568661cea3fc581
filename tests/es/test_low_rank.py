"""Low-rank ES directions and their update, checked against the formulas written out by hand."""

import math

import pytest
import torch

from hf_es.es import (
    ESCentre,
    GaussianNoise,
    LowRankCentre,
    NoiseTable,
    estimate_update,
    low_rank_factors,
    make_population,
    zscore,
)


def toy_parameters(dtype=torch.float32):
    generator = torch.Generator().manual_seed(0)
    return {
        "layer.weight": torch.randn(6, 4, generator=generator).to(dtype),
        "layer.bias": torch.randn(6, generator=generator).to(dtype),
        "head.weight": torch.randn(3, 6, generator=generator).to(dtype),
    }


@pytest.mark.parametrize("noise", [GaussianNoise(chunk_size=8), NoiseTable(size=4096, chunk_size=8)])
def test_factors_are_regenerated_from_seed_and_name(noise):
    a, b = low_rank_factors(noise, 5, "layer.weight", (6, 4), rank=3)
    assert a.shape == (6, 3) and b.shape == (4, 3)
    again = low_rank_factors(noise, 5, "layer.weight", (6, 4), rank=3)
    assert torch.equal(a, again[0]) and torch.equal(b, again[1])
    # The factors are the start of the tensor's own seeded stream: nothing new to keep in sync across processes.
    stream = noise.full(5, "layer.weight", (30,))
    assert torch.equal(torch.cat([a.flatten(), b.flatten()]), stream)
    other_name = low_rank_factors(noise, 5, "head.weight", (6, 4), rank=3)[0]
    other_seed = low_rank_factors(noise, 6, "layer.weight", (6, 4), rank=3)[0]
    assert not torch.equal(a, other_name) and not torch.equal(a, other_seed)


def test_direction_entries_have_unit_variance_whatever_the_rank():
    centre = LowRankCentre({"w": torch.zeros(256, 256)}, GaussianNoise(), rank=4)
    direction = centre.direction(3, "w")
    assert torch.linalg.matrix_rank(direction) == 4
    assert abs(float(direction.var()) - 1.0) < 0.1


@pytest.mark.parametrize("non_matrix_noise", ["full", "none"])
def test_perturb_writes_the_low_rank_member_and_restore_is_exact(non_matrix_noise):
    noise, rank, seed, scale = GaussianNoise(), 2, 42, -0.3
    params = toy_parameters(torch.bfloat16)
    centre = LowRankCentre(params, noise, rank=rank, non_matrix_noise=non_matrix_noise)
    master = {name: t.clone() for name, t in centre.master.items()}
    centre.perturb_(seed, scale)
    a, b = low_rank_factors(noise, seed, "layer.weight", (6, 4), rank)
    expected = (master["layer.weight"] + scale * a @ b.T / math.sqrt(rank)).to(torch.bfloat16)
    torch.testing.assert_close(params["layer.weight"], expected, atol=0, rtol=1e-2)
    bias_direction = noise.full(seed, "layer.bias", (6,)) if non_matrix_noise == "full" else torch.zeros(6)
    torch.testing.assert_close(params["layer.bias"], (master["layer.bias"] + scale * bias_direction).bfloat16())
    centre.restore_()
    for name, tensor in params.items():
        assert torch.equal(tensor, master[name].to(torch.bfloat16))


@pytest.mark.parametrize("estimator", ["one_point", "antithetic"])
@pytest.mark.parametrize("non_matrix_noise", ["full", "none"])
def test_update_is_the_sum_of_low_rank_terms(estimator, non_matrix_noise):
    """theta += lr/N sum_i z_i A_i B_i^T / sqrt(r) on matrices (+ the full-rank part on non-matrices)."""
    noise, rank, lr = GaussianNoise(chunk_size=4), 3, 0.1
    centre = LowRankCentre(toy_parameters(), noise, rank=rank, non_matrix_noise=non_matrix_noise)
    before = {name: t.clone() for name, t in centre.master.items()}
    members = make_population(noise_seed=9, step=2, population_size=6, estimator=estimator)
    rewards = torch.tensor([0.1, 0.7, 0.3, 0.9, 0.2, 0.5])
    estimate = estimate_update(members, rewards, zscore)
    norm = centre.update_(estimate.seeds, estimate.coefficients, lr)

    z = zscore(rewards)
    squared = 0.0
    for name, old in before.items():
        expected_delta = torch.zeros_like(old)
        for member in members:  # written per member, with its sign: no use of the estimate's coefficients
            if old.dim() == 2:
                a, b = low_rank_factors(noise, member.seed, name, old.shape, rank)
                direction = a @ b.T / math.sqrt(rank)
            elif non_matrix_noise == "full":
                direction = noise.full(member.seed, name, old.shape)
            else:
                direction = torch.zeros_like(old)
            expected_delta += lr / len(members) * float(z[member.index]) * member.sign * direction
        torch.testing.assert_close(centre.master[name], old + expected_delta, atol=1e-6, rtol=1e-6)
        squared += float(expected_delta.double().norm()) ** 2
    assert norm == pytest.approx(math.sqrt(squared), rel=1e-5)
    assert torch.equal(centre.parameters["layer.weight"], centre.master["layer.weight"])  # restored after the update


def test_full_rank_centre_is_unchanged_by_the_refactor():
    """ESCentre.update_ still adds lr * sum c_j eps_j chunk by chunk (the hooks LowRankCentre overrides)."""
    noise = GaussianNoise(chunk_size=5)
    centre = ESCentre(toy_parameters(), noise)
    before = {name: t.clone() for name, t in centre.master.items()}
    centre.update_([1, 2], [0.5, -0.25], 0.2)
    for name, old in before.items():
        expected = old + 0.2 * (0.5 * noise.full(1, name, old.shape) - 0.25 * noise.full(2, name, old.shape))
        torch.testing.assert_close(centre.master[name], expected)


def test_bad_settings_are_clear_errors():
    with pytest.raises(ValueError, match="perturbation_rank"):
        LowRankCentre(toy_parameters(), GaussianNoise(), rank=0)
    with pytest.raises(ValueError, match="non_matrix_noise"):
        LowRankCentre(toy_parameters(), GaussianNoise(), non_matrix_noise="half")
