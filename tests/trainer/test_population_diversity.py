"""Population diversity in the ES logs: per-prompt success rates, their exchange and the `population/*` metrics."""

import math
from types import SimpleNamespace

import pytest
import torch
from utils import make_args, make_trainer

from hf_es.es import population_diversity
from hf_es.trainer.step_logging import resolve_success_threshold, success_rates
from hf_es.trainer.step_record import MemberStats, StepRecord

DIVERSITY_KEYS = (
    "population/coverage",
    "population/coverage_same_mean",
    "population/coverage_gap",
    "population/js_diversity",
)


def test_default_success_threshold_is_the_largest_total_of_binary_verifiers():
    assert resolve_success_threshold(None, torch.tensor([1.0], dtype=torch.float64)) == 1.0
    assert resolve_success_threshold(None, torch.tensor([1.0, 0.5, -2.0], dtype=torch.float64)) == 1.5
    assert resolve_success_threshold(0.25, torch.tensor([1.0, 0.5], dtype=torch.float64)) == 0.25


def test_success_threshold_must_be_finite(tmp_path):
    with pytest.raises(ValueError, match="success_threshold must be None or a finite number"):
        make_args(tmp_path, success_threshold=float("inf"))
    assert make_args(tmp_path, success_threshold=0.5).success_threshold == 0.5


def test_success_rates_per_prompt_leave_out_unscorable_completions():
    nan = float("nan")
    # 3 prompts x 2 generations; prompt 2 has no scorable completion; 0.1 + 0.2 reaches a threshold of 0.3
    scores = SimpleNamespace(total=torch.tensor([1.0, 0.0, nan, 0.1 + 0.2, nan, nan], dtype=torch.float64))
    rates = success_rates(scores, num_prompts=3, threshold=0.3)
    assert rates[:2] == [0.5, 1.0] and math.isnan(rates[2])
    assert all(math.isnan(r) for r in success_rates(None, num_prompts=2, threshold=1.0))


def test_step_metrics_carry_the_diversity_of_the_success_matrix():
    members = [
        MemberStats(1.0, [1.0], 2.0, 0.0, 10.0, success=[1.0, 0.0]),
        MemberStats(0.0, [0.0], 2.0, 0.0, 10.0, success=[0.0, 1.0]),
        MemberStats(float("nan"), [0.0], 2.0, 0.0, 10.0, success=[float("nan")] * 2),
    ]
    metrics = StepRecord(members).metrics(["f"])
    assert metrics["population/js_diversity"] == pytest.approx(math.log(2))
    assert metrics["population/coverage"] == 1.0 and metrics["population/coverage_gap"] == pytest.approx(0.25)


def _first_token_even(completion_ids, prompts, **kwargs):
    """Binary: 1 when the first generated token is even; `None` (not applicable) for the prompt about number 0."""
    return [
        None if "number 0." in prompt else float(bool(ids) and ids[0] % 2 == 0)
        for prompt, ids in zip(prompts, completion_ids)
    ]


def test_training_logs_the_diversity_of_each_steps_recorded_matrix(tmp_path):
    trainer = make_trainer(
        tmp_path, reward_funcs=_first_token_even, num_generations=2, temperature=1.0, shuffle_dataset=False
    )
    recorded = []
    log_step = trainer._log_step

    def keep(record, *args):
        recorded.append(record.success.clone())
        return log_step(record, *args)

    trainer._log_step = keep
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "population/coverage" in entry]
    assert len(logs) == len(recorded) == 2
    for success, entry in zip(recorded, logs):
        assert success.shape == (8, 4)  # population_size x prompts per step
        expected = population_diversity(success)
        for key, value in expected.metrics().items():
            assert entry[key] == pytest.approx(value)
        assert entry["population/coverage"] >= entry["population/coverage_same_mean"]
        assert entry["population/js_diversity"] > 0  # the members disagree on some prompts
    # the first batch (no shuffling) holds the prompt about number 0, which no member can be scored on
    assert recorded[0][:, 0].isnan().all() and not recorded[0][:, 1:].isnan().any()
    assert population_diversity(recorded[0]).num_prompts == 3
    rates = torch.cat(recorded, dim=1)
    finite = rates[~rates.isnan()]
    assert set((2 * finite).tolist()) <= {0.0, 1.0, 2.0}  # two completions per prompt: rates are 0, 1/2 or 1


def test_model_card_summary_shows_coverage_and_js_diversity_over_training():
    from hf_es.model_card.sections import training_summary

    history = [
        {"step": 1, "reward": 0.3, "population/coverage": 0.5, "population/js_diversity": 0.2},
        {"step": 2, "reward": 0.4, "population/coverage": 0.625, "population/js_diversity": 0.1},
    ]
    rows = dict(training_summary(history, hardware=None, wall_time_s=None, total_generated_tokens=None))
    assert rows["Population coverage (first → last logged)"] == "0.5 → 0.625"
    assert rows["JS diversity (first → last logged)"] == "0.2 → 0.1"
    assert "Population coverage (first → last logged)" not in dict(
        training_summary(history[:0], hardware=None, wall_time_s=None, total_generated_tokens=None)
    )


def test_model_card_summary_shows_the_centres_token_entropy_exact_or_as_a_labelled_bound():
    from hf_es.model_card.sections import training_summary

    def rows(history):
        return dict(training_summary(history, hardware=None, wall_time_s=None, total_generated_tokens=None))

    exact = [{"step": 0, "eval_entropy": 1.25, "eval_reward": 0.1}, {"step": 8, "eval_entropy": 0.5}]
    label = "Centre token entropy at evaluation, nats/token (first → last)"
    assert rows(exact)[label] == "1.25 (step 0) → 0.5 (step 8)"
    bound = [{"step": 4, "eval_entropy_lower_bound": 0.75, "eval_entropy_top_k": 20.0}]
    text = rows(bound)["Centre token entropy at evaluation, nats/token, lower bound (first → last)"]
    assert text == "0.75 (step 4) → 0.75 (step 4), from the engine's top-20 log-probabilities"
    assert label not in rows([{"step": 1, "reward": 0.3}])  # never evaluated: no row
