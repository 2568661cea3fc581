"""The training plot of the model card: reward against step, from `TrainerState.log_history`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._plotting import pyplot, save_figure

__all__ = ["plot_reward_curve"]


def plot_reward_curve(
    log_history: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    reward_key: str = "reward",
    std_key: str = "reward_std",
    eval_key: str = "eval_reward",
) -> Path | None:
    """Training reward (with a +/- std band when logged) and eval reward against step, from `TrainerState.log_history`.

    Returns:
        `Path` or `None`: the PNG, or `None` when the history has no reward to plot.
    """
    train = [(e["step"], e[reward_key], e.get(std_key)) for e in log_history if reward_key in e and "step" in e]
    evals = [(e["step"], e[eval_key]) for e in log_history if eval_key in e and "step" in e]
    if not train and not evals:
        return None
    fig, ax = pyplot().subplots(figsize=(6, 4))
    if train:
        steps = [s for s, _, _ in train]
        values = [v for _, v, _ in train]
        ax.plot(steps, values, label="train reward (population mean)")
        if all(sd is not None for _, _, sd in train):
            ax.fill_between(
                steps,
                [v - sd for _, v, sd in train],
                [v + sd for _, v, sd in train],
                alpha=0.2,
                label="± population std",
            )
    if evals:
        ax.plot([s for s, _ in evals], [v for _, v in evals], marker="o", label="eval reward")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title("Reward during ES training")
    ax.legend()
    return save_figure(fig, path)
