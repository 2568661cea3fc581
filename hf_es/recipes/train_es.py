"""Evolution Strategies post-training from the command line, with TRL-style YAML recipes and CLI overrides.

    accelerate launch scripts/train_es.py --config recipes/smollm2_cpu_arithmetic.yaml
    accelerate launch --config_file accelerate_configs/cpu.yaml --num_processes 2 scripts/train_es.py \
        --config recipes/smollm2_cpu_arithmetic.yaml --max_steps 10

Any `ESConfig`, `ModelConfig` or `TaskArguments` field can be set in the YAML or overridden on the command line.
"""

from __future__ import annotations

from trl import ModelConfig

from ..cli import ScriptArgumentParser, training_help_sections
from ..tasks import TaskArguments
from ..trainer import ESConfig, ESTrainer
from ..trainer.es_config import check_no_grpo_only_fields
from .run import train_and_evaluate

__all__ = ["build_parser", "main"]


def build_parser() -> ScriptArgumentParser:
    """The command line of `train_es`: recipe fields of `TaskArguments`, `ESConfig` and `ModelConfig`."""
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


def main(task_args: TaskArguments, training_args: ESConfig, model_args: ModelConfig) -> ESTrainer:
    """Trains and evaluates ES on the recipe's task (see [`train_and_evaluate`]); returns the trainer."""
    return train_and_evaluate("es", task_args, training_args, model_args)


if __name__ == "__main__":
    main(*build_parser().parse_args_and_config())
