"""Pass@K profile and Pareto plots of a results JSON; values are fractions in [0, 1], axes never go below 0."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._plotting import pyplot, save_figure

__all__ = ["checkpoint_label", "pareto_front", "plot_pareto", "plot_pass_at_k", "plot_results"]

# Fractions live in [0, 1]; a little head-room keeps markers at 1.0 inside the frame, and none is added below 0.
_FRACTION_LIMITS = (0.0, 1.05)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which points are non-dominated (no other point is at least as good on both axes and better on one).

    Args:
        points: (x, y) pairs, larger is better on both axes.

    Returns:
        `True` for the Pareto-optimal points.
    """
    flags = []
    for i, (x, y) in enumerate(points):
        dominated = any((ox >= x and oy >= y) and (ox > x or oy > y) for j, (ox, oy) in enumerate(points) if j != i)
        flags.append(not dominated)
    return flags


def checkpoint_label(name: str) -> str:
    """A short label for a checkpoint: `run/checkpoint-N` for checkpoint folders, the folder name, or the Hub id."""
    path = Path(name)
    if path.exists():
        parts = path.resolve().parts
        return "/".join(parts[-2:]) if path.name.startswith("checkpoint") else path.name
    return name


def plot_pass_at_k(checkpoints: Mapping[str, Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Pass@K against K (log2 axis), one curve per checkpoint; y is the fraction of problems, from 0 to 1."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    max_k = 1
    for name, entry in checkpoints.items():
        curve = entry["summary"]["pass@k"]
        ks = sorted(int(k) for k in curve)
        max_k = max(max_k, ks[-1])
        ax.plot(ks, [curve[str(k)] for k in ks], marker="o", markersize=3, label=checkpoint_label(name), clip_on=False)
    style_pass_at_k_axes(ax, max_k, f"Pass@K profile{' - ' + title if title else ''}")
    return save_figure(fig, path)


def style_pass_at_k_axes(ax: Any, max_k: int, title: str) -> None:
    """The Pass@K profile's axes: K on a log2 axis with integer ticks up to `max_k`, Pass@K as a fraction in [0, 1]
    (readable when every value is 0 or 1), grid and legend."""
    ax.set_xscale("log", base=2)
    ticks = [2**i for i in range(int(math.log2(max_k)) + 1)]
    if ticks[-1] != max_k:
        ticks.append(max_k)
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlim(1, max(max_k, 2))
    ax.set_ylim(*_FRACTION_LIMITS)
    ax.set_xlabel("K (samples)")
    ax.set_ylabel("Pass@K (fraction of problems)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")


def plot_pareto(checkpoints: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """Pass@1 against Pass@16 / Pass@32 (or the largest common K), Pareto-optimal checkpoints starred.

    Checkpoints are numbered; points that coincide (e.g. every value 0) share one label such as `1,2`, so labels
    never overlap, and the legend maps numbers to names.
    """
    plt = pyplot()
    names = list(checkpoints)
    common_max = min(int(max(entry["summary"]["pass@k"], key=int)) for entry in checkpoints.values())
    targets = sorted({k for k in (16, 32) if k <= common_max} or {common_max})
    fig, axes = plt.subplots(1, len(targets), figsize=(5.2 * len(targets), 4.4), squeeze=False)
    for ax, k in zip(axes[0], targets):
        points = [
            (checkpoints[n]["summary"]["pass@k"]["1"], checkpoints[n]["summary"]["pass@k"][str(k)]) for n in names
        ]
        front = pareto_front(points)
        for number, ((x, y), name, optimal) in enumerate(zip(points, names, front), 1):
            ax.scatter(
                [x], [y], s=80 if optimal else 40, marker="*" if optimal else "o", zorder=3, clip_on=False,
                label=f"{number}: {checkpoint_label(name)}",
            )  # fmt: skip
        coincident: dict[tuple[float, float], list[str]] = {}
        for number, point in enumerate(points, 1):
            coincident.setdefault(point, []).append(str(number))
        for (x, y), numbers in coincident.items():
            ax.annotate(",".join(numbers), (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
        frontier = sorted(p for p, optimal in zip(points, front) if optimal)
        if len(frontier) > 1:
            ax.plot([p[0] for p in frontier], [p[1] for p in frontier], "k--", linewidth=1, alpha=0.6)
        ax.set_xlim(*_FRACTION_LIMITS)
        ax.set_ylim(*_FRACTION_LIMITS)
        ax.set_xlabel("Pass@1 (fraction of problems)")
        ax.set_ylabel(f"Pass@{k} (fraction of problems)")
        ax.set_title(f"Pass@1 vs Pass@{k} (stars: Pareto-optimal)")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="lower right")
    return save_figure(fig, path)


def plot_results(results: Mapping[str, Any], output_dir: Path) -> list[Path]:
    """Draws `pass_at_k.png` and `pareto.png` from a results JSON into `output_dir`.

    Returns:
        The written files (none when no checkpoint has a summarised problem).
    """
    checkpoints = {
        name: entry
        for name, entry in results["checkpoints"].items()
        if entry.get("summary", {}).get("num_problems", 0) > 0
    }
    if not checkpoints:
        return []
    title = results.get("settings", {}).get("dataset", "")
    return [
        plot_pass_at_k(checkpoints, output_dir / "pass_at_k.png", title),
        plot_pareto(checkpoints, output_dir / "pareto.png"),
    ]
