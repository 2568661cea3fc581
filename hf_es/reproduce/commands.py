"""The shell commands of a plan, for running a reproduction on a GPU cluster (`scripts/reproduce_paper.py --scale
paper`): either the whole pipeline on one node, or every training stage as its own job followed by the report step."""

from __future__ import annotations

import shlex

from ..cli import recipe_name
from ..recipes.compose import stage_command
from .plan import ReproductionPlan

__all__ = ["plan_commands"]


def _stage_command(
    plan: ReproductionPlan, method: str, steps: int, output_dir: str, init_from: str | None, extra: str
) -> str:
    # The command line `hf_es.recipes.compose.run_stage` runs for one stage (the pipeline's own training path).
    launcher = plan.es_launcher if method == "es" else plan.grpo_launcher
    recipe = plan.es_recipe if method == "es" else plan.grpo_recipe
    return shlex.join(
        stage_command(method, recipe_name(recipe), steps, output_dir, init_from, shlex.split(launcher), extra)
    )


def plan_commands(plan: ReproductionPlan, output_dir: str) -> str:
    """A bash script: the one-node pipeline command, then the per-stage training commands and the report step.

    The per-stage commands write `output_dir/train/<run>` directly; the report step (`--skip_training`) then
    evaluates, measures drift, sweeps thresholds and writes `output_dir/report.md`, reading budgets from the saved
    training logs.
    """
    setting = plan.scale.removeprefix("paper-")
    root = output_dir.rstrip("/")
    lines = [
        "#!/usr/bin/env bash",
        f"# Paper {setting} setting: {plan.model}, {plan.target.describe()}; held-out {plan.heldout.describe()}.",
        f"# {plan.total_steps} updates per checkpoint, seeds {list(plan.seeds)}; M={plan.num_samples} at "
        f"T={plan.temperature}, up to {plan.max_new_tokens} new tokens.",
        *([f"# Updates per checkpoint: {plan.total_steps_source}."] if plan.total_steps_source else []),
        "# Run from the root of the hf_es repository (the accelerate configs are relative paths).",
        "set -euo pipefail",
        "",
        "# Option A: everything on one GPU node (resumable: re-run the same command after an interruption).",
        f"#   python scripts/reproduce_paper.py --scale paper --setting {setting} --execute --output_dir {root}",
        "",
        "# Option B: each training stage as its own job (compositions start from the half-way checkpoint of the",
        "# same-seed run, so run the full ES / GRPO runs first), then the evaluation, drift, sweep and report step.",
    ]
    for run in plan.runs():
        out = f"{root}/train/{run.name}"
        stages = list(run.stages)
        init_from = None
        if run.init_from is not None:
            stages.pop(0)
            init_from = f"{root}/train/{run.init_from}/checkpoint-{plan.half_steps}"
        for method, steps in stages:
            extra = plan.stage_args(method, run.seed, steps, save_half=run.init_from is None)
            lines.append(_stage_command(plan, method, steps, out, init_from, extra))
    lines += [
        "",
        f"python scripts/reproduce_paper.py --scale paper --setting {setting} --execute --skip_training "
        f"--output_dir {root}",
        "",
    ]
    return "\n".join(lines)
