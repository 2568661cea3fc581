"""What a training run was, as the model card records it: task, rewards and weights, command, base and final scores.

[`RunFacts`] are the facts a trainer cannot read from its own arguments (the task description, the checkpoint it
started from), passed to it at construction; [`RunRecord`] is what the card shows, collected by the trainer.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cli import resolve_recipe

__all__ = ["RunFacts", "RunRecord", "base_and_final_metrics", "recipe_of_command"]

# Evaluation entries that describe the evaluation itself rather than the model.
_NOT_SCORES = ("_runtime", "_samples_per_second", "_steps_per_second")


def base_and_final_metrics(
    log_history: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, float] | None, dict[str, float] | None, int | None]:
    """The evaluation metrics of the base model (an evaluation logged at step 0, i.e. `eval_on_start=True`) and of the
    final weights (the last evaluation after step 0), from `TrainerState.log_history`.

    Returns:
        `(base, final, final_step)`; `base` / `final` are `None` when no such evaluation was logged.
    """
    evals = [entry for entry in log_history if "eval_reward" in entry and "step" in entry]

    def scores(entry: Mapping[str, Any]) -> dict[str, float]:
        return {
            key: float(value)
            for key, value in entry.items()
            if key.startswith("eval_") and not key.endswith(_NOT_SCORES) and isinstance(value, (int, float))
        }

    base = next((scores(entry) for entry in evals if entry["step"] == 0), None)
    later = [entry for entry in evals if entry["step"] > 0]
    final = scores(later[-1]) if later else None
    return base, final, (later[-1]["step"] if later else None)


def recipe_of_command(command: Sequence[str]) -> tuple[str | None, str | None]:
    """The `--config` recipe of a command line and its text, when it can be read.

    The recipe is found as the command line found it ([`hf_es.cli.resolve_recipe`]): a path, or a shipped recipe's
    name (`--config smollm2_cpu_arithmetic`), so a run launched by name records its recipe too.

    Args:
        command: The command line, e.g. `sys.argv`.

    Returns:
        The `--config` value as given and the text of the file it resolves to; `(None, None)` when there is none
        or it cannot be read.
    """
    for index, arg in enumerate(command):
        config = arg.split("=", 1)[1] if arg.startswith("--config=") else None
        if arg == "--config" and index + 1 < len(command):
            config = command[index + 1]
        if config is not None and Path(path := resolve_recipe(config)).is_file():
            return config, Path(path).read_text()
    return None, None


@dataclass(frozen=True)
class RunFacts:
    """What a trainer cannot read from its own arguments about the run: passed in at construction
    (`ESTrainer(..., run_facts=RunFacts(...))`, keyword-only) and recorded in its model card and lineage.

    Attributes:
        task: What the model is trained on, as [`hf_es.tasks.describe_task`] returns it (the card's task section);
            `None` when the trainer is given a dataset directly.
        source: The checkpoint training starts from, whose `hf_es_lineage.json` the run continues; `None`: the model
            the trainer was given.
        dataset_name: The task recorded as the run's stage in the lineage (and in the card's `datasets`); `None`:
            only the `dataset_name` given to `push_to_hub` / `create_model_card`, if any.
    """

    task: Mapping[str, Any] | None = None
    source: str | None = None
    dataset_name: str | None = None


@dataclass
class RunRecord:
    """The facts of a run the model card reports, beyond the training arguments.

    Attributes:
        task: What the model was trained on, as [`hf_es.tasks.describe_task`] returns it (Hub id, or generator and
            parameters); `None` when the trainer was given a dataset directly.
        reward_funcs: Names of the reward functions, in order.
        reward_weights: Their weights (`None`: all 1).
        command: The command line that trained the model (`sys.argv`).
        recipe_path, recipe: The `--config` recipe of the command and its text, when readable.
        example_prompt: A prompt of the task (chat messages or text), used in the card's quick-start example.
        max_new_tokens: The generation length of the run (`max_completion_length`).
        base_metrics, final_metrics: Evaluation metrics of the base model and of the final weights.
        final_step: The step of `final_metrics`.
    """

    task: Mapping[str, Any] | None = None
    reward_funcs: Sequence[str] = ()
    reward_weights: Sequence[float] | None = None
    command: Sequence[str] | None = None
    recipe_path: str | None = None
    recipe: str | None = None
    example_prompt: Any = None
    max_new_tokens: int | None = None
    base_metrics: Mapping[str, float] | None = None
    final_metrics: Mapping[str, float] | None = None
    final_step: int | None = None

    @property
    def weights(self) -> list[float]:
        """The reward weights, 1 for each function when none were given."""
        return list(self.reward_weights) if self.reward_weights else [1.0] * len(self.reward_funcs)

    @classmethod
    def from_run(
        cls,
        *,
        task: Mapping[str, Any] | None = None,
        reward_funcs: Sequence[str] = (),
        reward_weights: Sequence[float] | None = None,
        example_prompt: Any = None,
        max_new_tokens: int | None = None,
        log_history: Sequence[Mapping[str, Any]] = (),
        command: Sequence[str] | None = None,
    ) -> RunRecord:
        """The record of a run: the given facts, plus the command's recipe and the base and final scores.

        Args:
            task, reward_funcs, reward_weights, example_prompt, max_new_tokens: See the attributes.
            log_history: `TrainerState.log_history`, for the base and final evaluation metrics.
            command: The command line (defaults to `sys.argv`).
        """
        command = list(sys.argv if command is None else command)
        recipe_path, recipe = recipe_of_command(command)
        base, final, final_step = base_and_final_metrics(log_history)
        return cls(
            task=task,
            reward_funcs=list(reward_funcs),
            reward_weights=reward_weights,
            command=command,
            recipe_path=recipe_path,
            recipe=recipe,
            example_prompt=example_prompt,
            max_new_tokens=max_new_tokens,
            base_metrics=base,
            final_metrics=final,
            final_step=final_step,
        )
