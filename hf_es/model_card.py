"""Model cards for ES-trained checkpoints, rendered with `huggingface_hub.ModelCard` from plain inputs.

[`write_model_card`] is what [`ESTrainer`] calls on every save and before `push_to_hub`: it writes `README.md` (the
card), `reward_curve.png` and, when given a [`~hf_es.analysis.DriftReport`], `drift_stats.json` into the checkpoint
folder. Nothing it writes ever contains a Hub token: argument names that look like credentials are dropped, and any
string shaped like a Hugging Face token (or listed in `secrets`) is replaced by `<redacted>`.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

# Push and redaction live in hf_es.hub; re-exported here for existing imports.
from .hub import PUSH_ALLOW_PATTERNS, push_checkpoint, redact
from .hub import scrub_file as _scrub_file
from .hub import scrub_text as _scrub_text

if TYPE_CHECKING:
    from .analysis.drift import DriftReport

__all__ = [
    "DEFAULT_TAGS",
    "ES_HYPERPARAMETERS",
    "build_model_card",
    "eval_results_from_json",
    "model_card_template_path",
    "PUSH_ALLOW_PATTERNS",
    "push_checkpoint",
    "redact",
    "write_model_card",
]

DEFAULT_TAGS: tuple[str, ...] = ("hf_es", "evolution-strategies", "es", "reinforcement-learning", "text-generation")

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

_KNOWN_DATASETS = {
    "gsm8k": ("openai/gsm8k", "GSM8K", "main"),
    "openai/gsm8k": ("openai/gsm8k", "GSM8K", "main"),
    "math500": ("HuggingFaceH4/MATH-500", "MATH-500", None),
    "math-500": ("HuggingFaceH4/MATH-500", "MATH-500", None),
    "huggingfaceh4/math-500": ("HuggingFaceH4/MATH-500", "MATH-500", None),
    "countdown": ("Jiayi-Pan/Countdown-Tasks-3to4", "Countdown", None),
}
_MODEL_INDEX_KS = (1, 16, 32)


def model_card_template_path() -> Path:
    """Path of the Jinja template shipped with the package (`hf_es/templates/model_card.md`)."""
    return Path(str(resources.files("hf_es") / "templates" / "model_card.md"))


# --------------------------------------------------------------------------------------------------------------------
# Evaluation JSON (scripts/evaluate_pass_at_k.py) -> rows and model-index
# --------------------------------------------------------------------------------------------------------------------


def _dataset_ids(dataset: str) -> tuple[str, str, str | None]:
    """(dataset_type for model-index, display name, config) of a dataset name or local file."""
    known = _KNOWN_DATASETS.get(dataset.lower())
    if known:
        return known
    if dataset.endswith((".json", ".jsonl")):
        name = Path(dataset).stem
        return name, name, None
    return dataset, dataset.split("/")[-1], None


def _metric_dict(summary: Mapping[str, Any]) -> dict[str, float]:
    """Flatten `{"pass@k": {"1": x}, "maj@k": {...}, "greedy_accuracy": g}` or `{"pass@1": x}` into `{"pass@1": x}`."""
    metrics: dict[str, float] = {}
    for key, value in summary.items():
        if key in ("pass@k", "maj@k") and isinstance(value, Mapping):
            prefix = key[:-1]  # "pass@" / "maj@"
            for k, v in value.items():
                if isinstance(v, (int, float)):
                    metrics[f"{prefix}{int(k)}"] = float(v)
        elif re.fullmatch(r"(pass|maj)@\d+", str(key)) and isinstance(value, (int, float)):
            metrics[str(key)] = float(value)
        elif key == "greedy_accuracy" and isinstance(value, (int, float)):
            metrics["greedy_accuracy"] = float(value)
    return metrics


def eval_results_from_json(
    eval_results: Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Path,
    *,
    checkpoint: str | None = None,
    strict: bool = True,
) -> list[dict[str, Any]]:
    r"""
    Normalises Pass@K evaluation results into rows `{dataset, checkpoint, metrics, settings, is_model}`.

    Accepts the JSON written by `scripts/evaluate_pass_at_k.py` (`{"settings": ..., "checkpoints": {name: {"summary":
    {"pass@k": {"1": ...}, "maj@k": ..., "greedy_accuracy": ...}}}}`), a path to it, a list of such files (one per
    dataset), or a plain dict such as `{"dataset": "gsm8k", "pass@1": 0.41, "pass@16": 0.75}`.

    Args:
        eval_results: The results, or a path to a JSON file.
        checkpoint (`str`, *optional*): Which evaluated checkpoint is the model the card describes (matched against
            checkpoint names and paths, also by folder name). Defaults to the only or the last one.
        strict (`bool`, *optional*, defaults to `True`): If `checkpoint` matches none of the evaluated checkpoints,
            mark none as this model (`True`) or fall back to the last one (`False`).

    Returns:
        `list[dict]`: One row per (dataset, checkpoint); `is_model` marks the rows of the described model.
    """
    if isinstance(eval_results, (str, Path)):
        eval_results = json.loads(Path(eval_results).read_text())
    if isinstance(eval_results, Sequence) and not isinstance(eval_results, (str, bytes)):
        return [
            row for item in eval_results for row in eval_results_from_json(item, checkpoint=checkpoint, strict=strict)
        ]
    rows: list[dict[str, Any]] = []
    settings = dict(eval_results.get("settings") or {})
    if "checkpoints" in eval_results:
        names = list(eval_results["checkpoints"])
        chosen = _match_checkpoint(names, checkpoint)
        if chosen is None and not strict and names:
            chosen = names[-1]
        for name, entry in eval_results["checkpoints"].items():
            summary = entry.get("summary") or {}
            entry_settings = {**settings, **(entry.get("settings") or {})}
            rows.append(
                {
                    "dataset": str(entry_settings.get("dataset", "unknown")),
                    "checkpoint": name,
                    "metrics": _metric_dict(summary),
                    "settings": entry_settings,
                    "num_problems": summary.get("num_problems"),
                    "is_model": name == chosen,
                }
            )
        return rows
    metrics = _metric_dict(eval_results)
    if metrics:
        return [
            {
                "dataset": str(eval_results.get("dataset", settings.get("dataset", "unknown"))),
                "checkpoint": checkpoint or "this model",
                "metrics": metrics,
                "settings": settings,
                "num_problems": eval_results.get("num_problems"),
                "is_model": True,
            }
        ]
    # {"gsm8k": {"pass@1": ...}, "math500": {...}}
    for dataset, value in eval_results.items():
        if isinstance(value, Mapping) and _metric_dict(value):
            rows.append(
                {
                    "dataset": str(dataset),
                    "checkpoint": checkpoint or "this model",
                    "metrics": _metric_dict(value),
                    "settings": dict(value.get("settings") or {}),
                    "num_problems": value.get("num_problems"),
                    "is_model": True,
                }
            )
    return rows


def _match_checkpoint(names: Sequence[str], checkpoint: str | None) -> str | None:
    if not names:
        return None
    if checkpoint is None:
        return names[-1]
    target = Path(str(checkpoint))
    for name in names:
        if name == str(checkpoint):
            return name
    for name in names:
        path = Path(name)
        try:
            if path.exists() and target.exists() and path.resolve() == target.resolve():
                return name
        except OSError:
            continue
    for name in names:
        if Path(name).name == target.name:
            return name
    return None


def _model_index(rows: Sequence[Mapping[str, Any]]) -> list[EvalResult]:
    results = []
    for row in rows:
        if not row["is_model"]:
            continue
        dataset_type, dataset_name, config = _dataset_ids(row["dataset"])
        settings = row.get("settings") or {}
        metric_args = {k: settings[k] for k in ("num_samples", "temperature") if settings.get(k) is not None}
        metrics = row["metrics"]
        keys = [f"pass@{k}" for k in _MODEL_INDEX_KS if f"pass@{k}" in metrics]
        top = max((int(m.split("@")[1]) for m in metrics if m.startswith("pass@")), default=None)
        if top is not None and f"pass@{top}" not in keys:
            keys.append(f"pass@{top}")
        if "greedy_accuracy" in metrics:
            keys.append("greedy_accuracy")
        for key in keys:
            value = metrics[key]
            results.append(
                EvalResult(
                    task_type="text-generation",
                    task_name="Mathematical reasoning",
                    dataset_type=dataset_type,
                    dataset_name=dataset_name,
                    dataset_config=config,
                    dataset_split=settings.get("split"),
                    metric_type=key,
                    metric_name="Greedy accuracy" if key == "greedy_accuracy" else key.replace("pass", "Pass"),
                    metric_value=round(float(value), 6),
                    metric_args=None if key == "greedy_accuracy" else (metric_args or None),
                )
            )
    return results


def _eval_table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return ""
    ks = sorted(
        {int(m.split("@")[1]) for row in rows for m in row["metrics"] if m.startswith("pass@")},
    )
    shown = [k for k in ks if k & (k - 1) == 0 or k == ks[-1]]  # powers of two and the largest K
    maj = sorted({int(m.split("@")[1]) for row in rows for m in row["metrics"] if m.startswith("maj@")})
    maj_shown = [k for k in (16, 32) if k in maj] or maj[-1:]
    greedy = any("greedy_accuracy" in row["metrics"] for row in rows)
    header = ["Dataset", "Checkpoint"] + [f"Pass@{k}" for k in shown] + [f"Maj@{k}" for k in maj_shown]
    header += ["Greedy"] if greedy else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        m = row["metrics"]
        name = f"**{row['checkpoint']}** (this model)" if row["is_model"] else str(row["checkpoint"])
        cells = [_dataset_ids(row["dataset"])[1], name]
        cells += [_pct(m.get(f"pass@{k}")) for k in shown] + [_pct(m.get(f"maj@{k}")) for k in maj_shown]
        cells += [_pct(m.get("greedy_accuracy"))] if greedy else []
        lines.append("| " + " | ".join(cells) + " |")
    settings = next((row.get("settings") for row in rows if row.get("settings")), {}) or {}
    if settings:
        details = ", ".join(
            f"{k}={settings[k]}"
            for k in ("num_samples", "temperature", "max_new_tokens", "split")
            if settings.get(k) is not None
        )
        lines += ["", f"Pass@K uses the unbiased estimator over M samples per problem ({details})."]
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


# --------------------------------------------------------------------------------------------------------------------
# Hyper-parameters, training summary, reproduction
# --------------------------------------------------------------------------------------------------------------------


def _fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list, tuple)):
        text = json.dumps(value, default=str)
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _training_summary(
    log_history: Sequence[Mapping[str, Any]],
    *,
    hardware: str | None,
    wall_time_s: float | None,
    total_generated_tokens: int | None,
) -> list[tuple[str, str]]:
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
        rows.append(("Train reward (first → last logged)", f"{rewards[0][1]:.4g} → {rewards[-1][1]:.4g}"))
        rows.append(
            ("Best train reward", f"{max(r for _, r in rewards):.4g} (step {max(rewards, key=lambda x: x[1])[0]})")
        )
    if evals:
        rows.append(("Eval reward (last)", f"{evals[-1][1]:.4g} (step {evals[-1][0]})"))
    if total_generated_tokens is not None:
        rows.append(("Total generated tokens", f"{total_generated_tokens:,}"))
    if wall_time_s is not None:
        rows.append(("Wall time", _duration(float(wall_time_s))))
    if hardware:
        rows.append(("Hardware", hardware))
    return rows


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    hours, rest = divmod(int(round(seconds)), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def _reproduce_snippet(base_model: str, hyperparameters: Mapping[str, Any], datasets: Sequence[str]) -> str:
    es_keys = [key for key, _ in ES_HYPERPARAMETERS if hyperparameters.get(key) is not None]
    args = ",\n    ".join(
        f"{key}={hyperparameters[key]!r}" for key in ["output_dir", *es_keys] if key in hyperparameters
    )
    dataset = datasets[0] if datasets else "<your dataset>"
    return (
        "from datasets import load_dataset\n"
        "from hf_es import ESConfig, ESTrainer\n\n"
        f"config = ESConfig(\n    {args},\n)\n"
        "trainer = ESTrainer(\n"
        f"    model={base_model!r},\n"
        "    reward_funcs=...,  # the verifier(s) used for training\n"
        "    args=config,\n"
        f"    train_dataset=load_dataset({dataset!r}, split='train'),\n"
        ")\n"
        "trainer.train()"
    )


def _framework_versions() -> list[tuple[str, str]]:
    versions = []
    for package in ("hf_es", "transformers", "trl", "torch", "huggingface_hub", "vllm"):
        try:
            versions.append((package, importlib.metadata.version(package)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _lineage_text(step: Any) -> str:
    if isinstance(step, Mapping):
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
            parts.append("(" + ", ".join(f"{k}={_fmt_value(v)}" for k, v in extra.items()) + ")")
        return " ".join(parts)
    return str(step)


# --------------------------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------------------------


def build_model_card(
    *,
    base_model: str,
    hyperparameters: Mapping[str, Any] | None = None,
    log_history: Sequence[Mapping[str, Any]] | None = None,
    drift: DriftReport | None = None,
    eval_results: Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Path | None = None,
    eval_checkpoint: str | None = None,
    eval_strict: bool = True,
    lineage: Sequence[Any] | None = None,
    datasets: Sequence[str] | None = None,
    hardware: str | None = None,
    wall_time_s: float | None = None,
    total_generated_tokens: int | None = None,
    model_name: str | None = None,
    repo_id: str | None = None,
    license: str | None = None,
    language: str | Sequence[str] | None = "en",
    tags: Sequence[str] | None = None,
    reproduce_command: str | Sequence[str] | None = None,
    reward_curve: str | None = None,
    drift_file: str = "drift_stats.json",
    drift_taus: Sequence[float] | None = (1e-4, 5e-4, 1e-3, 1.5e-3, 3e-3, 1e-2),
    secrets: Iterable[str] = (),
    template_path: str | Path | None = None,
) -> ModelCard:
    r"""
    Renders the model card of an ES-trained checkpoint (no files written; see [`write_model_card`]).

    Args:
        base_model (`str`): Hub id (or path) of the model training started from.
        hyperparameters (`Mapping[str, Any]`, *optional*): Training arguments, e.g. `ESConfig.to_dict()`. The ES ones
            (`ES_HYPERPARAMETERS`) go in the main table, the rest in a collapsed table; credentials are dropped.
        log_history (`Sequence[Mapping]`, *optional*): `TrainerState.log_history` (`reward`, `reward_std`,
            `eval_reward`, `step`, `total_generated_tokens`, `train_runtime`, ...).
        drift ([`~hf_es.analysis.DriftReport`], *optional*): Drift from the base model, shown as tables.
        eval_results (*optional*): Pass@K results (see [`eval_results_from_json`]); adds an evaluation table and the
            `model-index` metadata.
        eval_checkpoint (`str`, *optional*): Which checkpoint of the evaluation JSON is this model.
        eval_strict (`bool`, *optional*, defaults to `True`): See `strict` in [`eval_results_from_json`].
        lineage (`Sequence`, *optional*): Training stages, strings or dicts such as `{"method": "GRPO", "model": ...,
            "steps": 250, "dataset": "gsm8k"}` (e.g. for ES→GRPO compositions).
        datasets (`Sequence[str]`, *optional*): Hub ids of the training datasets.
        hardware (`str`, *optional*): E.g. `"8x H100 80GB"`.
        wall_time_s (`float`, *optional*): Training wall time (defaults to `train_runtime` from `log_history`).
        total_generated_tokens (`int`, *optional*): Tokens generated by all members over training (defaults to the
            last `total_generated_tokens` in `log_history`).
        model_name (`str`, *optional*): Title of the card and `model-index` name (defaults to the repo name).
        repo_id (`str`, *optional*): Hub repo the card is for (used in the usage snippet).
        license (`str`, *optional*): License identifier for the metadata.
        language (`str` or `Sequence[str]`, *optional*, defaults to `"en"`): Language metadata.
        tags (`Sequence[str]`, *optional*): Extra tags (added to `DEFAULT_TAGS`).
        reproduce_command (`str` or `Sequence[str]`, *optional*): The exact command that trained the model (e.g.
            `sys.argv`); defaults to a Python snippet rebuilt from `hyperparameters`.
        reward_curve (`str`, *optional*): Relative path of the reward-curve image to embed.
        drift_file (`str`, *optional*, defaults to `"drift_stats.json"`): Relative path of the drift JSON to link.
        drift_taus (`Sequence[float]`, *optional*): Thresholds shown in the drift table (those in the report's grid).
        secrets (`Iterable[str]`, *optional*): Strings that must not appear in the card (e.g. the Hub token).
        template_path (`str` or `Path`, *optional*): Jinja template; defaults to [`model_card_template_path`].

    Returns:
        `huggingface_hub.ModelCard`: the rendered card (`card.data` holds the metadata).
    """
    secrets = [s for s in secrets if s]
    hyperparameters = redact(dict(hyperparameters or {}), secrets)
    log_history = list(log_history or [])
    datasets = list(datasets or [])
    if repo_id is None:
        hub_model_id = hyperparameters.get("hub_model_id")
        output_dir = hyperparameters.get("output_dir")
        repo_id = hub_model_id or (Path(str(output_dir)).name if output_dir else "path/to/this-model")
    model_name = model_name or str(repo_id).split("/")[-1]

    rows = (
        eval_results_from_json(eval_results, checkpoint=eval_checkpoint, strict=eval_strict)
        if eval_results is not None
        else []
    )
    eval_index = _model_index(rows)
    card_data = ModelCardData(
        base_model=base_model,
        library_name="hf_es",
        license=license,
        language=list(language) if isinstance(language, (list, tuple)) else language,
        datasets=datasets or None,
        tags=list(dict.fromkeys([*DEFAULT_TAGS, *(tags or [])])),
        pipeline_tag="text-generation",
        model_name=model_name,
        eval_results=eval_index or None,
    )

    es_rows = [
        (label, _fmt_value(hyperparameters[key]))
        for key, label in ES_HYPERPARAMETERS
        if hyperparameters.get(key) is not None
    ]
    es_keys = {key for key, _ in ES_HYPERPARAMETERS}
    other_rows = [
        (key, _fmt_value(value))
        for key, value in sorted(hyperparameters.items())
        if key not in es_keys and value is not None and value != "" and value != [] and value != {}
    ]
    if reproduce_command is None:
        reproduce, language_hint = _reproduce_snippet(base_model, hyperparameters, datasets), "python"
    else:
        reproduce = (
            reproduce_command if isinstance(reproduce_command, str) else shlex.join(map(str, reproduce_command))
        )
        language_hint = "bash"

    drift_table = None
    if drift is not None:
        taus = [t for t in (drift_taus or drift.taus) if any(math.isclose(t, g, rel_tol=1e-9) for g in drift.taus)]
        drift_table = drift.to_markdown(taus=taus or None, top_k=0)

    base_model_url = (
        base_model if base_model.startswith(("http://", "https://")) else f"https://huggingface.co/{base_model}"
    )
    card = ModelCard.from_template(
        card_data,
        template_path=str(template_path or model_card_template_path()),
        model_name=model_name,
        repo_id=repo_id,
        base_model=base_model,
        base_model_url=base_model_url,
        datasets=datasets,
        lineage=[_lineage_text(step) for step in (lineage or [])],
        es_hyperparameters=es_rows,
        other_hyperparameters=other_rows,
        training_summary=_training_summary(
            log_history, hardware=hardware, wall_time_s=wall_time_s, total_generated_tokens=total_generated_tokens
        ),
        reward_curve=reward_curve,
        eval_table=_eval_table(rows),
        drift_table=drift_table,
        drift_file=drift_file,
        reproduce_command=reproduce,
        reproduce_language=language_hint,
        framework_versions=_framework_versions(),
    )
    text = re.sub(r"\n{3,}", "\n\n", _scrub_text(str(card), secrets)).rstrip("\n") + "\n"
    return ModelCard(text)


def write_model_card(
    output_dir: str | Path,
    *,
    base_model: str,
    hyperparameters: Mapping[str, Any] | None = None,
    log_history: Sequence[Mapping[str, Any]] | None = None,
    drift: DriftReport | None = None,
    eval_results: Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Path | None = None,
    lineage: Sequence[Any] | None = None,
    datasets: Sequence[str] | None = None,
    hardware: str | None = None,
    wall_time_s: float | None = None,
    total_generated_tokens: int | None = None,
    eval_checkpoint: str | None = None,
    secrets: Iterable[str] = (),
    **card_kwargs: Any,
) -> ModelCard:
    r"""
    Writes the model card (`README.md`), `reward_curve.png` and `drift_stats.json` into a checkpoint folder.

    Called by [`ESTrainer`] on every save and before `push_to_hub`, so every checkpoint carries its card. The reward
    curve is drawn from `log_history` (skipped when nothing was logged); `drift_stats.json` is written when `drift`
    is given (a `drift_stats.json` already in the folder is reused for the card when `drift` is not given).

    Args:
        output_dir (`str` or `Path`): The checkpoint folder.
        base_model, hyperparameters, log_history, drift, eval_results, lineage, datasets, hardware, wall_time_s,
        total_generated_tokens: See [`build_model_card`].
        eval_checkpoint (`str`, *optional*): Which checkpoint of the evaluation JSON is this model; by default the
            one whose path or folder name matches `output_dir`, else the last one.
        secrets (`Iterable[str]`, *optional*): Strings that must never be written (pass `args.hub_token`).
        **card_kwargs: Other arguments of [`build_model_card`] (`repo_id`, `license`, `reproduce_command`, ...).

    Returns:
        `huggingface_hub.ModelCard`: the card that was saved to `output_dir/README.md`.

    Example:

    ```python
    >>> from hf_es.model_card import write_model_card
    >>> write_model_card(
    ...     "runs/es-gsm8k/checkpoint-500",
    ...     base_model="Qwen/Qwen2.5-1.5B-Instruct",
    ...     hyperparameters=trainer.args.to_dict(),
    ...     log_history=trainer.state.log_history,
    ...     datasets=["openai/gsm8k"],
    ... )
    ```
    """
    from .analysis.plots import plot_reward_curve

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    secrets = [s for s in secrets if s]
    log_history = list(log_history or [])

    reward_curve = plot_reward_curve(log_history, output_dir / "reward_curve.png")
    drift_path = output_dir / card_kwargs.pop("drift_file", "drift_stats.json")
    if drift is not None:
        drift.save(drift_path)
        _scrub_file(drift_path, secrets)
    elif drift_path.is_file():
        from .analysis.drift import DriftReport

        try:
            drift = DriftReport.load(drift_path)
        except (KeyError, TypeError, ValueError):
            drift = None

    card = build_model_card(
        base_model=base_model,
        hyperparameters=hyperparameters,
        log_history=log_history,
        drift=drift,
        eval_results=eval_results,
        lineage=lineage,
        datasets=datasets,
        hardware=hardware,
        wall_time_s=wall_time_s,
        total_generated_tokens=total_generated_tokens,
        reward_curve=reward_curve.name if reward_curve is not None else None,
        drift_file=drift_path.name,
        secrets=secrets,
        eval_checkpoint=eval_checkpoint or str(output_dir),
        eval_strict=eval_checkpoint is not None,
        **card_kwargs,
    )
    card.save(output_dir / "README.md")
    return card
