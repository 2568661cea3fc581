"""Matplotlib figures for drift reports and threshold sweeps (all saved as PNG, no display needed)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._plotting import pyplot, save_figure

if TYPE_CHECKING:
    from .report import DriftReport

__all__ = [
    "plot_delta_histogram",
    "plot_layer_distance",
    "plot_layer_ratio",
    "plot_module_type_distance",
    "plot_sparsity_curve",
    "plot_threshold_sweep",
]

Labelled = Mapping[str, "DriftReport"]


def _finish(fig: Any, ax: Any, path: str | Path, xlabel: str, ylabel: str, title: str, legend: bool = True) -> Path:
    """Labels the axes, adds the legend and saves the figure."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend()
    return save_figure(fig, path)


def _as_labelled(reports: DriftReport | Labelled) -> Labelled:
    return reports if isinstance(reports, Mapping) else {"tuned": reports}


def plot_delta_histogram(
    reports: DriftReport | Labelled, path: str | Path, *, taus: Sequence[float] = (1.5e-3,)
) -> Path:
    """Histogram of log10|delta| over changed coordinates, one step curve per report, with tau markers.

    Args:
        reports ([`DriftReport`] or `Mapping[str, DriftReport]`): One report, or several keyed by label.
        path (`str` or `Path`): Output PNG.
        taus (`Sequence[float]`, *optional*): Thresholds drawn as vertical lines.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    lo, hi = math.inf, -math.inf
    for label, report in _as_labelled(reports).items():
        edges = report.histogram["edges_log10"]
        counts = report.histogram["counts"][1:-1]  # under/overflow bins (outside the edges) are not drawn
        total = max(1, sum(report.histogram["counts"]))
        ax.stairs([c / total for c in counts], edges, label=label)
        used = [i for i, c in enumerate(counts) if c]
        if used:
            lo, hi = min(lo, edges[used[0]]), max(hi, edges[used[-1] + 1])
    for tau in taus:
        ax.axvline(math.log10(tau), color="gray", linestyle="--", linewidth=1)
        ax.text(math.log10(tau), 0.98, f" τ={tau:g}", transform=ax.get_xaxis_transform(), fontsize=8, va="top")
    if math.isfinite(lo):
        ax.set_xlim(min(lo, *(math.log10(t) for t in taus)) - 0.5, max(hi, *(math.log10(t) for t in taus)) + 0.5)
    return _finish(
        fig,
        ax,
        path,
        "log10 |Δθ|  (changed coordinates)",
        "fraction of changed coordinates",
        "Distribution of update magnitudes",
    )


def plot_sparsity_curve(reports: DriftReport | Labelled, path: str | Path) -> Path:
    """Update sparsity `s_tau` against tau (log axis), one curve per report."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, report in _as_labelled(reports).items():
        taus = sorted(report.update_sparsity)
        ax.plot(taus, [100 * report.update_sparsity[t] for t in taus], marker="o", label=label)
    ax.axvline(1.5e-3, color="gray", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_ylim(0, 100)
    return _finish(fig, ax, path, "τ", "s_τ: % of nonzero updates with |Δθ| ≤ τ", "Update sparsity")


def plot_layer_distance(reports: DriftReport | Labelled, path: str | Path) -> Path:
    """Grouped bars of the relative L2 distance of each transformer block."""
    plt = pyplot()
    reports = _as_labelled(reports)
    layers = sorted({layer for report in reports.values() for layer in report.per_layer})
    fig, ax = plt.subplots(figsize=(max(6, 0.25 * len(layers) * len(reports)), 4))
    width = 0.8 / max(1, len(reports))
    for i, (label, report) in enumerate(reports.items()):
        values = [report.per_layer.get(layer, {}).get("relative_l2") or 0.0 for layer in layers]
        ax.bar([layer + (i - (len(reports) - 1) / 2) * width for layer in layers], values, width=width, label=label)
    ax.set_xlabel("layer")
    ax.set_ylabel("‖Δθ‖ / ‖θ₀‖")
    ax.set_yscale("log" if len(reports) > 1 else "linear")
    ax.set_title("Relative L2 distance per layer")
    ax.legend()
    return save_figure(fig, path)


def plot_module_type_distance(reports: DriftReport | Labelled, path: str | Path) -> Path:
    """Grouped bars of the relative L2 distance per module type (embeddings, attention, MLP, norms, LM head...)."""
    plt = pyplot()
    reports = _as_labelled(reports)
    kinds = sorted({kind for report in reports.values() for kind in report.per_module_type})
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(kinds)), 4))
    width = 0.8 / max(1, len(reports))
    for i, (label, report) in enumerate(reports.items()):
        values = [report.per_module_type.get(kind, {}).get("relative_l2") or 0.0 for kind in kinds]
        ax.bar([j + (i - (len(reports) - 1) / 2) * width for j in range(len(kinds))], values, width=width, label=label)
    ax.set_xticks(range(len(kinds)), kinds, rotation=30, ha="right")
    ax.set_ylabel("‖Δθ‖ / ‖θ₀‖")
    ax.set_yscale("log" if len(reports) > 1 else "linear")
    ax.set_title("Relative L2 distance per module type")
    ax.legend()
    return save_figure(fig, path)


