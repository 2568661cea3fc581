"""`report.md` and `figures/` of a reproduction: setting and matched budgets, coverage (Pass@K, Maj@K, greedy) on the
rewarded and the held-out task, parameter drift of ES vs GRPO, and the magnitude-threshold sweep, each next to the
paper's reference numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._io import write_text_atomic
from ..analysis import DriftReport
from ..analysis import plots as drift_plots
from ..metrics.bootstrap import NO_DIFFERENCE
from .plan import PAPER_REFERENCE, ReproductionPlan
from .plots import plot_pareto_spread, plot_profile_spread, plot_training_dynamics
from .results import DYNAMICS, MethodResults, Spread, collect, load_drift, load_dynamics, load_sweep

__all__ = ["BOOTSTRAP", "SECTIONS", "VERDICTS", "build_report"]

#: Headings every report has, in order (a missing input leaves its section with a note, never without the heading).
SECTIONS = (
    "## Setting and budgets",
    "## Task choice",
    "## Coverage on the rewarded task",
    "## Forgetting: the held-out task",
    "## Training dynamics",
    "## Parameter drift",
    "## Magnitude-threshold sweep",
    "## Next to the paper",
)

#: Task choice rule of the issue: the base must be neither at floor nor at ceiling on the rewarded task.
TASK_WINDOW = {"pass@1": (0.10, 0.60), "pass@max": 0.95}


def _budget_rows(methods: dict[str, MethodResults]) -> list[str]:
    rows = ["| Method | Updates | Generated tokens (training) | Wall time (training, s) |", "|---|---|---|---|"]
    for method in methods.values():
        if method.key == "base":
            continue
        tokens = method.budget("generated_tokens")
        rows.append(
            f"| {method.label} | {method.budget('steps').fmt(1, 0)} | {tokens.fmt(1, 0)} "
            f"| {method.budget('wall_seconds').fmt(1, 0)} |"
        )
    return rows


def _coverage_rows(methods: dict[str, MethodResults], task: str, m: int) -> list[str]:
    ks = sorted({1, min(16, m), m})
    head = [f"Pass@{k}" for k in ks] + [f"Maj@{k}" for k in ks if k > 1] + ["Greedy"]
    rows = ["| Method | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for method in methods.values():
        cells = [method.metric(task, "pass@k", k).fmt() for k in ks]
        cells += [method.metric(task, "maj@k", k).fmt() for k in ks if k > 1]
        cells.append(method.metric(task, "greedy_accuracy").fmt())
        rows.append(f"| {method.label} | " + " | ".join(cells) + " |")
    return rows


def _sample_entropy_line(methods: dict[str, MethodResults], task: str) -> str:
    """The mean token entropy of each checkpoint's M samples, labelled exact or as the engine's top-k lower bound."""
    cells, labels = [], set()
    for method in methods.values():
        summaries = method.summaries.get(task, [])
        exact = Spread.of([summary.get("mean_token_entropy") for summary in summaries])
        bound = Spread.of([summary.get("mean_token_entropy_lower_bound") for summary in summaries])
        if exact.values and not bound.values:
            cells.append(f"{method.label} {exact.fmt(1, 3)}")
            labels.add("exact")
        elif bound.values and not exact.values:
            cells.append(f"{method.label} {bound.fmt(1, 3)}")
            ks = {summary.get("entropy_top_k") for summary in summaries}
            labels.add(f"lower bound from the engine's top-{'/'.join(map(str, sorted(ks)))} log-probabilities")
    if not cells:
        return "Token entropy of the samples: not recorded."
    return f"Token entropy of the M samples (nats per token, {'; '.join(sorted(labels))}): {', '.join(cells)}."


def _dynamics_section(root: Path, plan: ReproductionPlan, figures: Path) -> list[str]:
    dynamics = load_dynamics(root, plan.seeds)
    if not dynamics:
        if not plan.dynamics_eval_steps:
            return ["This plan does not evaluate during training (`dynamics_eval_steps` = 0)."]
        return ["No training run has finished yet."]

    def ends(method: str, key: str, scale: float, digits: int) -> str:
        curve = dynamics.get(method, {}).get(key)
        if not curve:
            return "n/a"
        first, last = min(curve), max(curve)
        return f"{curve[first].fmt(scale, digits)} (update {first}) → {curve[last].fmt(scale, digits)} (update {last})"

    rows = [
        "| Method | Centre token entropy (nats) | Centre greedy accuracy (%) | Coverage of the step's samples (%) |",
        "|---|---|---|---|",
    ]
    for method, label, coverage in (("es", "ES", "population/coverage"), ("grpo", "GRPO", "group/coverage")):
        rows.append(
            f"| {label} | {ends(method, 'eval_entropy', 1, 3)} | {ends(method, 'eval_reward', 100, 1)} "
            f"| {ends(method, coverage, 100, 1)} |"
        )
    figure = plot_training_dynamics(dynamics, figures / "training_dynamics.png")
    return [
        f"Every {'' if plan.dynamics_eval_steps == 1 else f'{plan.dynamics_eval_steps} '}update"
        f"{'' if plan.dynamics_eval_steps == 1 else 's'} (and before the first) each run evaluated its current "
        f"weights (ES: the centre) greedily on {plan.dynamics_problems} problems of the rewarded task's evaluation split (operand "
        "pairs training never draws), drawn with the run's seed: the ES and GRPO runs of one seed start from the same "
        "numbers. Series: "
        + "; ".join(f"`{key}`: {text}" for key, text in DYNAMICS.items())
        + ". ES's members are greedy and GRPO's samples are drawn at its training temperature, so the two coverage "
        "series measure their own populations, not one quantity. Mean [min–max] over the seeds; descriptive, no "
        "verdict is drawn from these curves (one evaluation of few problems per point, no interval).",
        "",
        *rows,
        "",
        f"![training dynamics](figures/{figure.name})",
    ]


def _task_choice(plan: ReproductionPlan, base: MethodResults) -> list[str]:
    pass1, pass_m = base.metric("target", "pass@k", 1).mean, base.metric("target", "pass@k", plan.num_samples).mean
    if pass1 is None or pass_m is None:
        return ["The base model has not been evaluated yet."]
    low, high = TASK_WINDOW["pass@1"]
    inside = low <= pass1 <= high and pass_m < TASK_WINDOW["pass@max"]
    verdict = "inside" if inside else "OUTSIDE"
    return [
        f"Base model on the rewarded task's held-out problems: Pass@1 = {100 * pass1:.1f}%, "
        f"Pass@{plan.num_samples} = {100 * pass_m:.1f}%. The rule (Pass@1 in {100 * low:.0f}–{100 * high:.0f}%, "
        f"Pass@{plan.num_samples} below {100 * TASK_WINDOW['pass@max']:.0f}%: neither floor nor ceiling, so that "
        f"both Pass@1 and coverage can move) is **{verdict}** this window"
        + ("." if inside else ": read the comparison with that in mind.")
    ]


def _drift_section(drift: dict[str, dict[str, Any]], plan: ReproductionPlan, figures: Path) -> list[str]:
    if not drift:
        return ["No drift report yet."]
    reports = {name: DriftReport.from_dict(data) for name, data in drift.items()}
    rows = [
        f"| Seed | ES rel. L2 | GRPO rel. L2 | ES/GRPO ratio | ES s_τ (τ={plan.tau:g}) | GRPO s_τ | ES unchanged "
        "| ES top-144 by module type | GRPO top-144 by module type |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for seed in plan.seeds:
        es, grpo = reports.get(f"es_s{seed}"), reports.get(f"grpo_s{seed}")
        if es is None or grpo is None:
            continue
        ratio = es.relative_l2 / grpo.relative_l2 if grpo.relative_l2 > 0 else None
        ratios.append(ratio)
        rows.append(
            f"| {seed} | {es.relative_l2:.3e} | {grpo.relative_l2:.3e} | "
            f"{'n/a' if ratio is None else f'{ratio:.1f}×'} | {100 * es.sparsity_at(plan.tau):.1f}% | "
            f"{100 * grpo.sparsity_at(plan.tau):.1f}% | {100 * es.fraction_unchanged:.2f}% | "
            f"{_top_types(es)} | {_top_types(grpo)} |"
        )
    first = plan.seeds[0]
    labelled = {f"{name.split('_s')[0].upper()} seed {name.split('_s')[1]}": r for name, r in reports.items()}
    figure = drift_plots.plot_module_type_distance(labelled, figures / "drift_by_module_type.png")
    lines = rows + ["", f"ES/GRPO relative-L2 ratio over seeds: {Spread.of(ratios).fmt(1, 1)}×.", ""]
    if f"es_s{first}" in reports:
        lines += [f"### ES seed {first} against the base", "", reports[f"es_s{first}"].to_markdown(top_k=5)]
    if f"grpo_s{first}" in reports:
        lines += [f"### GRPO seed {first} against the base", "", reports[f"grpo_s{first}"].to_markdown(top_k=5)]
    return lines + [f"![drift by module type](figures/{figure.name})"]


def _top_types(report: DriftReport) -> str:
    counts = report.top_k_by_module_type.get(max(report.top_k_by_module_type, default=0), {})
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{kind} {count}" for kind, count in ranked) or "n/a"


def _sweep_section(root: Path, figures: Path, plan: ReproductionPlan, base: MethodResults) -> list[str]:
    sweep = load_sweep(root)
    if sweep is None:
        return ["The threshold sweep has not run yet."]
    run, rows = sweep
    lines = [
        f"Every coordinate of `{run}` whose update |Δθ| ≤ τ is reset to the base, and the result is evaluated on "
        f"{plan.sweep_problems} target problems (M={plan.num_samples}, T={plan.temperature}).",
        "",
        f"| τ | Update sparsity s_τ | Target Pass@1 | Target Pass@{plan.num_samples} |",
        "|---|---|---|---|",
    ]
    for row in rows:
        metrics = row.get("metrics", {})
        lines.append(
            f"| {row['tau']:g} | {100 * row['update_sparsity']:.1f}% | {100 * row['accuracy']:.1f}% | "
            f"{100 * metrics.get(f'pass@{plan.num_samples}', float('nan')):.1f}% |"
        )
    # The base model's evaluation is the end point of the sweep (every update reset) when it scored the same problems.
    baseline = base.metric("target", "pass@k", 1).mean if plan.sweep_problems == plan.target.num_problems else None
    if baseline is not None:
        base_pass_m = base.metric("target", "pass@k", plan.num_samples).mean
        lines.append(f"| base (every update reset) | 100.0% | {100 * baseline:.1f}% | {100 * base_pass_m:.1f}% |")
    figure = drift_plots.plot_threshold_sweep(
        rows, figures / "threshold_sweep.png", ylabel="target Pass@1", baseline=baseline
    )
    return lines + ["", f"![threshold sweep](figures/{figure.name})"]


def _paper_section(methods: dict[str, MethodResults], drift: dict[str, Any], plan: ReproductionPlan) -> list[str]:
    ref, m = PAPER_REFERENCE, plan.num_samples
    k_mid = min(16, m)
    lines = [
        f"Paper: {ref['setting']}. Here: `{plan.model}`, {plan.target.describe()}, {plan.total_steps} updates.",
        "",
        f"| Method | Paper Pass@1/16/32 | Here Pass@1/{k_mid}/{m} (mean over seeds) |",
        "|---|---|---|",
    ]
    for key in ("base", "grpo", "es"):
        here = "/".join(
            "n/a" if (v := methods[key].metric("target", "pass@k", k).mean) is None else f"{100 * v:.1f}"
            for k in (1, k_mid, m)
        )
        lines.append(f"| {methods[key].label} | {'/'.join(f'{v:.1f}' for v in ref['pass_at_k'][key])} | {here} |")
    ratios = [
        drift[f"es_s{s}"]["relative_l2"] / drift[f"grpo_s{s}"]["relative_l2"]
        for s in plan.seeds
        if f"es_s{s}" in drift and f"grpo_s{s}" in drift and drift[f"grpo_s{s}"]["relative_l2"]
    ]
    sparsity = [
        DriftReport.from_dict(drift[f"es_s{s}"]).sparsity_at(plan.tau) for s in plan.seeds if f"es_s{s}" in drift
    ]
    low, high = ref["drift_ratio"]
    s_low, s_high = ref["sparsity_at_tau"]
    lines += [
        "",
        f"- ES/GRPO relative-L2 ratio: paper {low}–{high}×, here {Spread.of(ratios).fmt(1, 1)}×.",
        f"- ES nonzero updates with |Δθ| ≤ τ={ref['tau']:g}: paper {s_low}–{s_high}%, here "
        f"{Spread.of(sparsity).fmt(100, 1)}%.",
        "",
        "The paper's comparisons, judged by the paired bootstrap interval of each difference (rewarded task unless "
        "named): an interval above 0 agrees with the paper, below 0 disagrees, and one that holds 0 is no difference "
        f"measured. One problem is {100 / plan.target.num_problems:.1f} points of the rewarded task and "
        f"{100 / plan.heldout.num_problems:.1f} of the held-out one.",
        "",
        *_claims(methods, m),
    ]
    return lines


#: The paired bootstrap behind every comparison (seeded: the same results give the same report).
BOOTSTRAP = {"n_boot": 10_000, "confidence": 0.95, "seed": 0}

#: Verdict words of a claim, from its interval: above 0 / below 0 / holding 0.
VERDICTS = ("agrees with the paper", "disagrees with the paper", NO_DIFFERENCE)


def _difference_rows(methods: dict[str, MethodResults], task: str, m: int) -> list[str]:
    """Each trained method minus the base at Pass@1 and Pass@`m`, in points, with the 95% interval."""
    ks = sorted({1, m})
    rows = ["| Method − Base | " + " | ".join(f"Pass@{k}" for k in ks) + " |", "|---" * (len(ks) + 1) + "|"]
    base = methods["base"]
    for method in methods.values():
        if method.key == "base" or not method.summaries.get(task):
            continue
        cells = []
        for k in ks:
            difference = method.difference(base, task, k, **BOOTSTRAP)
            cells.append("n/a" if difference is None else _interval_cell(difference))
        rows.append(f"| {method.label} | " + " | ".join(cells) + " |")
    return rows


def _interval_cell(difference: Any) -> str:
    # an interval holding 0 is written as such, so no table cell reads as a measured difference
    text = difference.fmt()
    return text if difference.excludes_zero else f"{text} (no difference measured)"


def _interval_note(methods: dict[str, MethodResults], task: str) -> str:
    counts = {len(method.entries.get(task, [])) for method in methods.values() if method.key != "base"}
    seeds = f" and over each method's {max(counts)} training seeds" if counts and max(counts) > 1 else ""
    return (
        f"Differences in points with their {100 * BOOTSTRAP['confidence']:g}% paired bootstrap interval over the "
        f"problems{seeds} ({BOOTSTRAP['n_boot']} resamples, seed {BOOTSTRAP['seed']}); an interval that holds 0 is "
        "no difference measured."
    )


def _claims(methods: dict[str, MethodResults], m: int) -> list[str]:
    """One line per claim of the paper, its verdict generated from the paired bootstrap interval of the difference:
    above 0 agrees, below 0 disagrees, and an interval holding 0 is "no difference measured" (never a verdict)."""
    # (claim, first, second, task, K): each claim says "first - second > 0"; for "keeps" / "no more than" claims
    # (first not worse than second) an interval holding 0 measures nothing either way, so it decides nothing.
    claims = [
        ("GRPO wins Pass@1 over ES", "grpo", "es", "target", 1),
        (f"ES keeps more coverage than GRPO (Pass@{m})", "es", "grpo", "target", m),
        (f"ES keeps the base model's coverage (Pass@{m})", "es", "base", "target", m),
        (f"GRPO keeps the base model's coverage (Pass@{m})", "grpo", "base", "target", m),
        (f"ES forgets no more than GRPO on the held-out task (Pass@{m})", "es", "grpo", "heldout", m),
    ]
    lines = []
    for claim, first, second, task, k in claims:
        a, b = (methods[key].metric(task, "pass@k", k) for key in (first, second))
        if a.mean is None or b.mean is None:
            lines.append(f"- {claim}: not measured yet.")
            continue
        means = f"{methods[first].label} {100 * a.mean:.1f} vs {methods[second].label} {100 * b.mean:.1f}"
        difference = methods[first].difference(methods[second], task, k, **BOOTSTRAP)
        if difference is None:
            lines.append(
                f"- {claim}: **not decided** — {means} ({100 * (a.mean - b.mean):+.1f} points; no per-problem "
                "results, so no interval)."
            )
            continue
        lines.append(
            f"- {claim}: **{difference.verdict(*VERDICTS[:2])}** — {means}, difference {difference.fmt()} points "
            f"({difference.describe()})."
        )
    return lines


def build_report(root: str | Path, plan: ReproductionPlan | None = None) -> Path:
    """Writes `root/report.md` and `root/figures/*.png` from whatever stages have finished.

    Args:
        root: The reproduction's output folder (see `hf_es.reproduce.pipeline`).
        plan: Its plan (default: read from `root/plan.json`).

    Returns:
        The report's path.
    """
    root = Path(root)
    if plan is None:
        data = json.loads((root / "plan.json").read_text())
        plan = ReproductionPlan(**{**data, **_plan_tuples(data)})
    figures = root / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    methods = collect(root, plan.seeds, plan.methods)
    drift = load_drift(root, plan.seeds)
    m = plan.num_samples
    lines = [
        f"# Reproduction of the ES vs GRPO comparison ({plan.scale} scale)",
        "",
        SECTIONS[0],
        "",
        f"Model `{plan.model}`. Rewarded task: {plan.target.describe()}. Held-out task (never rewarded): "
        f"{plan.heldout.describe()}. Training seeds: {', '.join(map(str, plan.seeds))}. Every trained checkpoint "
        f"gets {plan.total_steps} updates ({plan.total_steps_source or 'as configured'}; "
        + (
            f"compositions: {plan.half_steps} + {plan.total_steps - plan.half_steps}; their first stage is the "
            "same-seed run's half-way checkpoint, whose tokens and wall time are counted pro rata). "
            if plan.compositions
            else "the compositions ES→GRPO and GRPO→ES are not part of this plan). "
        )
        + "Recipes: `"
        + Path(plan.es_recipe).name
        + "`, `"
        + Path(plan.grpo_recipe).name
        + "`. "
        f"Evaluation: M={m} samples per problem at T={plan.temperature}, up to {plan.max_new_tokens} new tokens, "
        "greedy decoding once per problem. Values are mean [min–max] over seeds, in % (budgets in units).",
        "",
        *_budget_rows(methods),
        "",
        SECTIONS[1],
        "",
        *_task_choice(plan, methods["base"]),
        "",
        SECTIONS[2],
        "",
        *_coverage_rows(methods, "target", m),
        "",
        _interval_note(methods, "target"),
        "",
        *_difference_rows(methods, "target", m),
        "",
        _sample_entropy_line(methods, "target"),
        "",
        f"![Pass@K profile]({_figure(plot_profile_spread, methods, 'target', figures / 'pass_at_k_target.png')})",
        f"![Pareto]({_figure(plot_pareto_spread, methods, 'target', m, figures / 'pareto_target.png')})",
        "",
        SECTIONS[3],
        "",
        *_coverage_rows(methods, "heldout", m),
        "",
        _interval_note(methods, "heldout"),
        "",
        *_difference_rows(methods, "heldout", m),
        "",
        f"![Pass@K held-out]({_figure(plot_profile_spread, methods, 'heldout', figures / 'pass_at_k_heldout.png')})",
        "",
        SECTIONS[4],
        "",
        *_dynamics_section(root, plan, figures),
        "",
        SECTIONS[5],
        "",
        *_drift_section(drift, plan, figures),
        "",
        SECTIONS[6],
        "",
        *_sweep_section(root, figures, plan, methods["base"]),
        "",
        SECTIONS[7],
        "",
        *_paper_section(methods, drift, plan),
        "",
    ]
    return write_text_atomic(root / "report.md", "\n".join(lines))


def _figure(plot: Any, methods: dict[str, MethodResults], *args: Any) -> str:
    if not any(method.summaries.get(args[0]) for method in methods.values()):
        return "figures/(not drawn: no evaluation yet)"
    return f"figures/{plot(methods, *args).name}"


def _plan_tuples(data: dict[str, Any]) -> dict[str, Any]:
    from .plan import TaskSpec

    return {
        "seeds": tuple(data["seeds"]),
        "sweep_taus": tuple(data["sweep_taus"]),
        "target": TaskSpec(**data["target"]),
        "heldout": TaskSpec(**data["heldout"]),
    }
