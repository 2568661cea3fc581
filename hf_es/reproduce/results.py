"""Collects a reproduction's outputs (evaluations, budgets, drift, sweep) into per-method numbers with their spread
over training seeds; [`hf_es.reproduce.report`] renders them."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..evaluation import load_results
from ..evaluation.uncertainty import compare_entries
from ..metrics.bootstrap import PairedDifference
from .budget import log_history, record_from_logs
from .plan import METHODS

__all__ = [
    "DYNAMICS",
    "MethodResults",
    "Spread",
    "collect",
    "export_results",
    "load_drift",
    "load_dynamics",
    "load_sweep",
]

#: What the report reads, relative to a reproduction's output folder: everything but the weights.
REPORT_INPUTS = (
    "plan.json",
    "eval/*/*.json",
    "drift/*.json",
    "sweep/*/sweep.json",
    "sweep/*/*/*.json",
    "train/*/reproduce_run.json",
    "train/*/trainer_state.json",
    "train/*/log_history.json",
    "train/*/hf_es_lineage.json",
)

#: The training-dynamics series a run's log history holds: log key -> what it measures.
DYNAMICS: dict[str, str] = {
    "eval_entropy": "centre token entropy (nats/token, exact, greedy completions of the evaluation problems)",
    "eval_reward": "centre greedy accuracy on the evaluation problems",
    "population/coverage": "ES: chance that one of the N greedy members solves a training prompt",
    "group/coverage": "GRPO: chance that one of the G sampled completions solves a training prompt",
}


@dataclass(frozen=True)
class Spread:
    """A statistic over training seeds: mean, min, max and the per-seed values (`None` entries are left out)."""

    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Spread:
        return cls(tuple(float(v) for v in values if v is not None))

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def low(self) -> float | None:
        return min(self.values) if self.values else None

    @property
    def high(self) -> float | None:
        return max(self.values) if self.values else None

    def fmt(self, scale: float = 100.0, digits: int = 1) -> str:
        """`mean [min–max]` (the range only with several seeds), values times `scale`; `n/a` when empty."""
        if not self.values:
            return "n/a"
        mean = f"{scale * self.mean:.{digits}f}"
        if len(self.values) < 2:
            return mean
        return f"{mean} [{scale * self.low:.{digits}f}–{scale * self.high:.{digits}f}]"


@dataclass
class MethodResults:
    """One method's evaluations and budgets over its seeds.

    Attributes:
        key: `base`, `es`, `grpo`, `es_grpo` or `grpo_es`; `label` its display name.
        runs: Run names (one per seed; `["base"]` for the base model).
        summaries: Per task (`target`, `heldout`), the evaluation summary of each run.
        budgets: The `reproduce_run.json` of each run (empty for the base).
        entries: Per task, each run's whole evaluation entry (with its per-problem records), for the intervals.
    """

    key: str
    label: str
    runs: list[str]
    summaries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    budgets: list[dict[str, Any]] = field(default_factory=list)
    entries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def difference(self, other: MethodResults, task: str, k: int, **bootstrap: Any) -> PairedDifference | None:
        """This method's Pass@`k` minus `other`'s on `task`, with the paired bootstrap interval over the problems
        both scored and over each method's seeds; `None` without per-problem results."""
        return compare_entries(self.entries.get(task, []), other.entries.get(task, []), "pass@k", k, **bootstrap)

    def metric(self, task: str, name: str, k: int | None = None) -> Spread:
        """`pass@k`, `maj@k` (at `k`) or `greedy_accuracy` of `task` over the seeds."""
        values = []
        for summary in self.summaries.get(task, []):
            if name == "greedy_accuracy":
                values.append(summary.get("greedy_accuracy"))
            else:
                table = summary.get(name) or {}
                values.append(table.get(str(k)))
        return Spread.of(values)

    def curve(self, task: str, name: str = "pass@k") -> dict[int, Spread]:
        """`pass@k` (or `maj@k`) for every K, over the seeds."""
        ks = sorted({int(k) for summary in self.summaries.get(task, []) for k in (summary.get(name) or {})})
        return {k: self.metric(task, name, k) for k in ks}

    def budget(self, key: str) -> Spread:
        return Spread.of([budget.get(key) for budget in self.budgets])


