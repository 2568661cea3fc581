"""The one task registry: what each named task loads, how it is scored, and where its data comes from.

Training (`scripts/train_es.py`, `scripts/train_grpo.py`), evaluation (`hf_es.evaluation`,
`scripts/evaluate_pass_at_k.py`) and the model card (`hf_es.model_card`) all read [`TASKS`], so a task has one
loader, one default verifier and one description everywhere. Hub-backed tasks name their Hub id; locally generated
tasks (`arithmetic`, `countdown`) name their generator and the parameters that define the problems.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset

__all__ = [
    "TASKS",
    "Task",
    "TaskArguments",
    "apply_model_config",
    "describe_task",
    "get_task",
    "is_registered",
    "load_task",
    "reward_functions",
]

# Generated arithmetic draws evaluation problems from a shifted seed: a different draw, but over a small operand range
# the same problems recur; `held_out_fraction > 0` partitions the problems instead (disjoint splits).
_EVAL_SEED_OFFSET = 1_000_003


def _load_arithmetic(split: str, num_samples: int | None, seed: int, **options: Any) -> Dataset:
    from .data import load_arithmetic

    split_seed = seed if split == "train" else seed + _EVAL_SEED_OFFSET
    return load_arithmetic(num_samples=num_samples or 256, seed=split_seed, split=split, **options)


def _load_countdown(split: str, num_samples: int | None, seed: int, **options: Any) -> Dataset:
    from .data import load_countdown

    return load_countdown(split, num_samples=num_samples or 1000, seed=seed, **options)


def _load_gsm8k(split: str, num_samples: int | None, seed: int, **options: Any) -> Dataset:
    from .data import load_gsm8k

    return load_gsm8k(split, num_samples=num_samples, seed=seed, **options)


def _load_math500(split: str, num_samples: int | None, seed: int, **options: Any) -> Dataset:
    from .data import load_math500

    return load_math500(split, num_samples=num_samples, seed=seed, **options)


def _load_deepscaler(split: str, num_samples: int | None, seed: int, **options: Any) -> Dataset:
    from .data import load_deepscaler

    return load_deepscaler(split, num_samples=num_samples, seed=seed, **options)


@dataclass(frozen=True)
class Task:
    """A named task: its loader, its default verifier(s) and where its problems come from.

    Attributes:
        name: Registry key (`dataset_name` in recipes, `--dataset` of the evaluation script).
        display_name: Human-readable name (model card, plots).
        loader: `loader(split, num_samples, seed, **options) -> Dataset` with `prompt` and `solution` columns.
        rewards: Default reward function names (registered in [`hf_es.rewards.registry`]).
        reward_weights: Weights of `rewards` (`None`: all 1).
        hub_id: Hub dataset id for Hub-backed tasks (`None` for generated ones).
        hub_config: Hub dataset config, if any.
        generator: Dotted path of the generator of a locally generated task (`None` for Hub-backed ones).
        options: Loader keyword -> `TaskArguments` field, for the parameters that define the problems (e.g.
            `{"operation": "arithmetic_operation"}`); shown in the model card of generated tasks.
        accepts_path: Whether the loader reads its raw rows from a local path (`dataset_path`).
        majority_vote: Whether Maj@K (vote over extracted final answers) is meaningful for this task.
    """

    name: str
    display_name: str
    loader: Callable[..., Dataset]
    rewards: tuple[str, ...] = ("accuracy",)
    reward_weights: tuple[float, ...] | None = None
    hub_id: str | None = None
    hub_config: str | None = None
    generator: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    accepts_path: bool = False
    majority_vote: bool = True

    @property
    def is_generated(self) -> bool:
        """Whether the problems are generated locally (no Hub dataset)."""
        return self.generator is not None

    def load(
        self,
        split: str,
        num_samples: int | None = None,
        seed: int = 0,
        args: TaskArguments | None = None,
        **overrides: Any,
    ) -> Dataset:
        """Loads `num_samples` problems of `split`.

        Args:
            split: Split name; generated tasks without splits draw non-`train` splits from a shifted seed.
            num_samples: Number of problems (`None`: all, or the generator's default).
            seed: Subsampling / generation seed.
            args: Task arguments whose generator parameters ([`Task.options`]) and `dataset_path` apply.
            **overrides: Other loader keywords (e.g. `system_prompt`).

        Returns:
            A Dataset with `prompt` and `solution` columns.
        """
        options = self.parameters(args) if args is not None else {}
        if args is not None and args.dataset_path and self.accepts_path and args.dataset_name == self.name:
            options["name_or_path"] = args.dataset_path
        return self.loader(split, num_samples, seed, **options, **overrides)

    def parameters(self, args: TaskArguments | None) -> dict[str, Any]:
        """The loader parameters this task reads from `args` (its [`Task.options`]), by loader keyword."""
        if args is None:
            return {}
        return {keyword: getattr(args, field_name) for keyword, field_name in self.options.items()}


TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task(
            name="arithmetic",
            display_name="Arithmetic (generated)",
            loader=_load_arithmetic,
            generator="hf_es.data.load_arithmetic",
            options={
                "operation": "arithmetic_operation",
                "min_value": "arithmetic_min_value",
                "max_value": "arithmetic_max_value",
                "held_out_fraction": "arithmetic_held_out_fraction",
            },
        ),
        Task(
            name="countdown",
            display_name="Countdown (generated)",
            loader=_load_countdown,
            rewards=("countdown",),
            generator="hf_es.data.load_countdown",
            majority_vote=False,
        ),
        Task(
            name="gsm8k",
            display_name="GSM8K",
            loader=_load_gsm8k,
            hub_id="openai/gsm8k",
            hub_config="main",
            accepts_path=True,
        ),
        Task(
            name="math500",
            display_name="MATH-500",
            loader=_load_math500,
            hub_id="HuggingFaceH4/MATH-500",
            accepts_path=True,
        ),
        Task(
            name="deepscaler",
            display_name="DeepScaleR-Preview",
            loader=_load_deepscaler,
            hub_id="agentica-org/DeepScaleR-Preview-Dataset",
            accepts_path=True,
        ),
    )
}
"""Every named task, by name."""

_ALIASES = {"math-500": "math500", "math_500": "math500", "openai/gsm8k": "gsm8k", "huggingfaceh4/math-500": "math500"}


def get_task(name: str) -> Task:
    """The registered task called `name` (case-insensitive; `math-500` and Hub ids of registered tasks too).

    Raises:
        KeyError: If no task has that name; the message lists the registered ones.
    """
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in TASKS:
        raise KeyError(f"Unknown task {name!r}: choose one of {sorted(TASKS)} or a local .jsonl file.")
    return TASKS[key]


def is_registered(name: str) -> bool:
    """Whether `name` is a registered task (or one of its aliases)."""
    return _ALIASES.get(name.lower(), name.lower()) in TASKS


@dataclass
class TaskArguments:
    """Which task to train and evaluate on.

    Args:
        dataset_name: A registered task ([`TASKS`]: `"arithmetic"`, `"gsm8k"`, `"math500"`, `"countdown"`,
            `"deepscaler"`) or a local JSONL/dataset
            folder with `prompt` and `solution` columns.
        dataset_train_split: Split for training (`gsm8k`: `train`; `countdown`: `train`).
        dataset_test_split: Split for evaluation (`None` disables evaluation).
        num_train_samples: Number of training problems (`None`: all).
        num_eval_samples: Number of evaluation problems (`None`: all).
        reward_funcs: Names of reward functions: `accuracy`, `format`, `countdown`.
        arithmetic_operation: `add`, `sub` or `mul` (arithmetic task).
        arithmetic_min_value: Smallest operand (arithmetic task).
        arithmetic_max_value: Largest operand (arithmetic task).
        arithmetic_held_out_fraction: Share of the operand pairs reserved for evaluation splits (arithmetic task);
            `0` draws both splits from every pair (they overlap when the operand range is small).
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
    arithmetic_held_out_fraction: float = field(
        default=0.0, metadata={"help": "Share of operand pairs kept for evaluation only (0: splits may overlap)."}
    )
    system_prompt: str | None = field(default=None, metadata={"help": "Overrides the task's system prompt."})
    dataset_path: str | None = field(
        default=None, metadata={"help": "Local file/folder with the named task's raw rows (instead of the Hub)."}
    )
    eval_dataset_name: str | None = field(
        default=None, metadata={"help": "Task to evaluate on (default: dataset_name)."}
    )


def reward_functions(names: list[str]) -> list[Callable[..., list[float | None]]]:
    """[`hf_es.rewards.reward_functions`]: the registered reward functions called `names`.

    Kept here because the model card's usage snippet imports it from `hf_es.tasks` next to [`load_task`]; the
    import is deferred so that `hf_es.tasks` does not load the verifiers (sympy, math-verify) until they are used.
    """
    from .rewards import reward_functions as registered

    return registered(names)


def load_task(args: TaskArguments, seed: int = 0) -> tuple[Dataset, Dataset | None]:
    """Loads the training and evaluation datasets of a task.

    Args:
        args: The task arguments: a registered task name ([`TASKS`]) or a local JSONL/dataset folder.
        seed: Seed for subsampling and generated tasks.

    Returns:
        `(train_dataset, eval_dataset)`; the evaluation set is `None` when `dataset_test_split` is `None`.
    """
    overrides: dict[str, Any] = {}
    if args.system_prompt is not None:
        overrides["system_prompt"] = args.system_prompt or None

    def load(name: str, split: str, num: int | None) -> Dataset:
        if is_registered(name):
            return get_task(name).load(split, num, seed, args=args, **overrides)
        from .data import read_jsonl

        dataset = read_jsonl(name) if name.endswith(".jsonl") else Dataset.load_from_disk(name)
        return dataset.select(range(min(num, len(dataset)))) if num else dataset

    train = load(args.dataset_name, args.dataset_train_split, args.num_train_samples)
    evaluation = None
    if args.dataset_test_split:
        eval_name = args.eval_dataset_name or args.dataset_name
        evaluation = load(eval_name, args.dataset_test_split, args.num_eval_samples)
    return train, evaluation


def describe_task(args: TaskArguments, seed: int | None = None) -> dict[str, Any]:
    """What a run trained on, for the model card: the Hub dataset, or the generator and its parameters.

    Args:
        args: The task arguments of the run.
        seed: The run's data seed (recorded for generated tasks, whose problems it defines).

    Returns:
        `name`, `display_name`, `source` (`"hub"`, `"generated"` or `"local"`), `hub_id` / `hub_config` (Hub
        tasks), `generator` and `parameters` (generated tasks), `path` (local files), the splits and sample counts.
    """
    record: dict[str, Any] = {
        "name": args.dataset_name,
        "train_split": args.dataset_train_split,
        "num_train_samples": args.num_train_samples,
        "eval_task": args.eval_dataset_name or args.dataset_name,
        "eval_split": args.dataset_test_split,
        "num_eval_samples": args.num_eval_samples,
    }
    if args.system_prompt is not None:
        record["system_prompt"] = args.system_prompt
    if not is_registered(args.dataset_name):
        return {**record, "display_name": args.dataset_name, "source": "local", "path": args.dataset_name}
    task = get_task(args.dataset_name)
    record.update(name=task.name, display_name=task.display_name)
    if task.is_generated:
        parameters = {field_name: getattr(args, field_name) for field_name in task.options.values()}
        if seed is not None:
            parameters["seed"] = seed
        return {**record, "source": "generated", "generator": task.generator, "parameters": parameters}
    if args.dataset_path:
        return {**record, "source": "local", "path": args.dataset_path, "hub_id": task.hub_id}
    return {**record, "source": "hub", "hub_id": task.hub_id, "hub_config": task.hub_config}


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
