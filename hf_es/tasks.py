"""Task registry shared by the training scripts: dataset loaders and reward functions by name.

`scripts/train_es.py` (and a GRPO baseline script) read the same recipe fields through [`TaskArguments`], so ES and
GRPO runs see exactly the same prompts, golds and rewards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset

__all__ = ["TaskArguments", "apply_model_config", "load_task", "reward_functions"]


@dataclass
class TaskArguments:
    """Which task to train and evaluate on.

    Args:
        dataset_name: `"arithmetic"`, `"gsm8k"`, `"math500"`, `"countdown"`, `"deepscaler"`, or a local JSONL/dataset
            folder with `prompt` and `solution` columns.
        dataset_train_split: Split for training (`gsm8k`: `train`; `countdown`: `train`).
        dataset_test_split: Split for evaluation (`None` disables evaluation).
        num_train_samples: Number of training problems (`None`: all).
        num_eval_samples: Number of evaluation problems (`None`: all).
        reward_funcs: Names of reward functions: `accuracy`, `format`, `countdown`.
        arithmetic_operation: `add`, `sub` or `mul` (arithmetic task).
        arithmetic_min_value: Smallest operand (arithmetic task).
        arithmetic_max_value: Largest operand (arithmetic task).
        system_prompt: Overrides the task's default system prompt (`""` removes it).
        dataset_path: Local file or folder to read a named task's raw rows from instead of the Hub (e.g. a DeepScaleR
            JSONL with `problem` and `answer` columns on a machine without network access).
        eval_dataset_name: Evaluate on another task than the one trained on (e.g. `"math500"` when training on
            `"deepscaler"`, which has only a train split); `dataset_test_split` is then that task's split.
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
    dataset_path: str | None = field(
        default=None, metadata={"help": "Local file/folder with the named task's raw rows (instead of the Hub)."}
    )
    eval_dataset_name: str | None = field(
        default=None, metadata={"help": "Task to evaluate on (default: dataset_name)."}
    )


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

    def load(split: str, num: int | None, split_seed: int, name: str) -> Dataset:
        source = {"name_or_path": args.dataset_path} if args.dataset_path and name == args.dataset_name else {}
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
            return data.load_gsm8k(split, num_samples=num, seed=seed, **source, **overrides)
        if name == "math500":
            return data.load_math500(split, num_samples=num, seed=seed, **source, **overrides)
        if name == "deepscaler":
            return data.load_deepscaler(split, num_samples=num, seed=seed, **source, **overrides)
        if name == "countdown":
            return data.load_countdown(split, num_samples=num or 1000, seed=seed, **overrides)
        dataset = data.read_jsonl(name) if name.endswith(".jsonl") else Dataset.load_from_disk(name)
        return dataset.select(range(min(num, len(dataset)))) if num else dataset

    # Distinct seeds: generated train and eval problems are drawn independently.
    train = load(args.dataset_train_split, args.num_train_samples, seed, args.dataset_name)
    evaluation = None
    if args.dataset_test_split:
        eval_name = args.eval_dataset_name or args.dataset_name
        evaluation = load(args.dataset_test_split, args.num_eval_samples, seed + 1_000_003, eval_name)
    return train, evaluation


def apply_model_config(model_args: Any, training_args: Any) -> str:
    """Folds TRL's `ModelConfig` (dtype, revision, attention, remote code) into the trainer config's
    `model_init_kwargs`, the same way for the ES and GRPO scripts.

    Args:
        model_args: A `trl.ModelConfig`.
        training_args: An `ESConfig` or `GRPOConfig`; its `model_init_kwargs` and `trust_remote_code` are updated.

    Returns:
        The model to load: a local folder or hub id (the bundled SmolLM2 resolves to its local conversion).
    """
    from .models import resolve_model_name_or_path

    model_init_kwargs = dict(training_args.model_init_kwargs or {})
    model_init_kwargs.setdefault("dtype", model_args.dtype or "auto")
    model_init_kwargs.setdefault("revision", model_args.model_revision)
    if model_args.attn_implementation:
        model_init_kwargs.setdefault("attn_implementation", model_args.attn_implementation)
    training_args.model_init_kwargs = model_init_kwargs
    training_args.trust_remote_code = training_args.trust_remote_code or getattr(
        model_args, "trust_remote_code", False
    )
    return resolve_model_name_or_path(model_args.model_name_or_path)