def _entry(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    entries = list(load_results(path)["checkpoints"].values())
    return entries[0] if entries and entries[0].get("summary") else None


def collect(root: Path, seeds: Sequence[int], keys: Sequence[str] | None = None) -> dict[str, MethodResults]:
    """Every method's evaluation summaries and budgets found under `root` (missing runs are left out).

    Args:
        root: The reproduction's output folder.
        seeds: Its training seeds.
        keys: The methods to collect (keys of `METHODS`; default all of them).
    """
    methods = {}
    for key, (label, _) in METHODS.items():
        if keys is not None and key not in keys:
            continue
        runs = ["base"] if key == "base" else [f"{key}_s{seed}" for seed in seeds]
        result = MethodResults(key, label, runs)
        for task in ("target", "heldout"):
            found = [entry for run in runs if (entry := _entry(root / "eval" / run / f"{task}.json"))]
            result.entries[task] = found
            result.summaries[task] = [entry["summary"] for entry in found]
        for run in runs:
            record = root / "train" / run / "reproduce_run.json"
            if record.is_file():
                result.budgets.append(json.loads(record.read_text()))
            elif (root / "train" / run).is_dir() and (rebuilt := record_from_logs(root / "train" / run, key)):
                result.budgets.append(rebuilt)
        methods[key] = result
    return methods


def load_dynamics(root: Path, seeds: Sequence[int]) -> dict[str, dict[str, dict[str, Spread]]]:
    """The [`DYNAMICS`] series of the ES and GRPO runs over training, per method (`es`, `grpo`), per log key, per
    step: the [`Spread`] over the seeds that logged it (the last value where a step was logged twice, as the final
    `evaluate()` repeats the last scheduled one)."""
    found: dict[str, dict[str, dict[str, Spread]]] = {}
    for method in ("es", "grpo"):
        per_seed: dict[str, dict[int, list[float]]] = {key: {} for key in DYNAMICS}
        for seed in seeds:
            folder = root / "train" / f"{method}_s{seed}"
            if not folder.is_dir():
                continue
            series: dict[str, dict[int, float]] = {key: {} for key in DYNAMICS}
            for entry in log_history(folder):
                for key in DYNAMICS:
                    if key in entry and "step" in entry:
                        series[key][int(entry["step"])] = float(entry[key])
            for key, values in series.items():
                for step, value in values.items():
                    per_seed[key].setdefault(step, []).append(value)
        curves = {
            key: {step: Spread.of(values) for step, values in sorted(steps.items())}
            for key, steps in per_seed.items()
            if steps
        }
        if curves:
            found[method] = curves
    return found


def load_drift(root: Path, seeds: Sequence[int]) -> dict[str, dict[str, Any]]:
    """The drift reports (as dicts) of the ES and GRPO runs that have one, by run name."""
    found = {}
    for seed in seeds:
        for method in ("es", "grpo"):
            path = root / "drift" / f"{method}_s{seed}.json"
            if path.is_file():
                found[f"{method}_s{seed}"] = json.loads(path.read_text())
    return found


def load_sweep(root: Path) -> tuple[str, list[dict[str, Any]]] | None:
    """`(run, rows)` of the threshold sweep, or `None` when it has not run."""
    for path in sorted((root / "sweep").glob("*/sweep.json")):
        return path.parent.name, json.loads(path.read_text())
    return None


def export_results(root: Path, dest: Path) -> list[Path]:
    """Copies a reproduction's report, figures and every file the report is built from (per-problem evaluations,
    training logs, drift, sweep; no weights) from `root` to `dest`, where `build_report(dest)` rebuilds the same
    report.

    Returns:
        The files written, relative to `dest`.
    """
    import shutil

    root, dest = Path(root), Path(dest)
    written = []
    for pattern in (*REPORT_INPUTS, "report.md", "figures/*.png"):
        for source in sorted(root.glob(pattern)):
            if source.is_file():
                relative = source.relative_to(root)
                (dest / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest / relative)
                written.append(relative)
    return written
