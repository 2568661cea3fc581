"""Executes a [`ReproductionPlan`] stage by stage: train, evaluate, drift, threshold sweep, report.

Every stage writes one output (a folder renamed into place, or a JSON written atomically) and is skipped when that
output exists, so an interrupted run resumes at the stage it was in; evaluation also resumes problem by problem.

Layout of `output_dir` (a cluster run that writes the same layout gets the same report):

    plan.json                       the plan (a re-run must use the same one)
    train/<run>/                    trained checkpoints (`es_s0`, `grpo_s0`, `es_grpo_s0`, `grpo_es_s0`, ...)
    train/<run>/reproduce_run.json  updates, generated tokens, wall time and commands of the run's stages
    eval/<run>/{target,heldout}.json  Pass@K results (`hf_es.evaluation` format; `base` is the base model)
    drift/<run>.json                drift of an ES / GRPO run against the base (`hf_es.analysis.DriftReport`)
    sweep/<run>/sweep.json          target Pass@1 of magnitude-thresholded checkpoints of the first ES run
    report.md, figures/*.png        the report
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._io import write_text_atomic
from ..evaluation import PassAtKConfig, evaluate_checkpoint, load_problems, load_results, summary_line
from ..models import resolve_model_name_or_path
from .budget import generated_tokens
from .plan import ReproductionPlan, TaskSpec, TrainingRun

__all__ = ["Pipeline", "Stage", "TrainFn", "write_json"]

logger = logging.getLogger("hf_es.reproduce")

TrainFn = Callable[..., dict[str, Any]]
"""`train_fn(method, recipe, steps, output_dir, init_from, launcher, extra_args) -> dict` (as
[`hf_es.recipes.compose.run_stage`]): runs one training stage and saves its model to `output_dir`."""


def write_json(path: Path, data: Any) -> Path:
    """Writes JSON atomically (a crash never leaves a truncated file that would count as a finished stage)."""
    return write_text_atomic(path, json.dumps(data, indent=2) + "\n")


@dataclass
class Stage:
    """One resumable step: done when `output` exists (and `is_done`, if given, agrees)."""

    name: str
    output: Path
    run: Callable[[], Any]
    is_done: Callable[[], bool] | None = None

    def done(self) -> bool:
        return self.output.exists() and (self.is_done is None or self.is_done())


class Pipeline:
    """The stages of a plan in `output_dir`.

    Args:
        plan: What to run.
        output_dir: Where everything goes (see the module docstring).
        train_fn: Runs one training stage (see [`TrainFn`]); `None` when the checkpoints come from elsewhere (a
            cluster run): a missing one is then an error naming the command that makes it.
        show_progress: Progress bars during evaluation.
    """

    def __init__(self, plan: ReproductionPlan, output_dir: str | Path, train_fn: TrainFn | None = None,
                 show_progress: bool = True):  # fmt: skip
        self.plan, self.root, self.train_fn, self.show_progress = plan, Path(output_dir), train_fn, show_progress
        self.runs = {run.name: run for run in plan.runs()}

    # Paths -------------------------------------------------------------------------------------------------------
    def checkpoint(self, name: str) -> str:
        """The folder of a run's weights (`base`: the resolved base model)."""
        return resolve_model_name_or_path(self.plan.model) if name == "base" else str(self.root / "train" / name)

    def half_checkpoint(self, name: str) -> Path:
        return self.root / "train" / name / f"checkpoint-{self.plan.half_steps}"

    def eval_path(self, name: str, which: str) -> Path:
        return self.root / "eval" / name / f"{which}.json"

    def check_plan(self) -> None:
        """Saves the plan, or checks it against the one stored by an earlier run in `output_dir`.

        Raises:
            ValueError: If `output_dir` holds a run of another plan.
        """
        path, current = self.root / "plan.json", json.loads(json.dumps(self.plan.to_dict()))
        if path.is_file():
            stored = json.loads(path.read_text())
            changed = sorted(
                key for key in current if _comparable(key, stored.get(key)) != _comparable(key, current[key])
            )
            if changed:
                raise ValueError(
                    f"{self.root} holds a run with another plan (differs in {changed}); use another --output_dir."
                )
        write_json(path, current)

    # Stages -------------------------------------------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        """Every stage, headline first: ES and GRPO training and drift, then base / ES / GRPO on the target task, on
        the held-out task, the threshold sweep; then the compositions (the report is [`Pipeline.run`]'s last step)."""
        single = [run for run in self.runs.values() if run.init_from is None]
        composed = [run for run in self.runs.values() if run.init_from is not None]
        headline = ["base", *(run.name for run in single)]
        sweep_run = f"es_s{self.plan.seeds[0]}"
        return [
            *(self._train_stage(run) for run in single),
            *(Stage(f"drift {run.name}", self.root / "drift" / f"{run.name}.json", lambda n=run.name: self.drift(n))
              for run in single),
            *self._eval_stages(headline, "target"),
            *self._eval_stages(headline, "heldout"),
            Stage(f"sweep {sweep_run}", self.root / "sweep" / sweep_run / "sweep.json", lambda: self.sweep(sweep_run)),
            *(self._train_stage(run) for run in composed),
            *self._eval_stages([run.name for run in composed], "target"),
            *self._eval_stages([run.name for run in composed], "heldout"),
        ]  # fmt: skip

    def _train_stage(self, run: TrainingRun) -> Stage:
        return Stage(f"train {run.name}", Path(self.checkpoint(run.name)), lambda: self.train(run))

    def _eval_stages(self, names: list[str], which: str) -> list[Stage]:
        task = self.plan.target if which == "target" else self.plan.heldout
        paths = {name: self.eval_path(name, which) for name in names}
        return [
            Stage(f"eval {name} {which}", paths[name], lambda n=name: self.evaluate(n, which, task),
                  lambda p=paths[name]: _complete(p, task.num_problems))
            for name in names
        ]  # fmt: skip

    def run(self, report_fn: Callable[[Path], Any] | None = None) -> list[str]:
        """Runs every stage that is not done, then `report_fn(output_dir)` if a stage ran or no report exists.

        Returns:
            The names of the stages that ran (empty when everything was done already).
        """
        self.root.mkdir(parents=True, exist_ok=True)
        self.check_plan()
        stages, ran = self.stages(), []
        for index, stage in enumerate(stages, 1):
            prefix = f"[reproduce {index}/{len(stages)}] {stage.name}"
            if stage.done():
                logger.info("%s: done already (%s), skipped", prefix, stage.output)
                continue
            logger.info("%s: running", prefix)
            start = time.perf_counter()
            stage.run()
            ran.append(stage.name)
            logger.info("%s: finished in %.0f s", prefix, time.perf_counter() - start)
        if report_fn is not None and (ran or not (self.root / "report.md").exists()):
            report_fn(self.root)
            ran.append("report")
            logger.info("[reproduce] report: %s", self.root / "report.md")
        elif report_fn is not None:
            logger.info("[reproduce] report: done already (%s), skipped", self.root / "report.md")
        return ran

    def train(self, run: TrainingRun) -> None:
        """Trains one run into `train/<run>.partial/` and renames it into place when every stage succeeded."""
        final = Path(self.checkpoint(run.name))
        if self.train_fn is None:
            raise FileNotFoundError(f"{final} is missing: run its training command (see paper_commands.sh) first.")
        partial = final.with_name(final.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        plan, records = self.plan, []
        init_from: str | None = resolve_model_name_or_path(plan.model)
        stages = list(run.stages)
        if run.init_from is not None:  # a composition: stage 1 is the same-seed run's half-way checkpoint
            parent = Path(self.checkpoint(run.init_from))
            init_from = str(self.half_checkpoint(run.init_from))
            method, steps = stages.pop(0)
            record = json.loads((parent / "reproduce_run.json").read_text())
            records.append({
                "method": method.upper(), "steps": steps, "output_dir": init_from, "shared_with": run.init_from,
                "generated_tokens": generated_tokens(init_from, method),
                "wall_seconds": record["wall_seconds"] * steps / record["steps"],
            })  # fmt: skip
        for method, steps in stages:
            recipe = plan.es_recipe if method == "es" else plan.grpo_recipe
            launcher = plan.es_launcher if method == "es" else plan.grpo_launcher
            extra = plan.stage_args(method, run.seed, steps, save_half=run.init_from is None)
            start = time.perf_counter()
            stage = self.train_fn(method, recipe, steps, str(partial), init_from, launcher, extra)
            stage["wall_seconds"] = time.perf_counter() - start
            stage["generated_tokens"] = generated_tokens(partial, method)
            records.append(stage)
        summary = {
            "run": run.name, "method": run.method, "seed": run.seed, "steps": sum(s["steps"] for s in records),
            "generated_tokens": _sum_or_none(s.get("generated_tokens") for s in records),
            "wall_seconds": sum(s["wall_seconds"] for s in records), "stages": records,
        }  # fmt: skip
        write_json(partial / "reproduce_run.json", summary)
        os.replace(partial, final)

    def eval_config(self, task: TaskSpec) -> PassAtKConfig:
        """The Pass@K settings of every checkpoint on `task` (M samples at the plan's temperature, plus greedy)."""
        plan = self.plan
        return PassAtKConfig(
            dataset=task.name, split=task.split, max_problems=task.num_problems, num_samples=plan.num_samples,
            temperature=plan.temperature, max_new_tokens=plan.max_new_tokens, greedy=plan.greedy,
            task_options=dict(task.options), backend=plan.eval_backend, batch_size=plan.eval_batch_size,
            show_progress=self.show_progress,
        )  # fmt: skip

    def evaluate(
        self, name: str, which: str, task: TaskSpec, model: str | None = None, path: Path | None = None
    ) -> dict[str, Any]:
        """Pass@K / Maj@K / greedy of one checkpoint on the target or held-out task (resumes problem by problem).

        Args:
            name: A run of the plan (or `base`).
            which: `"target"` or `"heldout"`.
            task: The task's problems.
            model, path: Another checkpoint folder to evaluate and where its results go (the threshold sweep).
        """
        path = path or self.eval_path(name, which)
        config = self.eval_config(task)
        data = load_problems(task.name, task.split, task.num_problems, options=task.options)
        results = load_results(path)
        results["settings"] = config.settings()
        entry = evaluate_checkpoint(model or self.checkpoint(name), data, config, results, path)
        logger.info("%s on %s: %s", name, which, summary_line(entry["summary"], config.num_samples))
        return entry

    def drift(self, name: str) -> None:
        """Drift of a trained run against the base, with the plan's `tau` in the grid."""
        from ..analysis import DEFAULT_TAUS, compute_drift

        taus = sorted({*DEFAULT_TAUS, self.plan.tau, *self.plan.sweep_taus})
        report = compute_drift(self.checkpoint("base"), self.checkpoint(name), taus=taus)
        write_json(self.root / "drift" / f"{name}.json", report.to_dict(per_tensor=False))

    def sweep(self, name: str) -> None:
        """Target Pass@1 of magnitude-thresholded copies of `name` against their update sparsity."""
        from ..analysis import threshold_sweep

        folder = self.root / "sweep" / name
        target = dataclasses.replace(self.plan.target, num_problems=self.plan.sweep_problems)
        k = str(self.plan.num_samples)

        def evaluate(checkpoint: Path) -> dict[str, float]:
            reset = json.loads((checkpoint / "threshold.json").read_text())["num_reset"]
            if reset == 0 and target == self.plan.target:  # nothing reset: the run's own weights, evaluated already
                summary = self.evaluate(name, "target", target)["summary"]
            else:
                summary = self.evaluate(name, "target", target, model=str(checkpoint),
                                        path=folder / checkpoint.name / "target.json")["summary"]  # fmt: skip
            return {"pass@1": summary["pass@k"]["1"], f"pass@{k}": summary["pass@k"][k]}

        rows = threshold_sweep(
            self.checkpoint("base"), self.checkpoint(name), evaluate, taus=self.plan.sweep_taus,
            work_dir=folder / "checkpoints", metric="pass@1",
        )  # fmt: skip
        shutil.rmtree(folder / "checkpoints", ignore_errors=True)
        write_json(folder / "sweep.json", rows)


def _comparable(key: str, value: Any) -> Any:
    # Recipes are compared by file name: the same run resumes from another checkout of the repository; the source of
    # the step count is a description, not a setting.
    if key == "total_steps_source":
        return None
    return Path(value).name if key.endswith("_recipe") and value else value


def _complete(path: Path, num_problems: int) -> bool:
    try:
        results = load_results(path)
    except (ValueError, json.JSONDecodeError):
        return False
    entries = list(results.get("checkpoints", {}).values())
    return bool(entries) and all(
        e.get("summary", {}).get("num_problems") == num_problems
        and (not e["settings"].get("greedy") or e["summary"].get("greedy_accuracy") is not None)
        for e in entries
    )


def _sum_or_none(values: Any) -> int | None:
    values = list(values)
    return None if any(v is None for v in values) else int(sum(values))
