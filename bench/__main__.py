"""`python -m bench`: every benchmark in one run, each target compared; exits 1 when one is missed.

Writes bench/results/<date>-<host>.json (measures and verdicts) and, for a full run, the Markdown tables. Ratios are
measured side by side in this one run (A B A B interleaving, median and spread), never as timed tests. Not part of
the CI test run. Use a quiet machine: other load skews CPU timings. `--report-only` prints the same verdicts and
exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from dataclasses import asdict
from datetime import date
from types import ModuleType

from . import es_step, latency, low_rank, memory, noise, peft, reward_model, scaling
from .targets import compare, exit_status
from .targets import markdown as verdict_table

GIB = 1 << 30

# Run order; each module has `run(...)` and `TARGETS`.
BENCHES: dict[str, ModuleType] = {
    "es_step": es_step,
    "noise": noise,
    "peft": peft,
    "memory": memory,
    "scaling": scaling,
    "low_rank": low_rank,
    "latency": latency,
    "reward_model": reward_model,
}


def _run(name: str, repeats: int) -> dict:
    if name == "latency":
        return latency.run()  # bounds measured once, not ratios
    if name == "peft":
        return peft.run(repeats=max(repeats, 5))
    return BENCHES[name].run(repeats=repeats)


def _on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def _machine() -> str:
    import torch

    if torch.cuda.is_available():
        return f"{platform.node()}: {torch.cuda.get_device_name()}"
    return f"{platform.node()}: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores"


def _spread(values: list[float], fmt: str = ".3f") -> str:
    return f"{values[0]:{fmt}}-{values[1]:{fmt}}"


def _es_step_rows(es: dict) -> list[tuple[str, str, str]]:
    shape = "N={population_size}, B={batch_size}".format(**es["settings"])
    return [
        (
            f"ES step / generation-only ({shape})",
            f"{es['es_over_generation']:.3f}",
            _spread(es["es_over_generation_spread"]),
        )
    ]


def _memory_rows(mem: dict) -> list[tuple[str, str, str]]:
    peaks = {mode: f"{min(v) / GIB:.2f}-{max(v) / GIB:.2f} GiB" for mode, v in mem["peak_bytes"].items()}
    return [
        (
            "ES peak / (inference peak + fp32 master)",
            f"{mem['es_peak_over_inference']:.3f}",
            f"ES {peaks['es']}, inference {peaks['inference']}",
        ),
        ("ES peak / GRPO peak", f"{mem['es_peak_over_grpo']:.3f}", f"GRPO {peaks['grpo']}"),
    ]


def _scaling_rows(scale: dict) -> list[tuple[str, str, str]]:
    return [
        (
            "steps/s, 2 processes / 1 process",
            f"{scale['two_process_scaling']:.3f}",
            _spread(scale["two_process_scaling_spread"]),
        ),
        (
            "bytes all-reduced per step",
            f"{scale['bytes_per_step']}",
            f"same for a {scale['num_parameters_tiny_model']:,}-parameter model: {scale['bytes_per_step_tiny_model']}",
        ),
    ]


def _noise_rows(noise_path: dict) -> list[tuple[str, str, str]]:
    return [
        (
            f"noise '{noise_type}': perturb / restore / update(N=8), s",
            f"{t['perturb']:.3f} / {t['restore']:.3f} / {t['update']:.3f}",
            f"{t['per_step']:.2f} s per step",
        )
        for noise_type, t in noise_path["noise_path_s"].items()
    ]


def _low_rank_rows(low: dict) -> list[tuple[str, str, str]]:
    shape = "N={population_size}, B={batch_size}, {max_completion_length} tokens, r={perturbation_rank}".format(
        **low["settings"]
    )
    return [
        (
            f"low-rank ES step (one batch) / generation-only, same N x B ({shape})",
            f"{low['low_rank_over_generation']:.3f}",
            _spread(low["low_rank_over_generation_spread"]),
        ),
        (
            f"steps/s, low-rank batched / full-rank sequential ({shape})",
            f"{low['low_rank_speedup']:.2f}x",
            _spread(low["low_rank_speedup_spread"], ".2f"),
        ),
    ]


ROWS = {
    "es_step": _es_step_rows,
    "noise": _noise_rows,
    "peft": peft.markdown_rows,
    "memory": _memory_rows,
    "scaling": _scaling_rows,
    "low_rank": _low_rank_rows,
}  # latency: its measures are the verdict table's values


def markdown(result: dict) -> str:
    """The measures of every benchmark that ran (the verdicts are a table of their own)."""
    rows = [row for name, row_fn in ROWS.items() if name in result for row in row_fn(result[name])]
    lines = [f"Machine: {result['machine']}, {result['date']}. Model: SmolLM2-135M-Instruct, bf16."]
    if rows:
        lines += ["", "| measure | value | spread / detail |", "| --- | --- | --- |"]
        lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip", nargs="*", default=[], choices=list(BENCHES))
    parser.add_argument("--only", nargs="*", default=None, choices=list(BENCHES), help="Run only these benchmarks.")
    parser.add_argument("--report-only", action="store_true", help="Compare and report, but exit 0 when one misses.")
    parser.add_argument("--output_dir", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args(argv)
    names = [n for n in BENCHES if n not in args.skip and (args.only is None or n in args.only)]
    result: dict = {"machine": _machine(), "date": date.today().isoformat()}
    on_cpu = _on_cpu()
    verdicts = []
    for name in names:
        result[name] = _run(name, args.repeats)
        found = compare(name, BENCHES[name].TARGETS, result[name], on_cpu)
        verdicts += found
        print(f"{name}: " + ", ".join(f"{v.target.key} {v.value:.4g} ({v.label})" for v in found), flush=True)
    result["verdicts"] = [
        {**asdict(v.target), "bench": v.bench, "value": v.value, "ratio": v.ratio, "met": v.met} for v in verdicts
    ]
    stem = os.path.join(args.output_dir, f"{result['date']}-{platform.node()}")
    os.makedirs(args.output_dir, exist_ok=True)
    with open(stem + ".json", "w") as f:
        json.dump(result, f, indent=2)
    tables = markdown(result) + "\n\n" + verdict_table(verdicts)
    if len(names) == len(BENCHES):  # the published table: a full run only
        with open(stem + ".md", "w") as f:
            f.write(tables + "\n")
    print(tables)
    print(f"wrote {stem}.json")
    status = exit_status(verdicts, args.report_only)
    missed = [v for v in verdicts if v.met is False]
    if missed:
        print(f"{len(missed)} target(s) missed" + (" (--report-only: exit 0)" if args.report_only else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
