"""The card's sections as plain values for the template: task, rewards, hyper-parameters, scores, reproduction."""

from __future__ import annotations

import importlib.metadata
import json
import pprint
import shlex
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .run_record import RunRecord

__all__ = [
    "APPLICABLE_TRAINER_FIELDS",
    "ES_HYPERPARAMETERS",
    "base_vs_final_rows",
    "fmt_value",
    "framework_versions",
    "hyperparameter_rows",
    "lineage_text",
    "quick_start_prompt",
    "reproduce_section",
    "reward_rows",
    "task_lines",
    "training_summary",
]

ES_HYPERPARAMETERS: tuple[tuple[str, str], ...] = (
    ("population_size", "Population size N"),
    ("sigma", "Noise scale σ"),
    ("learning_rate", "Step size α"),
    ("fitness_shaping", "Fitness shaping"),
    ("estimator", "Estimator"),
    ("max_steps", "ES steps"),
    ("per_device_train_batch_size", "Prompts per step"),
    ("num_generations", "Completions per prompt per member"),
    ("temperature", "Training temperature"),
    ("max_completion_length", "Max new tokens"),
    ("lr_scheduler_type", "α schedule"),
    ("noise_type", "Noise"),
    ("noise_seed", "Noise seed"),
    ("seed", "Seed"),
)
"""(argument name, label) of the ES hyper-parameters shown in the card's main table, in order."""

APPLICABLE_TRAINER_FIELDS: tuple[str, ...] = (
    "output_dir",
    "max_steps",
    "learning_rate",
    "lr_scheduler_type",
    "lr_scheduler_kwargs",
    "warmup_steps",
    "warmup_ratio",
    "per_device_eval_batch_size",
    "eval_strategy",
    "eval_steps",
    "eval_on_start",
    "save_strategy",
    "save_steps",
    "save_total_limit",
    "logging_steps",
    "seed",
    "bf16",
    "fp16",
    "use_cpu",
    "hub_model_id",
    "report_to",
)
"""`TrainingArguments` fields that mean something for ES (no optimizer, epochs or gradient settings)."""

# ESConfig fields inherited from TrainingArguments only to satisfy Trainer: nothing to report.
_UNUSED_ES_FIELDS = {"max_grad_norm", "save_only_model", "remove_unused_columns"}


