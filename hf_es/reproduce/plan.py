"""What a reproduction of the paper's headline comparison runs: the model, the rewarded and held-out tasks, the
matched training budgets, the evaluation protocol and the drift analysis, at each scale.

A [`ReproductionPlan`] names every run (`base`, then `es`, `grpo`, `es_grpo`, `grpo_es` per training seed) and the
command that trains it; [`hf_es.reproduce.pipeline`] executes the plan stage by stage and
[`hf_es.reproduce.report`] turns its outputs into `report.md`. The paper scale only differs in the recipes, the
launchers and the sizes, so a cluster run writes the same folders and the same report step reads them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cli import RECIPES
from ..tasks import get_task

__all__ = ["METHODS", "PAPER_REFERENCE", "SCALES", "ReproductionPlan", "TaskSpec", "TrainingRun", "get_plan"]


#: Methods in report order: label, and the training method of each of its (at most two) stages.
METHODS: dict[str, tuple[str, tuple[str, ...]]] = {
    "base": ("Base", ()),
    "es": ("ES", ("es",)),
    "grpo": ("GRPO", ("grpo",)),
    "es_grpo": ("ES→GRPO", ("es", "grpo")),
    "grpo_es": ("GRPO→ES", ("grpo", "es")),
}

#: The paper's reference numbers (Qwen2.5-1.5B-Instruct, GSM8K -> held-out averages; drift over its model sizes).
PAPER_REFERENCE: dict[str, Any] = {
    "setting": "Qwen2.5-1.5B-Instruct trained on GSM8K, Pass@K averaged over held-out math tasks, M=32, T=0.6",
    "pass_at_k": {"base": (41.0, 75.4, 80.2), "grpo": (42.9, 75.1, 79.9), "es": (41.5, 76.0, 80.9)},
    "drift_ratio": (40.7, 44.1),
    "sparsity_at_tau": (77.6, 93.0),
    "tau": 1.5e-3,
}


@dataclass(frozen=True)
class TaskSpec:
    """An evaluation task: a registered task with its generator parameters and how many problems to score.

    Args:
        name: A registered task ([`hf_es.tasks.TASKS`]).
        options: Loader keywords of the task (e.g. `{"operation": "add", "min_value": 10, "max_value": 99}`).
        num_problems: Problems scored per checkpoint.
        split: Split of the task (generated tasks draw non-train splits from a disjoint seed).
    """

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    num_problems: int = 64
    split: str = "test"

    def recipe_fields(self) -> dict[str, Any]:
        """The `TaskArguments` fields that select these problems (`dataset_name` plus e.g. `arithmetic_operation`)."""
        by_keyword = dict(get_task(self.name).options)
        unknown = sorted(set(self.options) - set(by_keyword))
        if unknown:
            raise ValueError(f"Task {self.name!r} has no option(s) {unknown}; it takes {sorted(by_keyword)}.")
        return {"dataset_name": self.name, **{by_keyword[key]: value for key, value in self.options.items()}}

    def describe(self) -> str:
        """E.g. `arithmetic (operation=add, min_value=10, max_value=99), 64 test problems`."""
        options = ", ".join(f"{key}={value}" for key, value in self.options.items())
        return f"{self.name}{f' ({options})' if options else ''}, {self.num_problems} {self.split} problems"


@dataclass(frozen=True)
class TrainingRun:
    """One trained checkpoint of the plan: its stages, starting point and the number of updates of each stage."""

    name: str
    method: str
    seed: int
    stages: tuple[tuple[str, int], ...]
    init_from: str | None = None
    """`None`: the base model; else the run whose half-way checkpoint stage 1 of this composition is."""


@dataclass(frozen=True)
class ReproductionPlan:
    """Everything one reproduction runs (see the module docstring).

    Args:
        scale: `"cpu"`, `"smoke"`, `"paper-easy"` or `"paper-hard"`.
        model: Base model (Hub id, local folder, or the bundled SmolLM2 id).
        es_recipe, grpo_recipe: YAML recipes of `scripts/train_es.py` / `scripts/train_grpo.py`.
        total_steps: Updates of every trained checkpoint (compositions: half in each stage).
        seeds: Training seeds (`seed` and, for ES, `noise_seed`).
        target: The rewarded task, scored on its held-out split.
        heldout: A task never rewarded (forgetting).
        num_samples, temperature, max_new_tokens: Evaluation sampling (M samples per problem).
        greedy: Also score greedy decoding.
        tau: The threshold of `s_tau`.
        sweep_taus: Thresholds of the magnitude-threshold sweep of the first ES checkpoint.
        sweep_problems: Target problems scored per thresholded checkpoint.
        train_args: Extra CLI overrides of both training scripts (e.g. the number of training problems).
        es_args, grpo_args: Extra CLI overrides of `scripts/train_es.py` / `scripts/train_grpo.py` only.
        es_launcher, grpo_launcher: Command prefixes of the training scripts.
        eval_backend: `"auto"`, `"vllm"` or `"transformers"` (see `hf_es.evaluation.PassAtKConfig`).
        eval_batch_size: Sequences per transformers `generate` call.
        total_steps_source: Where `total_steps` comes from (printed with the commands and in the report).
        compositions: Also train and evaluate ES->GRPO and GRPO->ES (each from its same-seed run's half-way
            checkpoint).
        dynamics_eval_steps: Every this many updates (and before the first), training evaluates its current weights
            (ES: the centre) on `dynamics_problems` problems of the target task's split (drawn with the run's seed),
            greedy, with their token entropy: the training-dynamics figure. `0`: no evaluation during training.
        dynamics_problems: Target problems of those evaluations.
    """

    scale: str
    model: str
    es_recipe: str
    grpo_recipe: str
    total_steps: int
    seeds: tuple[int, ...]
    target: TaskSpec
    heldout: TaskSpec
    num_samples: int = 32
    temperature: float = 0.6
    max_new_tokens: int = 1024
    greedy: bool = True
    tau: float = 1.5e-3
    sweep_taus: tuple[float, ...] = (5e-4, 1.5e-3, 3e-3, 6e-3)
    sweep_problems: int = 64
    train_args: str = ""
    es_args: str = ""
    grpo_args: str = ""
    es_launcher: str = "python"
    grpo_launcher: str = "python"
    eval_backend: str = "auto"
    eval_batch_size: int = 64
    total_steps_source: str = ""
    compositions: bool = True
    dynamics_eval_steps: int = 0
    dynamics_problems: int = 32

    def __post_init__(self) -> None:
        if self.total_steps < 2:
            raise ValueError(
                f"total_steps must be >= 2 (a composition gives each stage half), got {self.total_steps}."
            )
        if not self.seeds:
            raise ValueError("seeds must name at least one training seed.")
        if self.num_samples < 1 or self.temperature <= 0:
            raise ValueError("Evaluation needs num_samples >= 1 and temperature > 0.")
        if self.dynamics_eval_steps < 0 or self.dynamics_problems < 1:
            raise ValueError("dynamics_eval_steps must be >= 0 (0: off) and dynamics_problems >= 1.")

    @property
    def half_steps(self) -> int:
        """Updates of a composition's first stage (the second gets `total_steps - half_steps`)."""
        return self.total_steps // 2

    def runs(self) -> list[TrainingRun]:
        """The trained checkpoints: per seed, ES and GRPO with `total_steps`, then (with `compositions`) the two
        compositions whose first stage is the half-way checkpoint of the same-seed ES / GRPO run (constant learning
        rate: the same weights as a separate run of `half_steps` updates)."""
        half, rest = self.half_steps, self.total_steps - self.half_steps
        runs = []
        for seed in self.seeds:
            runs += [
                TrainingRun(f"es_s{seed}", "es", seed, (("es", self.total_steps),)),
                TrainingRun(f"grpo_s{seed}", "grpo", seed, (("grpo", self.total_steps),)),
            ]
            if self.compositions:
                runs += [
                    TrainingRun(f"es_grpo_s{seed}", "es_grpo", seed, (("es", half), ("grpo", rest)), f"es_s{seed}"),
                    TrainingRun(f"grpo_es_s{seed}", "grpo_es", seed, (("grpo", half), ("es", rest)), f"grpo_s{seed}"),
                ]
        return runs

    @property
    def methods(self) -> list[str]:
        """The keys of [`METHODS`] this plan reports on, in report order."""
        return [key for key in METHODS if self.compositions or key not in ("es_grpo", "grpo_es")]

    def stage_args(self, method: str, seed: int, steps: int, save_half: bool) -> str:
        """CLI overrides of one training stage: seeds, and a checkpoint at `half_steps` for full runs."""
        own = self.es_args if method == "es" else self.grpo_args
        args = " ".join(part for part in (f"--seed {seed} --report_to none", self.train_args, own) if part)
        if method == "es":
            args += f" --noise_seed {seed}"
        # The generator parameters of a generated target task (a Hub task's recipe names its dataset already).
        task_fields = {k: v for k, v in self.target.recipe_fields().items() if k != "dataset_name"}
        args += "".join(f" --{name} {value}" for name, value in task_fields.items())
        if save_half and self.compositions:
            args += f" --save_strategy steps --save_steps {self.half_steps} --save_only_model true"
        if self.dynamics_eval_steps:
            args += (
                f" --dataset_test_split {self.target.split} --num_eval_samples {self.dynamics_problems}"
                f" --eval_strategy steps --eval_steps {self.dynamics_eval_steps} --eval_on_start true"
                f" --per_device_eval_batch_size {self.dynamics_problems}"
            )
        return args

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")


