"""The CPU demo's recipe evaluates on problems training never draws, and its run prints that and the coverage."""

from __future__ import annotations

import os

import pytest
from datasets import Dataset
from trl import GRPOConfig, ModelConfig, TrlParser

from hf_es import ESConfig
from hf_es.grpo import GRPOEvalArguments
from hf_es.model_card import recipe_of_command
from hf_es.recipes.run import run_summary
from hf_es.tasks import TaskArguments, load_task

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ES_RECIPE = os.path.join(ROOT, "recipes", "smollm2_cpu_arithmetic.yaml")
GRPO_RECIPE = os.path.join(ROOT, "recipes", "smollm2_cpu_arithmetic_grpo.yaml")


def recipe_task(path: str) -> tuple[Dataset, Dataset]:
    config_type, extra = (GRPOConfig, (GRPOEvalArguments,)) if "grpo" in path else (ESConfig, ())
    types = (TaskArguments, config_type, ModelConfig, *extra)
    task, config = TrlParser(types).parse_args_and_config(["--config", path, "--output_dir", "x"])[:2]
    return load_task(task, seed=config.seed)


def prompt_texts(dataset: Dataset) -> set[str]:
    return {messages[-1]["content"] for messages in dataset["prompt"]}


def test_demo_recipes_evaluate_on_the_held_out_problems_only():
    train, evaluation = recipe_task(ES_RECIPE)
    assert len(train) == 2048 and len(evaluation) == 32
    # single-digit products, 64 ordered operand pairs: 32 for training, the other 32 each evaluated once
    assert len(prompt_texts(train)) == 32 and len(prompt_texts(evaluation)) == 32
    assert not prompt_texts(train) & prompt_texts(evaluation)
    # the GRPO twin trains and evaluates on the same problems
    grpo_train, grpo_evaluation = recipe_task(GRPO_RECIPE)
    assert grpo_evaluation["prompt"] == evaluation["prompt"] and grpo_train["prompt"] == train["prompt"]


LOG_HISTORY = [
    {"step": 0, "eval_reward": 0.5, "eval_rewards/accuracy_reward/mean": 0.5},
    {"step": 1, "reward": 0.5, "population/coverage": 0.625},
    {"step": 2, "reward": 0.75, "population/coverage": 0.875},
    {"step": 2, "eval_reward": 0.875, "eval_rewards/accuracy_reward/mean": 0.875},
    {"step": 2, "eval_reward": 0.9375, "eval_rewards/accuracy_reward/mean": 0.9375},  # the final evaluate()
]


def test_run_summary_states_held_out_accuracy_and_coverage():
    train, evaluation = recipe_task(ES_RECIPE)
    assert run_summary(LOG_HISTORY, train, evaluation) == [
        "eval_reward: 0.5000 at start -> 0.9375 at the end (3 evaluations)",
        "accuracy_reward on 32 evaluation problems, none in the training data: step 0: 0.5000, step 2: 0.9375",
        "population/coverage (chance that at least one member solves a step's prompt): 0.6250 at step 1 -> "
        "0.8750 at step 2, mean 0.7500 over 2 steps",
    ]
    # evaluating on training problems is counted, not hidden
    assert f"{len(evaluation)} of them in the training data" in run_summary(LOG_HISTORY, evaluation, evaluation)[1]
    # GRPO logs no population: no coverage line
    assert len(run_summary([entry for entry in LOG_HISTORY if "eval_reward" in entry], train, evaluation)) == 2


@pytest.mark.parametrize(
    "config", ["smollm2_cpu_arithmetic", "smollm2_cpu_arithmetic.yaml", "recipes/smollm2_cpu_arithmetic.yaml"]
)
def test_card_records_a_recipe_given_by_name_in_any_directory(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open(ES_RECIPE) as f:
        text = f.read()
    assert recipe_of_command(["train_es.py", "--config", config, "--max_steps", "2"]) == (config, text)
    assert recipe_of_command(["train_es.py", f"--config={config}"]) == (config, text)
    assert recipe_of_command(["train_es.py", "--config", "no_such_recipe"]) == (None, None)
