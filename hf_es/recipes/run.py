"""One function that trains and evaluates a method (ES or the GRPO baseline) on a recipe's task, for
`train_es`, `train_grpo`, `sweep`, `compose` and the reproduction."""

from __future__ import annotations

import os
from typing import Any

from ..grpo import GRPOEvalArguments, SharedEvalGRPOTrainer
from ..model_card import RunFacts, plot_reward_curve
from ..rewards import reward_functions
from ..tasks import TaskArguments, apply_model_config, describe_task, load_task
from ..trainer import ESTrainer

__all__ = ["METHODS", "build_trainer", "train_and_evaluate"]

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
    """Trains `method` on the recipe, evaluates the final weights, saves them with the model card and the reward
    curve, prints the evaluation summary, and pushes when `push_to_hub` is set.

    The printed `eval_reward: <start> at start -> <end> at the end` line is what `compose` reads from each stage.

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
        evals = [entry["eval_reward"] for entry in trainer.state.log_history if "eval_reward" in entry]
        if len(evals) >= 2:
            print(f"eval_reward: {evals[0]:.4f} at start -> {evals[-1]:.4f} at the end ({len(evals)} evaluations)")
        print(f"Saved the model to {training_args.output_dir} and the reward curve to {curve}")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=task_args.dataset_name)
    return trainer