# Multiplication of numbers in 2..19: neither at floor nor at ceiling for SmolLM2-135M (docs/reproduce_cpu_results.md
# has the measurement). Its 324 operand pairs are few: 149 of them (held-out fraction 0.45) are kept for evaluation
# only, so that 144 distinct unseen problems can be scored.
_CPU_TARGET = TaskSpec("arithmetic", {"operation": "mul", "min_value": 2, "max_value": 19, "held_out_fraction": 0.45})
_CPU_HELDOUT = TaskSpec("arithmetic", {"operation": "add", "min_value": 2, "max_value": 9})


def _recipes(stem: str) -> dict[str, str]:
    """`es_recipe` and `grpo_recipe` of a setting: the shipped recipes `<stem>_es.yaml` and `<stem>_grpo.yaml`."""
    return {"es_recipe": str(RECIPES / f"{stem}_es.yaml"), "grpo_recipe": str(RECIPES / f"{stem}_grpo.yaml")}


def _cpu_plan() -> ReproductionPlan:
    """SmolLM2-135M-Instruct on multiplication of numbers in 2..19 (evaluated on 144 operand pairs training never
    draws); held out: addition of numbers in 2..9, never rewarded. Sized so that the ES-vs-GRPO Pass@32 interval
    can exclude 0 (144 problems, 3 seeds) within 3 hours on 2 cores: the compositions are left out (the paper
    scales run them)."""
    return ReproductionPlan(
        scale="cpu",
        model="HuggingFaceTB/SmolLM2-135M-Instruct",
        **_recipes("smollm2_cpu_paper"),
        total_steps=16,
        total_steps_source="the paper's 234 cut to what 2 CPU cores run for 3 seeds of ES and GRPO in under 3 hours",
        seeds=(0, 1, 2),
        target=dataclasses.replace(_CPU_TARGET, num_problems=144),
        heldout=dataclasses.replace(_CPU_HELDOUT, num_problems=32),
        max_new_tokens=12,
        sweep_taus=(5e-4, 1.5e-3, 3e-3),
        sweep_problems=32,
        train_args="--num_train_samples 256",
        eval_batch_size=32,
        compositions=False,
        dynamics_eval_steps=4,
        dynamics_problems=32,
    )


