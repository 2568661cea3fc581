"""Task registry shared by the training scripts: dataset loaders and reward functions by name.

`scripts/train_es.py` (and a GRPO baseline script) read the same recipe fields through [`TaskArguments`], so ES and
GRPO runs see exactly the same prompts, golds and rewards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset

__all__ = ["TaskArguments", "load_task", "reward_functions"]


@dataclass
class TaskArguments:
    """Which task to train and evaluate on.

    Args:
        dataset_name: `"arithmetic"`, `"gsm8k"`, `"math500"`, `"countdown"`, or a local JSONL/dataset folder with
            `prompt` and `solution` columns.
        dataset_train_split: Split for training (`gsm8k`: `train`; `countdown`: `train`).
        dataset_test_split: Split for evaluation (`None` disables evaluation).
        num_train_samples: Number of training problems (`None`: all).
        num_eval_samples: Number of evaluation problems (`None`: all).
        reward_funcs: Names of reward functions: `accuracy`, `format`, `countdown`.
        arithmetic_operation: `add`, `sub` or `mul` (arithmetic task).
        arithmetic_min_value: Smallest operand (arithmetic task).
        arithmetic_max_value: Largest operand (arithmetic task).
        system_prompt: Overrides the task's default system prompt (`""` removes it).
    """

    dataset_name: str = field(default="arithmetic", metadata={"help": "Task or local dataset path."})
    dataset_train_split: str = field(default="train", metadata={"help": "Training split."})
    dataset_test_split: str | None = field(default="test", metadata={"help": "Evaluation split (None: no eval)."})
    num_train_samples: int | None = field(default=None, metadata={"help": "Training problems (None: all)."})
    num_eval_samples: int | None = field(default=None, metadata={"help": "Evaluation problems (None: all)."})
    reward_funcs: list[str] = field(default_factory=lambda: ["accuracy"], metadata={"help": "Reward names."})
    arithmetic_operation: str = field(default="mul", metadata={"help": "add, sub or mul."})
    arithmetic_min_value: int = field(default=2, metadata={"help": "Smallest operand."})
    arithmetic_max_value: int = field(default=9, metadata={"help": "Largest operand."})
    system_prompt: str | None = field(default=None, metadata={"help": "Overrides the task's system prompt."})


def reward_functions(names: list[str]) -> list[Callable[..., list[float | None]]]:
    """Looks up reward functions by name (`accuracy`, `format`, `countdown`)."""
    from . import rewards

    registry = {
        "accuracy": rewards.accuracy_reward,
        "format": rewards.format_reward,
        "countdown": rewards.countdown_reward,
    }
    unknown = [name for name in names if name not in registry]
    if unknown:
        raise ValueError(f"Unknown reward function(s) {unknown}; choose from {sorted(registry)}.")
    return [registry[name] for name in names]


def load_task(args: TaskArguments, seed: int = 0) -> tuple[Dataset, Dataset | None]:
    """Loads the training and evaluation datasets of a task.

    Args:
        args: The task arguments.
        seed: Seed for subsampling and generated tasks.

    Returns:
        `(train_dataset, eval_dataset)`; the evaluation set is `None` when `dataset_test_split` is `None`.
    """
    from . import data
    from .data import load_arithmetic

    overrides: dict[str, Any] = {}
    if args.system_prompt is not None:
        overrides["system_prompt"] = args.system_prompt or None

    def load(split: str, num: int | None, split_seed: int) -> Dataset:
        name = args.dataset_name
        if name == "arithmetic":
            return load_arithmetic(
                num_samples=num or 256,
                operation=args.arithmetic_operation,
                min_value=args.arithmetic_min_value,
                max_value=args.arithmetic_max_value,
                seed=split_seed,
                **overrides,
            )
        if name == "gsm8k":
            return data.load_gsm8k(split, num_samples=num, seed=seed, **overrides)
        if name == "math500":
            return data.load_math500(split, num_samples=num, seed=seed, **overrides)
        if name == "countdown":
            return data.load_countdown(split, num_samples=num or 1000, seed=seed, **overrides)
        dataset = data.read_jsonl(name) if name.endswith(".jsonl") else Dataset.load_from_disk(name)
        return dataset.select(range(min(num, len(dataset)))) if num else dataset

    # Distinct seeds: generated train and eval problems are drawn independently.
    train = load(args.dataset_train_split, args.num_train_samples, seed)
    evaluation = None
    if args.dataset_test_split:
        evaluation = load(args.dataset_test_split, args.num_eval_samples, seed + 1_000_003)
    return train, evaluation
