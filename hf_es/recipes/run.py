"""One function that trains and evaluates a method (ES or the GRPO baseline) on a recipe's task, for
`train_es`, `train_grpo`, `sweep`, `compose` and the reproduction."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from ..grpo import GRPOEvalArguments, SharedEvalGRPOTrainer
from ..model_card import RunFacts, plot_reward_curve
from ..rewards import reward_functions
from ..tasks import TaskArguments, apply_model_config, describe_task, load_task
from ..trainer import ESTrainer

__all__ = ["METHODS", "build_trainer", "run_summary", "train_and_evaluate"]

METHODS = ("es", "grpo")


def build_trainer(
    method: str,
    task_args: TaskArguments,
    training_args: Any,
    model_args: Any,
    eval_args: GRPOEvalArguments | None = None,
) -> ESTrainer | SharedEvalGRPOTrainer:
    """The trainer of `method` on the recipe's task: its data, reward functions and model.

    Args:
        method: `"es"` (`ESTrainer`) or `"grpo"` (the GRPO baseline, `SharedEvalGRPOTrainer`).
        task_args: The task (data, prompts, reward functions).
        training_args: An `ESConfig` for ES, a `GRPOConfig` for GRPO; its `model_init_kwargs` receive the model
            fields.
        model_args: A `trl.ModelConfig`.
        eval_args: How the GRPO baseline evaluates (GRPO only; default `GRPOEvalArguments()`).

    Returns:
        The trainer, not yet trained.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
    model_path = apply_model_config(model_args, training_args)
    train_dataset, eval_dataset = load_task(task_args, seed=training_args.seed)
    common = dict(
        model=model_path,
        reward_funcs=reward_functions(task_args.reward_funcs),
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
    )
    if method == "es":
        facts = RunFacts(task=describe_task(task_args, seed=training_args.seed))
        return ESTrainer(**common, run_facts=facts)
    facts = RunFacts(source=model_path, dataset_name=task_args.dataset_name)
    return SharedEvalGRPOTrainer(**common, eval_arguments=eval_args, run_facts=facts)


def train_and_evaluate(
    method: str,
    task_args: TaskArguments,
    training_args: Any,
    model_args: Any,
    eval_args: GRPOEvalArguments | None = None,
) -> ESTrainer | SharedEvalGRPOTrainer:
    """Trains `method` on the recipe, evaluates the final weights, saves them with the model card, the reward curve
    and `trainer_state.json` (every logged metric), prints the evaluation summary, and pushes when `push_to_hub` is
    set.

    The printed summary is [`run_summary`]'s; its `eval_reward: <start> at start -> <end> at the end` line is what
    `compose` reads from each stage.

    Args:
        method: `"es"` or `"grpo"` (see [`build_trainer`]).
        task_args: The task.
        training_args: An `ESConfig` (ES) or `GRPOConfig` (GRPO).
        model_args: A `trl.ModelConfig`.
        eval_args: How the GRPO baseline evaluates (GRPO only).

    Returns:
        The trained trainer.
    """
    trainer = build_trainer(method, task_args, training_args, model_args, eval_args)
    if method == "grpo" and trainer.is_world_process_zero():
        print(f"GRPO baseline: {trainer.distributed_summary()}")
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    if trainer.eval_dataset is not None:
        trainer.evaluate()
    trainer.save_model(training_args.output_dir)
    if trainer.is_world_process_zero():
        if method == "grpo":
            trainer.create_model_card()  # TRL's card with the lineage; ESTrainer's save_model writes its own
        curve = plot_reward_curve(
            trainer.state.log_history, os.path.join(training_args.output_dir, "reward_curve.png")
        )
        # Every logged number, beside the weights: the raw data of the printed summary even when no checkpoint is saved
        trainer.state.save_to_json(os.path.join(training_args.output_dir, "trainer_state.json"))
        for line in run_summary(trainer.state.log_history, trainer.train_dataset, trainer.eval_dataset):
            print(line)
        print(f"Saved the model to {training_args.output_dir} and the reward curve to {curve}")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=task_args.dataset_name)
    return trainer


def run_summary(log_history: Sequence[dict[str, Any]], train_dataset: Any, eval_dataset: Any) -> list[str]:
    """The lines `train_and_evaluate` prints at the end of a run: what the evaluation measured and on what, and the
    population's coverage over training.

    - `eval_reward: <start> at start -> <end> at the end (<n> evaluations)`, when there are two evaluations or more;
    - per reward function, its mean at every evaluation (`step 0: ..., step 15: ...`), under a label that says how
      many evaluation problems there were and how many of them training also draws: the prompts are compared, so
      "none in the training data" is measured, not assumed from the split's name;
    - `population/coverage` (ES only: the mean over a step's prompts of the chance that at least one member solves
      it, [`hf_es.es.population_diversity`]) at the first and last step and its mean over the steps.

    Args:
        log_history: `TrainerState.log_history`.
        train_dataset: The training dataset (a `prompt` column), or `None`.
        eval_dataset: The evaluation dataset (a `prompt` column), or `None`.

    Returns:
        The lines, without newlines; empty when nothing was evaluated or logged.
    """
    lines = []
    evals = [entry for entry in log_history if "eval_reward" in entry]
    if len(evals) >= 2:
        start, end = evals[0]["eval_reward"], evals[-1]["eval_reward"]
        lines.append(f"eval_reward: {start:.4f} at start -> {end:.4f} at the end ({len(evals)} evaluations)")
    if evals and eval_dataset is not None:
        problems = f"{len(eval_dataset)} evaluation problems"
        if train_dataset is not None:
            seen = {json.dumps(prompt, sort_keys=True) for prompt in train_dataset["prompt"]}
            shared = sum(json.dumps(prompt, sort_keys=True) in seen for prompt in eval_dataset["prompt"])
            problems += ", none in the training data" if shared == 0 else f", {shared} of them in the training data"
        names = [key for key in evals[-1] if key.startswith("eval_rewards/") and key.endswith("/mean")]
        # The final `evaluate()` repeats the last scheduled evaluation's step: one value per step, the latest
        by_step = {entry.get("step", "?"): entry for entry in evals}
        for key in names:
            values = ", ".join(f"step {step}: {entry[key]:.4f}" for step, entry in by_step.items() if key in entry)
            lines.append(f"{key[len('eval_rewards/') : -len('/mean')]} on {problems}: {values}")
    coverage = [
        (entry["step"], entry["population/coverage"]) for entry in log_history if "population/coverage" in entry
    ]
    if coverage:
        mean = sum(value for _, value in coverage) / len(coverage)
        (first_step, first), (last_step, last) = coverage[0], coverage[-1]
        lines.append(
            f"population/coverage (chance that at least one member solves a step's prompt): {first:.4f} at step "
            f"{first_step} -> {last:.4f} at step {last_step}, mean {mean:.4f} over {len(coverage)} steps"
        )
    return lines
