"""Unit tests of the pure ES math: noise, shaping, estimators, centre."""

import math
import os
import subprocess
import sys

import pytest
import torch

from hf_es.es import (
    ESCentre,
    GaussianNoise,
    NoiseTable,
    centered_rank,
    estimate_update,
    make_population,
    no_shaping,
    stable_seed,
    zscore,
)

NOISES = [GaussianNoise(chunk_size=1000), NoiseTable(size=1 << 18, chunk_size=1000)]


def test_stable_seed_is_stable_across_processes_and_distinguishes_parts():
    code = "from hf_es.es import stable_seed; print(stable_seed(7, 3, 'model.layers.0.mlp.up_proj.weight'))"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(salt)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for salt in (1, 2)
    }
    assert outputs == {str(stable_seed(7, 3, "model.layers.0.mlp.up_proj.weight"))}
    assert stable_seed(1, "2") != stable_seed("1", 2)
    assert stable_seed(1, 2) != stable_seed(2, 1)
    assert 0 <= stable_seed(123) < 2**63


@pytest.mark.parametrize("noise", NOISES, ids=["gaussian", "table"])
def test_noise_is_deterministic_standard_normal_and_independent(noise):
    a = noise.full(11, "layer.a.weight", (100, 50))
    assert torch.equal(a, noise.full(11, "layer.a.weight", (100, 50)))
    assert abs(float(a.mean())) < 0.05 and abs(float(a.std()) - 1.0) < 0.05
    other_tensor = noise.full(11, "layer.b.weight", (100, 50))
    other_member = noise.full(12, "layer.a.weight", (100, 50))
    bound = 4 / math.sqrt(a.numel())  # 4 standard errors of a correlation between independent samples
    for other in (other_tensor, other_member):
        assert not torch.equal(a, other)
        assert abs(float(torch.corrcoef(torch.stack([a.flatten(), other.flatten()]))[0, 1])) < bound
    # Chunks within one tensor are independent too (no repeated stream at chunk boundaries).
    chunks = a.flatten()[:4000].view(4, 1000)
    corr = torch.corrcoef(chunks)
    assert (corr - torch.eye(4)).abs().max() < 4 / math.sqrt(1000)


def test_noise_table_rejects_a_table_smaller_than_a_chunk():
    with pytest.raises(ValueError, match="noise_table_size"):
        NoiseTable(size=100, chunk_size=1000)


def test_zscore_and_centered_rank_values():
    rewards = torch.tensor([1.0, 3.0, 2.0, 2.0])
    z = zscore(rewards)
    expected = (rewards.double() - 2.0) / (math.sqrt(0.5) + 1e-8)
    assert torch.allclose(z, expected)
    assert torch.allclose(centered_rank(torch.tensor([1.0, 3.0, 2.0])), torch.tensor([-0.5, 0.5, 0.0]).double())
    # Ties share the average rank: ranks 0, 3, 1.5, 1.5 over n-1 = 3.
    assert torch.allclose(centered_rank(rewards), torch.tensor([0.0, 1.0, 0.5, 0.5]).double() - 0.5)
    assert torch.equal(zscore(torch.ones(5)), torch.zeros(5).double())
    assert torch.equal(centered_rank(torch.ones(5)), torch.zeros(5).double())
    assert torch.equal(no_shaping(rewards), rewards.double())


def test_population_layout_one_point_and_antithetic():
    one_point = make_population(noise_seed=3, step=5, population_size=4)
    assert [m.direction for m in one_point] == [0, 1, 2, 3] and all(m.sign == 1.0 for m in one_point)
    assert len({m.seed for m in one_point}) == 4
    assert make_population(3, 6, 4)[0].seed != one_point[0].seed  # fresh directions each step
    pairs = make_population(noise_seed=3, step=5, population_size=4, estimator="antithetic")
    assert [(m.direction, m.sign) for m in pairs] == [(0, 1.0), (0, -1.0), (1, 1.0), (1, -1.0)]
    assert pairs[0].seed == pairs[1].seed and pairs[0].sampling_seed == pairs[1].sampling_seed  # common numbers
    with pytest.raises(ValueError, match="even"):
        make_population(3, 5, 5, estimator="antithetic")


def _small_params(dtype=torch.float32):
    torch.manual_seed(0)
    return {"w": torch.randn(64, 33).to(dtype), "b": torch.randn(7).to(dtype)}