def _smoke_plan() -> ReproductionPlan:
    return dataclasses.replace(
        _cpu_plan(),
        scale="smoke",
        total_steps=2,
        seeds=(0, 1),
        target=dataclasses.replace(_CPU_TARGET, num_problems=4),
        heldout=dataclasses.replace(_CPU_HELDOUT, num_problems=4),
        num_samples=4,
        max_new_tokens=4,
        sweep_taus=(1.5e-3,),
        sweep_problems=4,
        train_args="--num_train_samples 8 --per_device_train_batch_size 4 --max_completion_length 4",
        es_args="--population_size 2",
        grpo_args="--gradient_accumulation_steps 1",
        compositions=True,  # every stage still runs in the smoke check
        dynamics_eval_steps=1,
        dynamics_problems=4,
    )


def _paper_easy_plan() -> ReproductionPlan:
    """The paper's easy setting: Qwen2.5-1.5B-Instruct on GSM8K, 2 epochs of 64 prompts per update."""
    return ReproductionPlan(
        scale="paper-easy",
        model="Qwen/Qwen2.5-1.5B-Instruct",
        **_recipes("qwen2.5-1.5b-instruct_gsm8k"),
        total_steps=234,
        total_steps_source="the paper's: 2 epochs of GSM8K's 7,473 training problems at 64 prompts per update",
        seeds=(0, 1),
        target=TaskSpec("gsm8k", num_problems=1319),
        heldout=TaskSpec("math500", num_problems=500),
        max_new_tokens=2048,
        sweep_problems=1319,
        es_launcher="accelerate launch --config_file accelerate_configs/multi_gpu.yaml",
        grpo_launcher="accelerate launch --config_file accelerate_configs/deepspeed_zero2.yaml",
    )


