"""The GRPO baseline: TRL's GRPOTrainer on exactly the data, prompts, rewards, evaluation and logging of train_es.py.

    accelerate launch scripts/train_grpo.py --config recipes/smollm2_cpu_arithmetic_grpo.yaml
    accelerate launch --config_file accelerate_configs/deepspeed_zero2.yaml scripts/train_grpo.py \
        --config recipes/qwen2.5-1.5b-instruct_gsm8k_grpo.yaml

Any `GRPOConfig`, `ModelConfig` or `TaskArguments` field can be set in the YAML or overridden on the command line.
The task fields (`dataset_name`, `reward_funcs`, `system_prompt`, ...) are those of `scripts/train_es.py`, read by
the same `hf_es.tasks` registry, so an ES run and a GRPO run on the same task see identical prompts and golds and are
scored by identical reward functions. Training logs keep TRL's names (`reward`, `reward_std`,
`rewards/<fn>/mean`, `completions/mean_length`, ...), which `ESTrainer` also uses.

Evaluation is the one `ESTrainer` runs: every evaluation prompt is answered once by the current weights at
`eval_temperature` (greedy by default), scored by the same reward functions, and logged as `eval_reward`,
`eval_rewards/<fn>/mean` and `eval_completions/mean_length`. (GRPOTrainer's own evaluation would sample
`num_generations` completions at the training temperature, which is not what the ES side reports.)

The output folder gets the weights, tokenizer, `reward_curve.png`, TRL's model card plus the training lineage
(`hf_es_lineage.json`: each stage's method, starting checkpoint and number of updates, so that ES->GRPO and GRPO->ES
compositions are traceable) and `log_history.json`.
"""

from __future__ import annotations

from trl import GRPOConfig, ModelConfig

from ..cli import ScriptArgumentParser, training_help_sections
from ..grpo import GRPOEvalArguments, SharedEvalGRPOTrainer
from ..tasks import TaskArguments
from .run import train_and_evaluate

__all__ = ["build_parser", "main"]


def main(
    task_args: TaskArguments,
    training_args: GRPOConfig,
    model_args: ModelConfig,
    eval_args: GRPOEvalArguments | None = None,
) -> SharedEvalGRPOTrainer:
    """Trains and evaluates GRPO on the recipe's task (see [`train_and_evaluate`]); returns the trainer."""
    return train_and_evaluate("grpo", task_args, training_args, model_args, eval_args)


def build_parser() -> ScriptArgumentParser:
    """The command line of `train_grpo`: recipe fields of `TaskArguments`, `GRPOConfig`, `ModelConfig` and
    `GRPOEvalArguments`."""
    return ScriptArgumentParser(
        (TaskArguments, GRPOConfig, ModelConfig, GRPOEvalArguments),
        description="The GRPO baseline: TRL's GRPOTrainer on the data, rewards and evaluation of train_es.py.",
        help_sections=training_help_sections(
            "GRPO",
            ["learning_rate", "beta", "loss_type", "epsilon", "scale_rewards"],
            extra={"Evaluation (as ESTrainer)": ["eval_temperature", "eval_max_completion_length"]},
        ),
        examples=["accelerate launch scripts/train_grpo.py --config recipes/smollm2_cpu_arithmetic_grpo.yaml"],
        required=["model_name_or_path"],
    )


if __name__ == "__main__":
    main(*build_parser().parse_args_and_config())
