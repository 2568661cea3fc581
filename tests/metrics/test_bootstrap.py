"""The paired bootstrap behind every comparison of the reproduction report and of the Pass@K script."""

import numpy as np
import pytest

from hf_es.metrics.bootstrap import NO_DIFFERENCE, paired_bootstrap


def test_identical_methods_give_an_interval_holding_zero_and_no_difference():
    scores = np.random.default_rng(0).random(32)
    result = paired_bootstrap(scores, scores.copy(), n_boot=2000)
    assert result.difference == 0.0 and result.low == 0.0 and result.high == 0.0
    assert not result.excludes_zero and result.verdict() == NO_DIFFERENCE == "no difference measured"


def test_noisy_methods_without_a_shift_measure_no_difference():
    a = np.random.default_rng(1).integers(0, 2, 64).astype(float)
    a[:4], a[4:8] = 0.0, 1.0
    b = a.copy()
    b[:8] = 1 - b[:8]  # 4 problems flip up, 4 down
    result = paired_bootstrap(a, b, n_boot=4000)
    assert result.difference == 0 and result.low < 0 < result.high
    assert result.verdict() == NO_DIFFERENCE


def test_a_clear_shift_excludes_zero_on_the_right_side():
    rng = np.random.default_rng(2)
    base = rng.random(40) * 0.5
    result = paired_bootstrap(base + 0.2 + 0.02 * rng.standard_normal(40), base, n_boot=2000)
    assert result.low > 0 and result.excludes_zero and result.verdict() == "agrees"
    assert result.difference == pytest.approx(0.2, abs=0.02)
    assert paired_bootstrap(base, base + 0.2, n_boot=2000).verdict("yes", "no") == "no"


def test_one_problem_out_of_32_is_no_difference():
    # the CPU reproduction's situation: a difference carried by a single problem
    a, b = np.zeros(32), np.zeros(32)
    a[0] = 1.0
    result = paired_bootstrap(a, b)
    assert result.difference == pytest.approx(1 / 32) and result.low == 0.0 and result.verdict() == NO_DIFFERENCE


def test_deterministic_with_its_seed():
    rng = np.random.default_rng(3)
    a, b = rng.random((2, 50)), rng.random(50)
    assert paired_bootstrap(a, b, seed=7) == paired_bootstrap(a, b, seed=7)
    assert paired_bootstrap(a, b, seed=7).low != paired_bootstrap(a, b, seed=8).low


def test_seeds_widen_the_interval_and_enter_the_description():
    # every problem is +0.1 on average, but the two seeds disagree (one +0.3, one -0.1): seed resampling shows it
    base = np.full(64, 0.5)
    seeds = np.stack([base + 0.3, base - 0.1])
    hierarchical = paired_bootstrap(seeds, base, n_boot=4000)
    flat = paired_bootstrap(seeds.mean(axis=0), base, n_boot=4000)
    assert hierarchical.difference == pytest.approx(flat.difference) == pytest.approx(0.1)
    assert flat.low == pytest.approx(0.1) and flat.excludes_zero  # no spread over problems at all
    assert hierarchical.low < 0 < hierarchical.high and hierarchical.num_seeds == (2, 1)
    assert "64 problems and 2 vs 1 seeds" in hierarchical.describe()
    assert hierarchical.fmt() == f"+10.0 [{100 * hierarchical.low:+.1f}, {100 * hierarchical.high:+.1f}]"


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="same"):
        paired_bootstrap([1.0, 0.0], [1.0])
    with pytest.raises(ValueError, match="non-finite"):
        paired_bootstrap([1.0, float("nan")], [1.0, 0.0])
