"""The evaluation `ESTrainer.evaluate` and the GRPO baseline (`hf_es.grpo.SharedEvalGRPOTrainer`) share: every prompt
answered once by the current weights, scored by the training reward functions, summed over processes."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..es import stable_seed
from ..generation import GenerationBackend, GenerationResult, SamplingConfig
from ..generation.entropy import EntropySums
from ..scoring import RewardTally

__all__ = ["RewardEvaluationMixin", "evaluate_rewards"]

ScoreFn = Callable[[list[dict[str, Any]], GenerationResult, str], Any]
"""`score(rows, result, where)` -> `Scores` (with `per_function` and `total`), a `(per_function, total)` pair, or
`None` to leave the batch out."""


def evaluate_rewards(
    backend: GenerationBackend,
    dataset: Any,
    *,
    format_prompts: Callable[[list[Any]], list[str]],
    score: ScoreFn,
    sampling: SamplingConfig,
    reward_func_names: Sequence[str],
    batch_size: int,
    seed: int,
    accelerator: Any,
    metric_key_prefix: str = "eval",
) -> dict[str, float]:
    """Scores the backend's current weights on `dataset`, each process taking every `world`-th example.

    Args:
        backend: Generates with the weights to evaluate.
        dataset: Rows with a `prompt` column and the columns the reward functions read.
        format_prompts: Prompts -> texts for the backend (`hf_es.prompts.prompt_texts` with the run's settings).
        score: `score(rows, result, where)`: per-function rewards `(completions, functions)` (NaN: not applicable)
            and weighted totals, as `Scores` or a pair, or `None` to leave the batch out.
        sampling: How to sample (greedy in the recipes).
        reward_func_names: Names of the reward functions, in `score`'s column order.
        batch_size: Prompts per `generate` call on each process.
        seed: Base of the per-batch sampling seeds (`stable_seed(seed, "eval", first index of the batch)`).
        accelerator: The `accelerate.Accelerator` whose processes share the work.
        metric_key_prefix: Prefix of the metric names.

    Returns:
        `{prefix}_reward`, `{prefix}_rewards/<fn>/mean`, `{prefix}_completions/mean_length`, `{prefix}_runtime`, and
        the mean per-token entropy (nats) of the evaluated policy on its own completions
        ([`GenerationBackend.completion_entropy`]): `{prefix}_entropy` where it is exact (transformers), else
        `{prefix}_entropy_lower_bound` with `{prefix}_entropy_top_k`, the k it is bounded from (vLLM).
    """
    start = time.perf_counter()
    indices = list(range(accelerator.process_index, len(dataset), accelerator.num_processes))
    tally = RewardTally(reward_func_names)
    entropy: EntropySums | None = None  # this process's sums; None while the engine cannot tell
    for offset in range(0, len(indices), batch_size):
        batch = [dataset[i] for i in indices[offset : offset + batch_size]]
        texts = format_prompts([example["prompt"] for example in batch])
        result = backend.generate(texts, sampling, seed=stable_seed(seed, "eval", indices[offset]))
        sums = backend.completion_entropy(texts, result.completion_ids, sampling.num_generations)
        if sums is not None:
            entropy = sums if entropy is None else entropy + sums
        scored = score(batch, result, f"evaluation, example {indices[offset]}")
        if scored is not None:
            # `hf_es.scoring.Scores` or a `(per_function, total)` pair: both carry the same two tensors.
            per_function, total = (scored.per_function, scored.total) if hasattr(scored, "total") else scored
            tally.add(per_function, total, result.completion_ids)
    metrics = tally.metrics(accelerator, metric_key_prefix)
    if entropy is not None:  # every process runs the same engine kind: all or none of them measure it
        summed = torch.tensor([entropy.total, entropy.tokens], dtype=torch.float64)
        if accelerator.num_processes > 1:
            summed = accelerator.reduce(summed.to(accelerator.device), reduction="sum").cpu()
        mean = float(summed[0] / summed[1]) if summed[1] else float("nan")
        if entropy.top_k is None:
            metrics[f"{metric_key_prefix}_entropy"] = mean
        else:
            metrics[f"{metric_key_prefix}_entropy_lower_bound"] = mean
            metrics[f"{metric_key_prefix}_entropy_top_k"] = float(entropy.top_k)
    metrics[f"{metric_key_prefix}_runtime"] = time.perf_counter() - start
    return metrics


class RewardEvaluationMixin:
    """`Trainer.evaluate` for the trainers that evaluate with [`evaluate_rewards`] (`ESTrainer`, the GRPO baseline).

    It replaces `transformers.Trainer.evaluate` (5.x) without calling it: that one runs a loss-based prediction loop,
    these trainers generate and score instead. A subclass implements `_evaluate_split(dataset, metric_key_prefix)`,
    the evaluation of one dataset, and logs and reports its metrics there.
    """

    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float]:
        """Scores the current weights (ES: the centre) on the evaluation set.

        Args:
            eval_dataset: Overrides `self.eval_dataset`; a dict evaluates each entry with its key in the prefix.
            ignore_keys: Unused (kept for `Trainer` compatibility).
            metric_key_prefix: Prefix of the metric names.

        Returns:
            `{prefix}_reward`, `{prefix}_rewards/<fn>/mean`, `{prefix}_completions/mean_length`, `{prefix}_runtime`
            (and `{prefix}_entropy`, see [`evaluate_rewards`]).
        """
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ValueError("evaluate() needs an eval_dataset.")
        if isinstance(dataset, dict):
            metrics = {}
            for key, subset in dataset.items():
                metrics.update(self.evaluate(subset, ignore_keys, f"{metric_key_prefix}_{key}"))
            return metrics
        return self._evaluate_split(dataset, metric_key_prefix)
