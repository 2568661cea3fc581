"""`hf_es.scoring`: reward calls, TRL's None convention and the failure policy, on plain lists (no model)."""

import importlib
import logging
import math
import subprocess
import sys

import pytest
import torch

from hf_es.scoring import RewardFunctionError, RewardTally, check_reward_columns, reward_inputs, score_completions

INPUTS = [{"prompt": "p0", "answer": "a"}, {"prompt": "p1", "answer": "b"}]
COMPLETIONS = ["c00", "c01", "c10", "c11"]  # two generations per prompt
IDS = [[1], [1, 2], [1, 2, 3], []]


def score(funcs, weights=None, **kwargs):
    weights = torch.tensor(weights or [1.0] * len(funcs), dtype=torch.float64)
    return score_completions(funcs, weights, INPUTS, COMPLETIONS, IDS, num_generations=2, **kwargs)


def test_columns_are_repeated_per_generation_and_totals_weighted():
    seen = {}

    def first(prompts, completions, answer, **kwargs):
        seen.update(prompts=prompts, answer=answer)
        return [1.0, 2.0, 3.0, 4.0]

    def second(completions, **kwargs):
        return [10.0, None, 10.0, None]

    scores = score([first, second], weights=[1.0, 0.5])
    assert seen == {"prompts": ["p0", "p0", "p1", "p1"], "answer": ["a", "a", "b", "b"]}
    assert scores.total.tolist() == [6.0, 2.0, 8.0, 4.0]  # None from one function: the other still scores
    assert scores.mean() == 5.0 and scores.failures == 0


def test_completion_with_only_none_is_left_out_of_the_mean_with_a_warning(caplog):
    def sometimes(completions, **kwargs):
        return [1.0, None, 0.0, None]

    def never(completions, **kwargs):
        return [None] * len(completions)

    with caplog.at_level(logging.WARNING, logger="hf_es.scoring.score"):
        scores = score([sometimes, never], policy="error", where="step 3, member 1")
    assert scores.scorable.tolist() == [True, False, True, False]
    assert math.isnan(scores.total[1]) and scores.mean() == 0.5  # not (1 + 0 + 0 + 0) / 4
    assert "2 of 4 completions (step 3, member 1)" in caplog.text
    assert "prompt 'p0', completion 'c01'" in caplog.text


def test_all_none_is_nan_not_an_error():
    scores = score([lambda completions, **kw: [None] * 4], policy="error")
    assert scores is not None and math.isnan(scores.mean()) and not scores.scorable.any()


@pytest.mark.parametrize(
    "func, message",
    [
        (lambda completions, **kw: [float("nan")] * 4, "returned nan for completion 0"),
        (lambda completions, **kw: [1.0] * 3, "returned 3 values for 4 completions"),
        (lambda completions, **kw: 1 / 0, "raised ZeroDivisionError"),
    ],
    ids=["nan", "wrong-length", "raises"],
)
def test_failure_policy(func, message):
    with pytest.raises(RewardFunctionError, match=message + r".*\(step 0\)"):
        score([func], policy="error", where="step 0")
    assert score([func], policy="skip_member") is None
    zeroed = score([func], policy="zero")
    assert zeroed.total.tolist() == [0.0] * 4 and zeroed.failures >= 1


def test_missing_column_is_an_error_under_any_policy():
    def needs_solution(completions, solution, **kwargs):
        return [0.0] * len(completions)

    with pytest.raises(RewardFunctionError, match=r"needs the dataset column 'solution'"):
        score([needs_solution], policy="zero")
    with pytest.raises(
        ValueError, match=r"'needs_solution' needs the dataset column 'solution'.*\['prompt', 'answer'\]"
    ):
        check_reward_columns([needs_solution], ["prompt", "answer"], "train_dataset")


def test_tally_averages_scorable_completions_only():
    tally = RewardTally(["f"])
    tally.add(
        torch.tensor([[1.0], [float("nan")]], dtype=torch.float64), torch.tensor([1.0, float("nan")]), [[1], [1, 2, 3]]
    )
    tally.add(torch.tensor([[0.0]], dtype=torch.float64), torch.tensor([0.0]), [[1, 2]])

    class OneProcess:
        num_processes = 1

    assert tally.metrics(OneProcess()) == {
        "eval_reward": 0.5,
        "eval_rewards/f/mean": 0.5,
        "eval_completions/mean_length": 2.0,
    }


def test_every_public_name_is_the_one_its_module_defines():
    import hf_es.scoring as scoring

    modules = [
        importlib.import_module(f"hf_es.scoring.{name}") for name in ("calls", "checks", "score", "tally", "timeout")
    ]
    for name in scoring.__all__:
        homes = [module for module in modules if name in module.__all__]
        assert len(homes) == 1, name
        assert getattr(scoring, name) is getattr(homes[0], name)


def test_the_verifiers_get_their_deadlines_without_importing_torch():
    # hf_es.rewards (and the scoring pool's worker processes) import hf_es.scoring for the timeout pool only.
    code = (
        "import sys, hf_es.rewards, hf_es.scoring.timeout; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_reward_inputs_repeat_rows_and_wrap_chat_completions():
    chat = [{"role": "user", "content": "2+2?"}]
    rows = [{"prompt": chat, "solution": "4", "completion": "ignored"}, {"prompt": chat, "solution": "5"}]
    prompts, completions, columns = reward_inputs(rows, ["a", "b", "c", "d"], repeat=2)
    assert prompts == [chat] * 4
    assert completions[1] == [{"role": "assistant", "content": "b"}]
    assert columns == {"solution": ["4", "4", "5", "5"]}
    assert reward_inputs([{"prompt": "p", "solution": "4"}], ["a"])[1] == ["a"]  # plain text stays text


def test_evaluation_counts_a_completion_correct_at_the_threshold():
    from hf_es.evaluation import score_completions as correct_completions

    def reward(prompts, completions, solution, **kwargs):
        assert prompts == ["p"] * 3 and solution == ["4"] * 3
        return [1.0, None, 0.5]

    example = {"prompt": "p", "solution": "4"}
    assert correct_completions(reward, example, ["x", "y", "z"], threshold=0.5) == [True, False, True]
    assert correct_completions(reward, example, ["x", "y", "z"], threshold=0.75) == [True, False, False]
