"""The reproduction's figures with the spread over training seeds: Pass@K profile (K on a log axis), the Pass@1 vs
Pass@K Pareto plot and the training dynamics (centre entropy, coverage). Drift and threshold-sweep figures come from
`hf_es.analysis.plots`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .._plotting import pyplot, save_figure
from ..evaluation import pareto_front
from ..evaluation.plots import style_pass_at_k_axes
from .results import MethodResults, Spread

__all__ = ["plot_pareto_spread", "plot_profile_spread", "plot_training_dynamics"]

#: Panels of the training-dynamics figure: (title, y label, [(method, log key, legend label)]).
_DYNAMICS_PANELS = (
    ("Centre token entropy", "nats per token", [("es", "eval_entropy", "ES"), ("grpo", "eval_entropy", "GRPO")]),
    ("Coverage of the step's samples", "fraction of training prompts",
     [("es", "population/coverage", "ES: N greedy members"), ("grpo", "group/coverage", "GRPO: G samples, T=1")]),
    ("Centre greedy accuracy", "fraction of evaluation problems",
     [("es", "eval_reward", "ES"), ("grpo", "eval_reward", "GRPO")]),
)  # fmt: skip


def plot_training_dynamics(dynamics: Mapping[str, Mapping[str, Mapping[int, Spread]]], path: Path) -> Path:
    """Centre token entropy, the coverage of each step's samples, and centre accuracy over training, ES vs GRPO:
    mean over seeds, the band spanning their min to max ([`~hf_es.reproduce.results.load_dynamics`])."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(_DYNAMICS_PANELS), figsize=(13.5, 3.8))
    for ax, (title, ylabel, series) in zip(axes, _DYNAMICS_PANELS):
        for method, key, label in series:
            curve = dynamics.get(method, {}).get(key)
            if not curve:
                continue
            steps = sorted(curve)
            (line,) = ax.plot(steps, [curve[s].mean for s in steps], marker="o", markersize=3, label=label)
            if any(len(curve[s].values) > 1 for s in steps):
                ax.fill_between(steps, [curve[s].low for s in steps], [curve[s].high for s in steps],
                                color=line.get_color(), alpha=0.2, linewidth=0)  # fmt: skip
        ax.set_title(title)
        ax.set_xlabel("update")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.suptitle("Training dynamics (mean over seeds, band: min-max)", fontsize=10)
    return save_figure(fig, path)


def plot_profile_spread(methods: Mapping[str, MethodResults], task: str, path: Path, title: str = "") -> Path:
    """Mean Pass@K against K (log2 axis) per method, the band spanning the seeds' min to max."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    max_k = 1
    for method in methods.values():
        curve = method.curve(task)
        if not curve:
            continue
        ks = sorted(curve)
        max_k = max(max_k, ks[-1])
        (line,) = ax.plot(ks, [curve[k].mean for k in ks], marker="o", markersize=3, label=method.label, clip_on=False)
        if len(method.runs) > 1:
            ax.fill_between(ks, [curve[k].low for k in ks], [curve[k].high for k in ks], color=line.get_color(),
                            alpha=0.2, linewidth=0)  # fmt: skip
    style_pass_at_k_axes(ax, max_k, f"Pass@K profile{' - ' + title if title else ''} (band: seed min-max)")
    return save_figure(fig, path)


def plot_pareto_spread(methods: Mapping[str, MethodResults], task: str, k: int, path: Path) -> Path:
    """Pass@1 against Pass@k per method (mean over seeds, bars: seed min-max); Pareto-optimal means starred."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.6))
    points, labels, spreads = [], [], []
    for method in methods.values():
        x, y = method.metric(task, "pass@k", 1), method.metric(task, "pass@k", k)
        if x.mean is None or y.mean is None:
            continue
        points.append((x.mean, y.mean))
        labels.append(method.label)
        spreads.append((x, y))
    for (x, y), label, (sx, sy), optimal in zip(points, labels, spreads, pareto_front(points)):
        ax.errorbar([x], [y], xerr=[[x - sx.low], [sx.high - x]], yerr=[[y - sy.low], [sy.high - y]],
                    fmt="*" if optimal else "o", markersize=12 if optimal else 6, capsize=3,
                    label=label + (" (Pareto-optimal)" if optimal else ""))  # fmt: skip
    # Fractions: never below 0, a little head-room above the largest value (at most 1.05).
    if spreads:
        ax.set_xlim(0, min(1.05, 1.1 * max(sx.high for sx, _ in spreads) + 0.05))
        ax.set_ylim(0, min(1.05, 1.1 * max(sy.high for _, sy in spreads) + 0.05))
    ax.set_xlabel("Pass@1 (fraction of problems)")
    ax.set_ylabel(f"Pass@{k} (fraction of problems)")
    ax.set_title(f"Pass@1 vs Pass@{k} (mean over seeds, bars: min-max)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")  # Pass@k >= Pass@1: no point ever lies below the diagonal
    return save_figure(fig, path)
