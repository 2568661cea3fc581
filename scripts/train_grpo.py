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

import json
import os
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer, ModelConfig

from hf_es.cli import ScriptArgumentParser, training_help_sections
from hf_es.evaluation import evaluate_rewards
from hf_es.generation import SamplingConfig, TransformersGenerationBackend
from hf_es.model_card import RunFacts, plot_reward_curve
from hf_es.model_card.lineage import training_lineage, write_lineage
from hf_es.model_card.sections import lineage_text
from hf_es.prompts import prompt_texts
from hf_es.rewards import reward_functions
from hf_es.scoring import reward_weights_tensor, score_completions
from hf_es.tasks import TaskArguments, apply_model_config, load_task
from hf_es.trainer.checkpoint_files import write_redacted_training_args


@dataclass
class GRPOEvalArguments:
    """How `scripts/train_grpo.py` evaluates (the same protocol as `ESTrainer.evaluate`).

    Args:
        eval_temperature: Sampling temperature of evaluation; `0.0` is greedy, as in the ES recipes.
        eval_max_completion_length: Maximum new tokens at evaluation (defaults to `max_completion_length`).
    """

    eval_temperature: float = field(default=0.0, metadata={"help": "Evaluation temperature (0: greedy)."})
    eval_max_completion_length: int | None = field(
        default=None, metadata={"help": "Max new tokens at evaluation (default: max_completion_length)."}
    )


class SharedEvalGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` whose `evaluate` is `ESTrainer.evaluate`'s protocol (one completion per prompt, same sampling,
    same reward aggregation, same metric names), so that ES and GRPO evaluation numbers are directly comparable."""

    def __init__(
        self,
        *args: Any,
        eval_arguments: GRPOEvalArguments | None = None,
        run_facts: RunFacts | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.eval_arguments = eval_arguments or GRPOEvalArguments()
        self.run_facts = run_facts  # the card's lineage: the starting checkpoint and the dataset name
        self._shared_reward_weights = reward_weights_tensor(self.args.reward_weights, len(self.reward_funcs))

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict)
        write_redacted_training_args(output_dir or self.args.output_dir, self.args)  # as ESTrainer

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None, tags=None) -> None:
        """Writes TRL's model card plus the hf_es lineage into `args.output_dir` (called on checkpoints and pushes)."""
        if self.run_facts is not None and self.is_world_process_zero():
            write_grpo_card(self, self.run_facts.source, self.run_facts.dataset_name)

    def evaluate(
        self,
        eval_dataset: Dataset | dict[str, Dataset] | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float]:
        """Scores the current weights on the evaluation set, as `ESTrainer.evaluate` does.

        Args:
            eval_dataset: Overrides `self.eval_dataset`; a dict evaluates each entry with its key in the prefix.
            ignore_keys: Unused (kept for `Trainer` compatibility).
            metric_key_prefix: Prefix of the metric names.

        Returns:
            `{prefix}_reward`, `{prefix}_rewards/<fn>/mean`, `{prefix}_completions/mean_length`, runtime.
        """
        from trl.models.utils import unwrap_model_for_generation

        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ValueError("evaluate() needs an eval_dataset.")
        if isinstance(dataset, dict):
            metrics = {}
            for key, subset in dataset.items():
                metrics.update(self.evaluate(subset, ignore_keys, f"{metric_key_prefix}_{key}"))
            return metrics
        tokenizer = self.processing_class
        sampling = SamplingConfig(
            max_completion_length=self.eval_arguments.eval_max_completion_length or self.args.max_completion_length,
            temperature=self.eval_arguments.eval_temperature,
            top_p=self.args.top_p,
            top_k=self.args.top_k or 0,
            min_p=self.args.min_p,
            repetition_penalty=self.args.repetition_penalty,
        )

        def score(batch: list[dict[str, Any]], result: Any, where: str) -> Any:
            # ESTrainer's scoring (its default failure policy): the two evaluations aggregate rewards identically.
            weights = self._shared_reward_weights
            return score_completions(
                self.reward_funcs, weights, batch, result.completions, result.completion_ids, where=where
            )

        was_training = self.model.training
        self.model.eval()
        with unwrap_model_for_generation(self.model_wrapped, self.accelerator) as unwrapped:
            metrics = evaluate_rewards(
                TransformersGenerationBackend(unwrapped, tokenizer),
                dataset,
                format_prompts=lambda prompts: prompt_texts(
                    prompts, tokenizer, chat_template_kwargs=self.args.chat_template_kwargs
                ),
                score=score,
                sampling=sampling,
                reward_func_names=self.reward_func_names,
                batch_size=self.args.per_device_eval_batch_size,
                seed=self.args.seed,
                accelerator=self.accelerator,
                metric_key_prefix=metric_key_prefix,
            )
        self.log(metrics)  # in eval mode, so GRPOTrainer.log does not fold pending training metrics into it
        self.model.train(was_training)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


def write_grpo_card(trainer: GRPOTrainer, model_path: str, dataset_name: str | None) -> list[dict[str, Any]]:
    """Writes TRL's GRPO model card with the hf_es lineage section, `hf_es_lineage.json` and `log_history.json` into
    `trainer.args.output_dir`.

    Args:
        trainer: The GRPO trainer (after training).
        model_path: The checkpoint training started from (its `hf_es_lineage.json`, if any, is continued).
        dataset_name: The task, recorded as the stage's dataset.

    Returns:
        The lineage: the earlier stages read from `model_path`, then this GRPO stage.
    """
    from huggingface_hub import ModelCard

    output_dir = trainer.args.output_dir
    lineage = training_lineage(model_path, trainer.state.global_step, dataset_name, method="GRPO")
    GRPOTrainer.create_model_card(trainer, model_name=os.path.basename(os.path.normpath(output_dir)))
    card_path = os.path.join(output_dir, "README.md")
    card = ModelCard.load(card_path)
    root = lineage[0]["model"]
    card.data.base_model = root  # the root of the lineage (TRL leaves local folders out)
    card.text = card.text.replace("[None](https://huggingface.co/None)", f"[{root}](https://huggingface.co/{root})")
    card.text = card.text.replace('model="None"', f'model="{trainer.args.hub_model_id or output_dir}"')
    tags = list(card.data.tags or [])
    card.data.tags = tags + [tag for tag in ("hf_es", "grpo") if tag not in tags]
    steps = "\n".join(f"{i}. {lineage_text(stage)}" for i, stage in enumerate(lineage, 1))
    card.text = card.text.rstrip("\n") + f"\n\n## Lineage\n\n{steps}\n\n![reward curve](reward_curve.png)\n"
    card.save(card_path)
    os.makedirs(output_dir, exist_ok=True)
    write_lineage(output_dir, lineage)
    with open(os.path.join(output_dir, "log_history.json"), "w") as f:
        json.dump(trainer.state.log_history, f, indent=2)
    return lineage


def main(
    task_args: TaskArguments,
    training_args: GRPOConfig,
    model_args: ModelConfig,
    eval_args: GRPOEvalArguments | None = None,
) -> SharedEvalGRPOTrainer:
    """Trains with GRPO on the recipe's task; returns the trainer."""
    model_path = apply_model_config(model_args, training_args)

    train_dataset, eval_dataset = load_task(task_args, seed=training_args.seed)
    trainer = SharedEvalGRPOTrainer(
        model=model_path,
        reward_funcs=reward_functions(task_args.reward_funcs),
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        eval_arguments=eval_args,
        run_facts=RunFacts(source=model_path, dataset_name=task_args.dataset_name),
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    if eval_dataset is not None:
        trainer.evaluate()
    trainer.save_model(training_args.output_dir)
    if trainer.is_world_process_zero():
        write_grpo_card(trainer, model_path, task_args.dataset_name)
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


def build_parser() -> ScriptArgumentParser:
    """The command line of this script: recipe fields of `TaskArguments`, `GRPOConfig`, `ModelConfig` and
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