def fmt_value(value: Any) -> str:
    """A value as a Markdown table cell."""
    if isinstance(value, float):
        return f"{value:g}"
    text = json.dumps(value, default=str) if isinstance(value, (dict, list, tuple)) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def hyperparameter_rows(
    hyperparameters: Mapping[str, Any], method_fields: Collection[str] = ()
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(main ES table rows, other method and applicable Trainer argument rows); optimizer, epoch and other Trainer
    fields that ES ignores are left out.

    Args:
        hyperparameters: The run's arguments (`args.to_dict()`).
        method_fields: The argument names the training method adds to `TrainingArguments` (ESTrainer passes
            `ESConfig`'s own fields); shown with [`APPLICABLE_TRAINER_FIELDS`] in the second table.
    """
    main = [
        (label, fmt_value(hyperparameters[key]))
        for key, label in ES_HYPERPARAMETERS
        if hyperparameters.get(key) is not None
    ]
    shown = {key for key, _ in ES_HYPERPARAMETERS} | _UNUSED_ES_FIELDS
    applicable = (set(method_fields) | set(APPLICABLE_TRAINER_FIELDS)) - shown
    other = [
        (key, fmt_value(value))
        for key, value in sorted(hyperparameters.items())
        if key in applicable and value not in (None, "", [], {})
    ]
    return main, other


def task_lines(task: Mapping[str, Any] | None) -> list[str]:
    """Markdown bullet lines saying what the model was trained on (Hub dataset, or generator and parameters)."""
    if not task:
        return []
    name = f"**{task.get('display_name', task['name'])}** (`{task['name']}`)"
    if task.get("source") == "hub":
        config = f", config `{task['hub_config']}`" if task.get("hub_config") else ""
        source = f"Hub dataset [{task['hub_id']}](https://huggingface.co/datasets/{task['hub_id']}){config}"
    elif task.get("source") == "generated":
        parameters = ", ".join(f"{k}={fmt_value(v)}" for k, v in (task.get("parameters") or {}).items())
        source = f"generated locally by `{task['generator']}` with {parameters or 'its default parameters'}"
    else:
        source = f"local data `{task.get('path')}`"
    lines = [f"- Task: {name}, {source}."]
    train = task.get("num_train_samples")
    lines.append(f"- Training problems: {train if train is not None else 'all'} (split `{task.get('train_split')}`).")
    if task.get("eval_split"):
        held_out = task.get("num_eval_samples")
        count = held_out if held_out is not None else "all"
        lines.append(f"- Evaluation: {count} problems of `{task.get('eval_task')}` split `{task['eval_split']}`.")
    if task.get("system_prompt") is not None:
        lines.append(f"- System prompt: {task['system_prompt']!r}.")
    return lines


def reward_rows(run: RunRecord) -> list[tuple[str, str]]:
    """(reward function, weight) rows."""
    return [(name, fmt_value(float(weight))) for name, weight in zip(run.reward_funcs, run.weights)]


def base_vs_final_rows(run: RunRecord) -> list[tuple[str, str, str]]:
    """(metric, base model, final) rows over the evaluation metrics either side logged."""
    base, final = dict(run.base_metrics or {}), dict(run.final_metrics or {})
    keys = list(dict.fromkeys([*base, *final]))
    return [
        (key, fmt_value(base[key]) if key in base else "–", fmt_value(final[key]) if key in final else "–")
        for key in keys
    ]


def quick_start_prompt(run: RunRecord | None) -> str:
    """Python source assigning `prompt`: the run's own task prompt when recorded."""
    prompt = run.example_prompt if run is not None and run.example_prompt is not None else "What is 7 * 8?"
    return "prompt = " + pprint.pformat(prompt, width=110, sort_dicts=False)


def reproduce_section(run: RunRecord | None, base_model: str, hyperparameters: Mapping[str, Any]) -> tuple[str, str]:
    """(code, language) that reproduces the run: its command line, else an `ESTrainer` snippet built from the record."""
    if run is not None and run.command:
        command = list(run.command)
        launcher = ["accelerate", "launch"] if str(command[0]).endswith(".py") else []
        return shlex.join([*launcher, *map(str, command)]), "bash"
    es_keys = [key for key, _ in ES_HYPERPARAMETERS if hyperparameters.get(key) is not None]
    args = ",\n    ".join(
        f"{key}={hyperparameters[key]!r}" for key in ["output_dir", *es_keys] if key in hyperparameters
    )
    lines = [
        "from hf_es import ESConfig, ESTrainer",
        "from hf_es.tasks import TaskArguments, load_task, reward_functions",
        "",
    ]
    task = (run.task if run is not None else None) or {}
    rewards = list(run.reward_funcs) if run is not None else []
    if task.get("source") in ("hub", "generated"):
        fields = {"dataset_name": task["name"], **(task.get("parameters") or {})}
        fields.pop("seed", None)
        lines.append(
            f"train_dataset, eval_dataset = load_task(TaskArguments(**{fields!r}), seed={hyperparameters.get('seed', 0)!r})"
        )
    else:
        lines.append("train_dataset, eval_dataset = None, None  # the training data was not recorded with this run")
    lines += [
        f"config = ESConfig(\n    {args},\n)",
        "trainer = ESTrainer(",
        f"    model={base_model!r},",
        f"    reward_funcs=reward_functions({rewards!r}),",
        "    args=config,",
        "    train_dataset=train_dataset,",
        "    eval_dataset=eval_dataset,",
        ")",
        "trainer.train()",
    ]
    return "\n".join(lines), "python"


def training_summary(
    log_history: Sequence[Mapping[str, Any]],
    *,
    hardware: str | None,
    wall_time_s: float | None,
    total_generated_tokens: int | None,
) -> list[tuple[str, str]]:
    """(label, value) rows: steps, train and eval reward, population coverage and JS diversity, the centre's token
    entropy at evaluation (exact, or labelled as a top-k lower bound), tokens, wall time, hardware."""
    rewards = [(e["step"], e["reward"]) for e in log_history if "reward" in e and "step" in e]
    evals = [(e["step"], e["eval_reward"]) for e in log_history if "eval_reward" in e and "step" in e]
    steps = max((e["step"] for e in log_history if "step" in e), default=None)
    if wall_time_s is None:
        wall_time_s = next((e["train_runtime"] for e in reversed(log_history) if "train_runtime" in e), None)
    if total_generated_tokens is None:
        total_generated_tokens = max(
            (int(e["total_generated_tokens"]) for e in log_history if "total_generated_tokens" in e), default=None
        )
    rows: list[tuple[str, str]] = []
    if steps is not None:
        rows.append(("Steps completed", str(steps)))
    if rewards:
        best_step, best = max(rewards, key=lambda item: item[1])
        rows.append(("Train reward (first → last logged)", f"{rewards[0][1]:.4g} → {rewards[-1][1]:.4g}"))
        rows.append(("Best train reward", f"{best:.4g} (step {best_step})"))
    for key, label in (("population/coverage", "Population coverage"), ("population/js_diversity", "JS diversity")):
        values = [e[key] for e in log_history if key in e]
        if values:  # hf_es.es.population_diversity, per step
            rows.append((f"{label} (first → last logged)", f"{values[0]:.4g} → {values[-1]:.4g}"))
    if evals:
        rows.append(("Eval reward (last)", f"{evals[-1][1]:.4g} (step {evals[-1][0]})"))
    rows += _entropy_rows(log_history)
    if total_generated_tokens is not None:
        rows.append(("Total generated tokens", f"{total_generated_tokens:,}"))
    if wall_time_s is not None:
        rows.append(("Wall time", _duration(float(wall_time_s))))
    if hardware:
        rows.append(("Hardware", hardware))
    return rows


def _entropy_rows(log_history: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The centre's mean token entropy at its first and last evaluation (`hf_es.evaluation.evaluate_rewards`)."""
    for key, label in (
        ("eval_entropy", "Centre token entropy at evaluation, nats/token (first → last)"),
        ("eval_entropy_lower_bound", "Centre token entropy at evaluation, nats/token, lower bound (first → last)"),
    ):
        values = [e for e in log_history if key in e and "step" in e]
        if values:
            first, last = values[0], values[-1]
            k = f", from the engine's top-{int(last['eval_entropy_top_k'])} log-probabilities" if "eval_entropy_top_k" in last else ""  # fmt: skip
            text = f"{first[key]:.4g} (step {first['step']}) → {last[key]:.4g} (step {last['step']}){k}"
            return [(label, text)]
    return []


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    hours, rest = divmod(int(round(seconds)), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def framework_versions() -> list[tuple[str, str]]:
    """(package, version) of the packages that shaped the run."""
    versions = []
    for package in ("hf_es", "transformers", "trl", "torch", "huggingface_hub", "vllm"):
        try:
            versions.append((package, importlib.metadata.version(package)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def lineage_text(step: Any) -> str:
    """One training stage (a string, or a dict with `method`, `model`, `steps`, `dataset`, ...) as Markdown."""
    if not isinstance(step, Mapping):
        return str(step)
    method = step.get("method") or step.get("trainer") or "?"
    parts = [f"**{method}**"]
    if step.get("model"):
        parts.append(f"from `{step['model']}`")
    if step.get("steps") is not None:
        parts.append(f"for {step['steps']} steps")
    if step.get("dataset"):
        parts.append(f"on {step['dataset']}")
    extra = {k: v for k, v in step.items() if k not in ("method", "trainer", "model", "steps", "dataset")}
    if extra:
        parts.append("(" + ", ".join(f"{k}={fmt_value(v)}" for k, v in extra.items()) + ")")
    return " ".join(parts)