def _paper_hard_plan() -> ReproductionPlan:
    """The paper's hard setting: DeepSeek-R1-Distill-Qwen-1.5B trained on DeepScaleR, evaluated on MATH-500, sampled
    rollouts up to 8,192 tokens; the easy setting's seeds, launchers and evaluation otherwise."""
    return dataclasses.replace(
        _paper_easy_plan(),
        scale="paper-hard",
        model="deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        **_recipes("deepseek-r1-distill-qwen-1.5b_deepscaler"),
        total_steps=200,
        total_steps_source=(
            "this library's choice, not the paper's (its hard-setting update count is not restated here): near the "
            "easy setting's 234, fewer because rollouts are 4x longer; pass --total_steps to match your budget"
        ),
        target=TaskSpec("math500", num_problems=500),
        heldout=TaskSpec("gsm8k", num_problems=1319),
        greedy=False,
        max_new_tokens=8192,
        sweep_problems=500,
    )


_BUILDERS = {"cpu": _cpu_plan, "smoke": _smoke_plan, "paper-easy": _paper_easy_plan, "paper-hard": _paper_hard_plan}
SCALES = tuple(_BUILDERS)


def get_plan(scale: str, **overrides: Any) -> ReproductionPlan:
    """The plan of a scale, with `overrides` of its fields (e.g. `model=...`, `total_steps=...`).

    Raises:
        ValueError: For an unknown scale or field.
    """
    if scale not in _BUILDERS:
        raise ValueError(f"Unknown scale {scale!r}; choose one of {list(_BUILDERS)}.")
    fields = {f.name for f in dataclasses.fields(ReproductionPlan)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"Unknown plan field(s) {unknown}; the plan has {sorted(fields)}.")
    overrides = {key: value for key, value in overrides.items() if value is not None}
    if "total_steps" in overrides:
        overrides.setdefault("total_steps_source", "set on the command line")
    return dataclasses.replace(_BUILDERS[scale](), **overrides)
