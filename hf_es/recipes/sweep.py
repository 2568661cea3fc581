"""Population-size and sigma sweeps of ES (paper, section 4): one reward trajectory per setting, and which N is enough.

    python scripts/sweep.py --config recipes/smollm2_cpu_arithmetic.yaml --output_dir outputs/sweep-N \
        --population_sizes 8 16 32 64 --max_steps 30
    python scripts/sweep.py --config recipes/smollm2_cpu_arithmetic.yaml --output_dir outputs/sweep-sigma \
        --population_sizes 16 --sigmas 5e-4 1e-3 2e-3 4e-3
    accelerate launch --config_file accelerate_configs/multi_gpu.yaml scripts/sweep.py \
        --config recipes/qwen2.5-1.5b-instruct_gsm8k_es.yaml --output_dir outputs/qwen1.5b-sweep-N --max_steps 100

Every setting of the grid `population_sizes x sigmas` (default: N in {8, 16, 32, 64} at the recipe's sigma) trains
from the recipe's model with everything else unchanged (same data order, same noise seed), in this process (under
`accelerate launch`, on all processes). Written under `--output_dir`:

- `N{n}_sigma{s}/trajectory.json`: the setting, the per-update `reward` (mean population reward) and, when the recipe
  evaluates, `eval_reward` by step; `N{n}_sigma{s}/trajectory.png`: the reward curve.
- `rewards.png`: all trajectories on one plot.
- `summary.json` / `summary.md`: for each sigma, the final reward of each N (the `--summary_metric` at the final
  update, averaged over the last `--final_window` updates) and which N land within `--tolerance` (0.01) of the
  largest N's; `smallest_sufficient_N` is the smallest such N.

Models are not saved unless `--save_models` is given.
"""

from __future__ import annotations

import copy
import gc
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import ModelConfig

from .._plotting import pyplot, save_figure
from ..cli import ScriptArgumentParser, training_help_sections
from ..model_card import plot_reward_curve
from ..tasks import TaskArguments
from ..trainer import ESConfig, ESTrainer
from ..trainer.es_config import check_no_grpo_only_fields
from .run import build_trainer

__all__ = ["SweepArguments", "build_parser", "final_value", "main", "summarize", "trajectory_from_log_history"]


@dataclass
class SweepArguments:
    """The sweep grid and its summary.

    Args:
        population_sizes: Values of N (`population_size`).
        sigmas: Values of sigma (default: the recipe's only).
        tolerance: A setting is "enough" when its final reward is within this of the largest N's.
        summary_metric: `"reward"` (training reward at the final update) or `"eval_reward"` (last evaluation).
        final_window: Number of last updates averaged for the final training reward.
        save_models: Save each setting's model in its folder.
    """

    population_sizes: list[int] = field(default_factory=lambda: [8, 16, 32, 64], metadata={"help": "Values of N."})
    sigmas: list[float] | None = field(default=None, metadata={"help": "Values of sigma (default: recipe's)."})
    tolerance: float = field(default=0.01, metadata={"help": "Reward gap to the largest N that counts as enough."})
    summary_metric: str = field(default="reward", metadata={"help": "'reward' or 'eval_reward'."})
    final_window: int = field(default=1, metadata={"help": "Last updates averaged for the final reward."})
    save_models: bool = field(default=False, metadata={"help": "Save each setting's model."})


def setting_name(population_size: int, sigma: float) -> str:
    """Folder name of one setting, e.g. `N16_sigma0.0015`."""
    return f"N{population_size}_sigma{sigma:g}"


def trajectory_from_log_history(log_history: list[dict[str, Any]]) -> dict[str, list[list[float]]]:
    """`{"reward": [[step, value], ...], "eval_reward": [[step, value], ...]}` from `Trainer.state.log_history`."""
    out: dict[str, list[list[float]]] = {"reward": [], "eval_reward": []}
    for entry in log_history:
        for key in out:
            if key in entry and entry[key] is not None and math.isfinite(float(entry[key])):
                out[key].append([int(entry.get("step", 0)), float(entry[key])])
    return out


def final_value(trajectory: dict[str, list[list[float]]], metric: str, window: int) -> float | None:
    """The metric at the final update (training reward: mean of the last `window` updates)."""
    points = trajectory.get(metric) or []
    if not points:
        return None
    if metric == "eval_reward":
        return points[-1][1]
    values = [value for _, value in points[-max(1, window) :]]
    return sum(values) / len(values)


def summarize(results: list[dict[str, Any]], tolerance: float) -> dict[str, Any]:
    """Per sigma: final reward by N, the largest N's, and which N are within `tolerance` of it.

    Args:
        results: One dict per setting with `population_size`, `sigma` and `final` (the final reward or `None`).
        tolerance: Allowed gap to the largest N.

    Returns:
        `{"tolerance", "by_sigma": {sigma: {"final_by_N", "reference_N", "reference", "within_tolerance",
        "smallest_sufficient_N"}}}`.
    """
    by_sigma: dict[str, Any] = {}
    for sigma in sorted({r["sigma"] for r in results}):
        rows = sorted((r for r in results if r["sigma"] == sigma), key=lambda r: r["population_size"])
        finals = {r["population_size"]: r["final"] for r in rows}
        reference_n = max(finals)
        reference = finals[reference_n]
        within = (
            [n for n, value in finals.items() if value is not None and value >= reference - tolerance]
            if reference is not None
            else []
        )
        by_sigma[f"{sigma:g}"] = {
            "final_by_N": {str(n): value for n, value in finals.items()},
            "reference_N": reference_n,
            "reference": reference,
            "within_tolerance": within,
            "smallest_sufficient_N": min(within) if within else None,
        }
    return {"tolerance": tolerance, "by_sigma": by_sigma}


