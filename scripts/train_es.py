"""Evolution Strategies post-training from the command line, with TRL-style YAML recipes and CLI overrides.

    accelerate launch scripts/train_es.py --config recipes/smollm2_cpu_arithmetic.yaml
    accelerate launch --config_file accelerate_configs/cpu.yaml --num_processes 2 scripts/train_es.py \
        --config recipes/smollm2_cpu_arithmetic.yaml --max_steps 10

Any `ESConfig`, `ModelConfig` or `TaskArguments` field can be set in the YAML or overridden on the command line.
"""

from __future__ import annotations

import os

from trl import ModelConfig

from hf_es import ESConfig, ESTrainer
from hf_es.cli import ScriptArgumentParser, training_help_sections
from hf_es.model_card import RunFacts, plot_reward_curve
from hf_es.rewards import reward_functions
from hf_es.tasks import TaskArguments, apply_model_config, describe_task, load_task
from hf_es.trainer.es_config import check_no_grpo_only_fields


def build_parser() -> ScriptArgumentParser:
    """The command line of this script: recipe fields of `TaskArguments`, `ESConfig` and `ModelConfig`."""
    return ScriptArgumentParser(
        (TaskArguments, ESConfig, ModelConfig),
        description="Evolution Strategies post-training of a causal LM with verifiable rewards (ESTrainer).",
        help_sections=training_help_sections(
            "ES", ["population_size", "sigma", "learning_rate", "fitness_shaping", "estimator", "noise_seed"]
        ),
        examples=[
            "accelerate launch scripts/train_es.py --config recipes/smollm2_cpu_arithmetic.yaml --max_steps 10",
            "accelerate launch --config_file accelerate_configs/multi_gpu.yaml scripts/train_es.py --config ...",
        ],
        required=["model_name_or_path"],
        check_names=check_no_grpo_only_fields,
    )


def main(task_args: TaskArguments, training_args: ESConfig, model_args: ModelConfig) -> None:
    model_path = apply_model_config(model_args, training_args)

    train_dataset, eval_dataset = load_task(task_args, seed=training_args.seed)
    trainer = ESTrainer(
        model=model_path,
        reward_funcs=reward_functions(task_args.reward_funcs),
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        run_facts=RunFacts(task=describe_task(task_args, seed=training_args.seed)),  # recorded in the model card
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    if eval_dataset is not None:
        trainer.evaluate()
    trainer.save_model(training_args.output_dir)
    if trainer.is_world_process_zero():
        curve = plot_reward_curve(
            trainer.state.log_history, os.path.join(training_args.output_dir, "reward_curve.png")
        )
        history = trainer.state.log_history
        evals = [entry["eval_reward"] for entry in history if "eval_reward" in entry]
        if len(evals) >= 2:
            print(f"eval_reward: {evals[0]:.4f} at start -> {evals[-1]:.4f} at the end ({len(evals)} evaluations)")
        print(f"Saved the model to {training_args.output_dir} and the reward curve to {curve}")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=task_args.dataset_name)


if __name__ == "__main__":
    main(*build_parser().parse_args_and_config())
