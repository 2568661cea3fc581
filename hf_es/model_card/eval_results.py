"""Evaluation results in the card: the JSON of `scripts/evaluate_pass_at_k.py` -> table rows and `model-index`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult

from ..tasks import get_task, is_registered

__all__ = ["dataset_ids", "eval_results_from_json", "eval_table", "model_index"]

_MODEL_INDEX_KS = (1, 16, 32)


def dataset_ids(dataset: str) -> tuple[str, str, str | None]:
    """(dataset type for `model-index`, display name, config) of a task name or local file, from the task registry.

    Hub-backed tasks give their Hub id; generated tasks (e.g. `arithmetic`, `countdown`) their task name, since no
    Hub dataset holds their problems.
    """
    if is_registered(dataset):
        task = get_task(dataset)
        return task.hub_id or task.name, task.display_name, task.hub_config
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


def model_index(rows: Sequence[Mapping[str, Any]]) -> list[EvalResult]:
    results = []
    for row in rows:
        if not row["is_model"]:
            continue
        dataset_type, dataset_name, config = dataset_ids(row["dataset"])
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


def eval_table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return ""
    ks = sorted(
        {int(m.split("@")[1]) for row in rows for m in row["metrics"] if m.startswith("pass@")},
    )
    shown = [k for k in ks if k & (k - 1) == 0 or k == ks[-1]]  # powers of two and the largest K
    maj = sorted({int(m.split("@")[1]) for row in rows for m in row["metrics"] if m.startswith("maj@")})
    maj_shown = [k for k in (16, 32) if k in maj] or maj[-1:]
    greedy = any("greedy_accuracy" in row["metrics"] for row in rows)
    header = ["Dataset", "Checkpoint"] + [f"Pass@{k} (%)" for k in shown] + [f"Maj@{k} (%)" for k in maj_shown]
    header += ["Greedy (%)"] if greedy else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        m = row["metrics"]
        name = f"**{row['checkpoint']}** (this model)" if row["is_model"] else str(row["checkpoint"])
        cells = [dataset_ids(row["dataset"])[1], name]
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