def summary_markdown(summary: dict[str, Any], metric: str) -> str:
    """A Markdown table of [`summarize`]'s result."""
    lines = [f"Final {metric} by population size (within {summary['tolerance']:g} of the largest N marked *)", ""]
    lines += ["| sigma | " + " | ".join(f"N={n}" for n in next(iter(summary["by_sigma"].values()))["final_by_N"])]
    lines[-1] += " | smallest sufficient N |"
    lines.append("|" + "---|" * (len(next(iter(summary["by_sigma"].values()))["final_by_N"]) + 2))
    for sigma, row in summary["by_sigma"].items():
        cells = []
        for n, value in row["final_by_N"].items():
            mark = "*" if int(n) in row["within_tolerance"] else ""
            cells.append("n/a" if value is None else f"{value:.4f}{mark}")
        lines.append(f"| {sigma} | " + " | ".join(cells) + f" | {row['smallest_sufficient_N']} |")
    return "\n".join(lines) + "\n"


def plot_trajectories(results: list[dict[str, Any]], path: str | os.PathLike) -> Path:
    """All settings' training-reward trajectories on one figure."""
    fig, ax = pyplot().subplots(figsize=(7, 4))
    for result in results:
        points = result["trajectory"]["reward"]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=result["name"])
    ax.set_xlabel("update")
    ax.set_ylabel("mean population reward")
    ax.set_title("ES reward trajectories")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def run_setting(
    task_args: TaskArguments, base_args: ESConfig, model_args: ModelConfig, population_size: int, sigma: float
) -> tuple[ESTrainer, ESConfig]:
    """Trains one setting (the recipe with `population_size` and `sigma` replaced); returns the trainer."""
    args = copy.deepcopy(base_args)
    args.population_size, args.sigma = population_size, sigma
    args.output_dir = os.path.join(base_args.output_dir, setting_name(population_size, sigma))
    args.logging_dir = os.path.join(args.output_dir, "runs")
    args.validate_es_fields()
    trainer = build_trainer("es", task_args, args, model_args)
    trainer.train()
    return trainer, args


def main(
    task_args: TaskArguments, training_args: ESConfig, model_args: ModelConfig, sweep_args: SweepArguments
) -> dict[str, Any]:
    """Runs the grid and writes the trajectories and the summary; returns the summary."""
    if sweep_args.summary_metric not in ("reward", "eval_reward"):
        raise ValueError(f"summary_metric must be 'reward' or 'eval_reward', got {sweep_args.summary_metric!r}.")
    sigmas = sweep_args.sigmas or [training_args.sigma]
    root = Path(training_args.output_dir)
    results = []
    for sigma in sigmas:
        for population_size in sweep_args.population_sizes:
            trainer, args = run_setting(task_args, training_args, model_args, population_size, sigma)
            trajectory = trajectory_from_log_history(trainer.state.log_history)
            result = {
                "name": setting_name(population_size, sigma),
                "population_size": population_size,
                "sigma": sigma,
                "learning_rate": args.learning_rate,
                "steps": trainer.state.global_step,
                "final": final_value(trajectory, sweep_args.summary_metric, sweep_args.final_window),
                "trajectory": trajectory,
            }
            if trainer.is_world_process_zero():
                folder = Path(args.output_dir)
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "trajectory.json").write_text(json.dumps(result, indent=2))
                plot_reward_curve(trainer.state.log_history, folder / "trajectory.png")
            if sweep_args.save_models:
                trainer.save_model(args.output_dir)
            results.append(result)
            print(f"[sweep] {result['name']}: final {sweep_args.summary_metric} = {result['final']}", flush=True)
            del trainer
            gc.collect()
    summary = summarize(results, sweep_args.tolerance)
    summary.update(metric=sweep_args.summary_metric, final_window=sweep_args.final_window)
    summary["settings"] = [{k: v for k, v in r.items() if k != "trajectory"} for r in results]
    if training_args.process_index == 0:
        root.mkdir(parents=True, exist_ok=True)
        (root / "summary.json").write_text(json.dumps(summary, indent=2))
        table = summary_markdown(summary, sweep_args.summary_metric)
        (root / "summary.md").write_text(table)
        plot_trajectories(results, root / "rewards.png")
        print(table)
    return summary


def build_parser() -> ScriptArgumentParser:
    """The command line of `sweep`: the fields of `train_es` plus `SweepArguments`."""
    return ScriptArgumentParser(
        (TaskArguments, ESConfig, ModelConfig, SweepArguments),
        description="Population-size and sigma sweeps of ES: one reward trajectory per setting, and which N is enough.",
        help_sections=training_help_sections(
            "Sweep",
            ["population_sizes", "sigmas", "tolerance", "summary_metric", "final_window", "save_models"],
            extra={"ES (fixed across the sweep)": ["learning_rate", "fitness_shaping", "estimator", "noise_seed"]},
        ),
        examples=[
            "python scripts/sweep.py --config recipes/smollm2_cpu_arithmetic.yaml --output_dir outputs/sweep-N "
            "--population_sizes 8 16 32 64 --max_steps 30"
        ],
        required=["model_name_or_path", "output_dir"],
        check_names=check_no_grpo_only_fields,
    )


if __name__ == "__main__":
    main(*build_parser().parse_args_and_config())
