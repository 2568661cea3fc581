import math

import pytest
import torch

from hf_es.es import population_diversity


def test_identical_members_have_no_gap_and_no_js_diversity():
    rates = torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=torch.float64)
    diversity = population_diversity(rates.expand(4, -1))
    # 1 - (1 - p)^4 per prompt, both ways
    expected = sum(1 - (1 - p) ** 4 for p in rates.tolist()) / 4
    assert diversity.coverage == pytest.approx(expected)
    assert diversity.coverage_same_mean == pytest.approx(expected)
    assert diversity.coverage_gap == pytest.approx(0.0, abs=1e-15)
    assert diversity.js_diversity == pytest.approx(0.0, abs=1e-15)
    assert diversity.num_prompts == 4


def test_complementary_members_reach_ln2_and_full_coverage():
    success = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    diversity = population_diversity(success)
    assert diversity.js_diversity == pytest.approx(math.log(2))
    assert diversity.coverage == pytest.approx(1.0)
    assert diversity.coverage_same_mean == pytest.approx(0.75)  # 1 - (1 - 1/2)^2
    assert diversity.coverage_gap == pytest.approx(0.25)


def test_hand_computed_mixed_case():
    # prompt 0: rates 0.5, 0.0 -> coverage 0.5, same mean 1 - 0.75^2 = 0.4375, JS = H(0.25) - H(0.5) / 2
    # prompt 1: rates 1.0, 0.5 -> coverage 1.0, same mean 1 - 0.25^2 = 0.9375, JS = H(0.75) - H(0.5) / 2
    def entropy(p):
        return -sum(q * math.log(q) for q in (p, 1 - p) if q > 0)

    diversity = population_diversity(torch.tensor([[0.5, 1.0], [0.0, 0.5]]))
    assert diversity.coverage == pytest.approx(0.75)
    assert diversity.coverage_same_mean == pytest.approx((0.4375 + 0.9375) / 2)
    assert diversity.coverage_gap == pytest.approx(0.75 - 0.6875)
    js = (entropy(0.25) - entropy(0.5) / 2 + entropy(0.75) - entropy(0.5) / 2) / 2
    assert diversity.js_diversity == pytest.approx(js)


@pytest.mark.parametrize("seed", range(20))
def test_coverage_is_never_below_the_same_mean_reference(seed):
    generator = torch.Generator().manual_seed(seed)
    members, prompts = torch.randint(2, 12, (2,), generator=generator).tolist()
    success = torch.rand(members, prompts, generator=generator, dtype=torch.float64)
    # some rates exactly 0 or 1, as a verifier with few completions per prompt gives
    success[torch.rand(members, prompts, generator=generator) < 0.3] = 0.0
    success[torch.rand(members, prompts, generator=generator) < 0.2] = 1.0
    diversity = population_diversity(success)
    assert diversity.coverage >= diversity.coverage_same_mean - 1e-12
    assert diversity.coverage_gap >= -1e-12
    assert 0.0 <= diversity.js_diversity <= math.log(2) + 1e-12


def test_unknown_entries_are_left_out_of_their_prompt_and_empty_prompts_out_of_the_mean():
    nan = float("nan")
    success = torch.tensor([[1.0, nan, nan], [0.0, 0.5, nan], [nan, 0.5, nan]])
    diversity = population_diversity(success)
    # prompt 0: members 0 and 1 (the complementary pair); prompt 1: members 1 and 2, equal; prompt 2: nobody
    assert diversity.num_prompts == 2
    assert diversity.coverage == pytest.approx((1.0 + 0.75) / 2)
    assert diversity.coverage_same_mean == pytest.approx((0.75 + 0.75) / 2)
    assert diversity.js_diversity == pytest.approx(math.log(2) / 2)


def test_no_known_entry_gives_nan_and_bad_input_is_refused():
    diversity = population_diversity(torch.full((3, 2), float("nan")))
    assert diversity.num_prompts == 0 and math.isnan(diversity.coverage) and math.isnan(diversity.js_diversity)
    with pytest.raises(ValueError, match="matrix"):
        population_diversity(torch.zeros(3))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        population_diversity(torch.tensor([[1.5, 0.0]]))


def test_metric_names():
    names = set(population_diversity(torch.tensor([[1.0], [0.0]])).metrics())
    assert names == {
        "population/coverage",
        "population/coverage_same_mean",
        "population/coverage_gap",
        "population/js_diversity",
    }