def plot_layer_ratio(
    report: DriftReport, other: DriftReport, path: str | Path, *, labels: tuple[str, str] = ("ES", "GRPO")
) -> Path:
    """Per-layer ratio of relative L2 distances `report / other` (e.g. ES / GRPO) with the whole-model ratio."""
    plt = pyplot()
    layers = sorted(set(report.per_layer) & set(other.per_layer))
    ratios = []
    for layer in layers:
        a, b = report.per_layer[layer].get("relative_l2"), other.per_layer[layer].get("relative_l2")
        ratios.append(a / b if a is not None and b else float("nan"))
    fig, ax = plt.subplots(figsize=(max(6, 0.25 * len(layers)), 4))
    ax.bar(layers, ratios)
    if other.relative_l2 > 0:
        overall = report.relative_l2 / other.relative_l2
        ax.axhline(overall, color="black", linestyle="--", linewidth=1, label=f"whole model: {overall:.1f}x")
        ax.legend()
    ax.set_xlabel("layer")
    ax.set_ylabel(f"relative L2 ratio {labels[0]} / {labels[1]}")
    ax.set_title(f"Drift ratio {labels[0]} / {labels[1]} per layer")
    return save_figure(fig, path)


def plot_threshold_sweep(
    rows: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    ylabel: str = "target-task accuracy",
    baseline: float | None = None,
) -> Path:
    """Accuracy of magnitude-thresholded checkpoints against update sparsity (rows of [`threshold_sweep`]).

    Args:
        rows: The sweep's rows (`tau`, `update_sparsity`, `accuracy`).
        path: Where the PNG goes.
        ylabel: Label of the accuracy axis.
        baseline: The base model's accuracy on the same problems, drawn as a dashed line (what resetting every
            update gives), so a zoomed axis cannot make a small gain look large.

    Returns:
        The PNG's path.
    """
    plt = pyplot()
    rows = sorted(rows, key=lambda r: r["update_sparsity"])
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [100 * r["update_sparsity"] for r in rows]
    ax.plot(xs, [r["accuracy"] for r in rows], marker="o", label="thresholded checkpoint")
    for x, r in zip(xs, rows):
        ax.annotate(f"τ={r['tau']:g}", (x, r["accuracy"]), fontsize=7, textcoords="offset points", xytext=(2, 4))
    if baseline is not None:
        ax.axhline(baseline, color="gray", linestyle="--", linewidth=1, label="base model")
    return _finish(
        fig,
        ax,
        path,
        "update sparsity s_τ (% of nonzero updates reset)",
        ylabel,
        "Accuracy vs update sparsity",
        baseline is not None,
    )
