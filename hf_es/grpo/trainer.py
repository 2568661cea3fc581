"""`SharedEvalGRPOTrainer`: TRL's `GRPOTrainer` whose evaluation is `ESTrainer.evaluate`'s protocol (one completion per
prompt at `eval_temperature`, the same reward aggregation and metric names), and whose saves and model card carry the
hf_es training arguments and lineage."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import torch
from datasets import Dataset
from trl import GRPOTrainer

from ..es import population_diversity
from ..evaluation import RewardEvaluationMixin, evaluate_rewards
from ..generation import SamplingConfig, TransformersGenerationBackend
from ..model_card import RunFacts
from ..model_card.lineage import training_lineage, write_lineage
from ..model_card.sections import lineage_text
from ..prompts import prompt_texts
from ..scoring import reward_weights_tensor, score_completions
from ..trainer.checkpoint_files import write_redacted_training_args
from ..trainer.step_logging import reaches_threshold, resolve_success_threshold

__all__ = ["GRPOEvalArguments", "SharedEvalGRPOTrainer"]


@dataclass
class GRPOEvalArguments:
    """How the GRPO baseline evaluates (the same protocol as `ESTrainer.evaluate`).

    Args:
        eval_temperature: Sampling temperature of evaluation; `0.0` is greedy, as in the ES recipes.
        eval_max_completion_length: Maximum new tokens at evaluation (defaults to `max_completion_length`).
    """

    eval_temperature: float = field(default=0.0, metadata={"help": "Evaluation temperature (0: greedy)."})
    eval_max_completion_length: int | None = field(
        default=None, metadata={"help": "Max new tokens at evaluation (default: max_completion_length)."}
    )


class SharedEvalGRPOTrainer(RewardEvaluationMixin, GRPOTrainer):
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

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # Adds `group/coverage` to TRL 1.16's metrics (it logs the rewards' mean and spread only), the counterpart of
        # ES's `population/coverage`: the G completions of a prompt play the members.
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.model.training:
            self._metrics["train"]["group/coverage"].append(self._group_coverage(rewards_per_func))
        return rewards_per_func

    def _group_coverage(self, rewards_per_func: Any) -> float:
        """The fraction of a step's prompts with at least one correct completion among their G (gathered over the
        processes, so every process logs the same value); correct as in ES (`ESConfig.success_threshold`'s
        default: the total reward reaches its maximum)."""
        weights = self._shared_reward_weights.to(rewards_per_func.device)
        threshold = resolve_success_threshold(None, weights.cpu())
        scorable = ~rewards_per_func.isnan().all(dim=1)
        total = (rewards_per_func * weights).nansum(dim=1)
        correct = reaches_threshold(total, threshold).to(torch.float64)
        success = torch.where(scorable, correct, torch.full_like(correct, float("nan")))
        return population_diversity(success.cpu().view(-1, self.num_generations).T).coverage

    def distributed_summary(self) -> str:
        """How this run is laid out, e.g. `"DEEPSPEED (ZeRO stage 2) x 8 process(es)"` (printed at the start)."""
        kind = str(self.accelerator.distributed_type).split(".")[-1]
        plugin = getattr(self.accelerator.state, "deepspeed_plugin", None)
        if plugin is not None:
            kind += f" (ZeRO stage {plugin.zero_stage})"
        return f"{kind} x {self.accelerator.num_processes} process(es)"

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict)
        write_redacted_training_args(output_dir or self.args.output_dir, self.args)  # as ESTrainer

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None, tags=None) -> None:
        """Writes TRL's model card plus the hf_es lineage into `args.output_dir` (called on checkpoints and pushes)."""
        if self.run_facts is not None and self.is_world_process_zero():
            self.write_lineage_card(self.run_facts.source, self.run_facts.dataset_name)

    def write_lineage_card(self, model_path: str, dataset_name: str | None = None) -> list[dict[str, Any]]:
        """Writes TRL's GRPO model card with the hf_es lineage section, `hf_es_lineage.json` and `log_history.json`
        into `args.output_dir`.

        Args:
            model_path: The checkpoint training started from (its `hf_es_lineage.json`, if any, is continued).
            dataset_name: The task, recorded as the stage's dataset.

        Returns:
            The lineage: the earlier stages read from `model_path`, then this GRPO stage.
        """
        from huggingface_hub import ModelCard

        output_dir = self.args.output_dir
        lineage = training_lineage(model_path, self.state.global_step, dataset_name, method="GRPO")
        GRPOTrainer.create_model_card(self, model_name=os.path.basename(os.path.normpath(output_dir)))
        card_path = os.path.join(output_dir, "README.md")
        card = ModelCard.load(card_path)
        root = lineage[0]["model"]
        card.data.base_model = root  # the root of the lineage (TRL leaves local folders out)
        card.text = card.text.replace(
            "[None](https://huggingface.co/None)", f"[{root}](https://huggingface.co/{root})"
        )
        card.text = card.text.replace('model="None"', f'model="{self.args.hub_model_id or output_dir}"')
        tags = list(card.data.tags or [])
        card.data.tags = tags + [tag for tag in ("hf_es", "grpo") if tag not in tags]
        steps = "\n".join(f"{i}. {lineage_text(stage)}" for i, stage in enumerate(lineage, 1))
        card.text = card.text.rstrip("\n") + f"\n\n## Lineage\n\n{steps}\n\n![reward curve](reward_curve.png)\n"
        card.save(card_path)
        os.makedirs(output_dir, exist_ok=True)
        write_lineage(output_dir, lineage)
        with open(os.path.join(output_dir, "log_history.json"), "w") as f:
            json.dump(self.state.log_history, f, indent=2)
        return lineage

    def _evaluate_split(self, dataset: Dataset, metric_key_prefix: str) -> dict[str, float]:
        # One dataset of `evaluate` (RewardEvaluationMixin): greedy on the unwrapped policy, scored as ESTrainer scores.
        from trl.models.utils import unwrap_model_for_generation

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