def test_update_equals_the_formula_computed_by_hand():
    params = _small_params()
    initial = {k: v.clone() for k, v in params.items()}
    noise = GaussianNoise(chunk_size=500)
    centre = ESCentre(params, noise)
    members = make_population(noise_seed=1, step=0, population_size=4)
    rewards = torch.tensor([0.25, 1.0, 0.0, 0.5])
    estimate = estimate_update(members, rewards, zscore)
    lr = 0.01
    norm = centre.update_(estimate.seeds, estimate.coefficients, lr)

    z = (rewards - rewards.mean()) / rewards.std(correction=0)
    for name in params:
        expected = initial[name] + lr / 4 * sum(
            z[i] * noise.full(m.seed, name, params[name].shape) for i, m in enumerate(members)
        )
        assert torch.allclose(params[name], expected, atol=1e-6)
    delta = torch.cat([(params[n] - initial[n]).flatten() for n in params])
    assert norm == pytest.approx(float(delta.norm()), rel=1e-4)


def test_antithetic_update_is_the_pair_difference():
    params = _small_params()
    initial = {k: v.clone() for k, v in params.items()}
    noise = GaussianNoise(chunk_size=500)
    centre = ESCentre(params, noise)
    members = make_population(noise_seed=2, step=0, population_size=4, estimator="antithetic")
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])  # only the + side of pair 0 scores
    estimate = estimate_update(members, rewards, no_shaping)
    centre.update_(estimate.seeds, estimate.coefficients, 1.0)
    eps0 = noise.full(members[0].seed, "w", (64, 33))
    assert torch.allclose(params["w"], initial["w"] + eps0 / 4, atol=1e-6)


def test_all_equal_rewards_make_no_update_and_nan_members_are_excluded():
    members = make_population(0, 0, 4)
    tied = estimate_update(members, torch.full((4,), 0.5), zscore)
    assert tied.skipped and tied.seeds == [] and tied.num_valid == 4
    with_nan = estimate_update(members, torch.tensor([1.0, float("nan"), 0.0, 1.0]), zscore)
    assert not with_nan.skipped and with_nan.num_valid == 3
    assert members[1].seed not in with_nan.seeds and with_nan.shaped[1] == 0
    # The shaping only saw the three valid rewards.
    assert torch.allclose(with_nan.shaped[[0, 2, 3]], zscore(torch.tensor([1.0, 0.0, 1.0])))
    pairs = make_population(0, 0, 4, estimator="antithetic")
    dropped = estimate_update(pairs, torch.tensor([1.0, float("nan"), 0.5, 0.5]), zscore)
    assert dropped.skipped and dropped.num_valid == 2  # the broken pair is dropped whole; the other pair ties


def test_perturb_moves_weights_and_exact_restore_in_bf16_over_1000_cycles():
    params = _small_params(torch.bfloat16)
    initial = {k: v.clone() for k, v in params.items()}
    centre = ESCentre(params, NoiseTable(size=1 << 16, chunk_size=256))
    for cycle in range(1000):
        centre.perturb_(seed=cycle, scale=1.5e-3 * 30)
        if cycle == 0:
            assert not torch.equal(params["w"], initial["w"])
        centre.restore_()
    for name in params:
        assert torch.equal(params[name], initial[name])


def test_fp32_master_keeps_updates_below_bf16_resolution():
    params = {"w": torch.ones(1000, dtype=torch.bfloat16)}
    centre = ESCentre(params, GaussianNoise(chunk_size=1000))
    for _ in range(200):
        centre.update_([1], [1.0], 1e-5)  # each step moves ~1e-5, far below bf16's 2**-8 spacing at 1.0
    drift = centre.master["w"] - 1.0
    assert float(drift.abs().mean()) == pytest.approx(200 * 1e-5 * math.sqrt(2 / math.pi), rel=0.1)
    # Without a master, the same updates applied to bf16 weights are all rounded away.
    naive = torch.ones(1000, dtype=torch.bfloat16)
    eps = GaussianNoise(chunk_size=1000).full(1, "w", (1000,))
    for _ in range(200):
        naive += (1e-5 * eps).to(torch.bfloat16)
    assert torch.equal(naive, torch.ones(1000, dtype=torch.bfloat16))
