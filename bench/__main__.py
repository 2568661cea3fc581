"""`python -m bench`: every benchmark in one run; writes bench/results/<date>-<host>.json and a Markdown table.

Ratios are measured side by side in this one run (A B A B interleaving, median and spread), never as timed tests.
Not part of the CI test run. Use a quiet machine: other load skews CPU timings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from datetime import date

from . import es_step, low_rank, memory, noise, peft, scaling


def _machine() -> str:
    import torch

    if torch.cuda.is_available():
        return f"{platform.node()}: {torch.cuda.get_device_name()}"
    return f"{platform.node()}: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores"


def _low_rank_rows(low: dict) -> list[tuple[str, str, str, str]]:
    shape = "N={population_size}, B={batch_size}, {max_completion_length} tokens, r={perturbation_rank}".format(
        **low["settings"]
    )
    return [
        (
            f"low-rank ES step (one batch) / generation-only, same N x B ({shape})",
            f"{low['low_rank_over_generation']:.3f}",
            f"{low['low_rank_over_generation_spread'][0]:.3f}-{low['low_rank_over_generation_spread'][1]:.3f}",
            "<= 1.10 (CPU)",
        ),
        (
            f"steps/s, low-rank batched / full-rank sequential ({shape})",
            f"{low['low_rank_speedup']:.2f}x",
            f"{low['low_rank_speedup_spread'][0]:.2f}-{low['low_rank_speedup_spread'][1]:.2f}",
            ">= 1.4x (CPU)",
        ),
    ]


def markdown(result: dict) -> str:
    es, mem, scale, noise_path = result["es_step"], result["memory"], result["scaling"], result["noise"]
    gib = 1 << 30
    rows = [
        (
            "ES step / generation-only (N=8, B=16)",
            f"{result['es_over_generation']:.3f}",
            f"{es['es_over_generation_spread'][0]:.3f}-{es['es_over_generation_spread'][1]:.3f}",
            "<= 1.15 (CPU)",
        ),
        (
            "ES peak / (inference peak + fp32 master)",
            f"{result['es_peak_over_inference']:.3f}",
            f"ES {min(mem['peak_bytes']['es']) / gib:.2f}-{max(mem['peak_bytes']['es']) / gib:.2f} GiB, inference "
            f"{min(mem['peak_bytes']['inference']) / gib:.2f}-{max(mem['peak_bytes']['inference']) / gib:.2f} GiB",
            "<= 1.05",
        ),
        (
            "ES peak / GRPO peak",
            f"{result['es_peak_over_grpo']:.3f}",
            f"GRPO {min(mem['peak_bytes']['grpo']) / gib:.2f}-{max(mem['peak_bytes']['grpo']) / gib:.2f} GiB",
            "<= 0.5",
        ),
        (
            "steps/s, 2 processes / 1 process",
            f"{result['two_process_scaling']:.3f}",
            f"{scale['two_process_scaling_spread'][0]:.3f}-{scale['two_process_scaling_spread'][1]:.3f}",
            "-",
        ),
        (
            "bytes all-reduced per step",
            f"{scale['bytes_per_step']}",
            f"same for a {scale['num_parameters_tiny_model']:,}-parameter model: {scale['bytes_per_step_tiny_model']}",
            "O(N)",
        ),
    ]
    for noise_type, t in noise_path["noise_path_s"].items():
        rows.append(
            (
                f"noise '{noise_type}': perturb / restore / update(N=8), s",
                f"{t['perturb']:.3f} / {t['restore']:.3f} / {t['update']:.3f}",
                f"{t['per_step']:.2f} s per step",
                "-",
            )
        )
    if "peft" in result:
        rows += peft.markdown_rows(result["peft"])
    if "low_rank" in result:
        rows += _low_rank_rows(result["low_rank"])
    lines = [
        f"Machine: {result['machine']}, {result['date']}. Model: SmolLM2-135M-Instruct, bf16.",
        "",
        "| measure | value | spread / detail | target |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["es_step", "memory", "scaling", "noise", "peft", "low_rank"]
    )
    args = parser.parse_args()
    result: dict = {"machine": _machine(), "date": date.today().isoformat()}
    if "es_step" not in args.skip:
        result["es_step"] = es_step.run(repeats=args.repeats)
        result["es_over_generation"] = result["es_step"]["es_over_generation"]
        print(f"es_over_generation {result['es_over_generation']:.3f}", flush=True)
    if "noise" not in args.skip:
        result["noise"] = noise.run(repeats=args.repeats)
        print(f"noise {json.dumps(result['noise']['noise_path_s'])}", flush=True)
    if "peft" not in args.skip:
        result["peft"] = peft.run(repeats=max(args.repeats, 5))
        print(f"peft full_over {json.dumps(result['peft']['full_over'])}", flush=True)
    if "memory" not in args.skip:
        result["memory"] = memory.run(repeats=args.repeats)
        result["es_peak_over_inference"] = result["memory"]["es_peak_over_inference"]
        result["es_peak_over_grpo"] = result["memory"]["es_peak_over_grpo"]
        print(
            f"es_peak_over_inference {result['es_peak_over_inference']:.3f} "
            f"es_peak_over_grpo {result['es_peak_over_grpo']:.3f}",
            flush=True,
        )
    if "scaling" not in args.skip:
        result["scaling"] = scaling.run(repeats=args.repeats)
        result["two_process_scaling"] = result["scaling"]["two_process_scaling"]
        print(f"two_process_scaling {result['two_process_scaling']:.3f}", flush=True)
    if "low_rank" not in args.skip:
        result["low_rank"] = low_rank.run(repeats=args.repeats)
        print(
            f"low_rank_over_generation {result['low_rank']['low_rank_over_generation']:.3f} "
            f"low_rank_speedup {result['low_rank']['low_rank_speedup']:.2f}",
            flush=True,
        )
    stem = os.path.join(os.path.dirname(__file__), "results", f"{result['date']}-{platform.node()}")
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    with open(stem + ".json", "w") as f:
        json.dump(result, f, indent=2)
    if not args.skip:
        table = markdown(result)
        with open(stem + ".md", "w") as f:
            f.write(table + "\n")
        print(table)
    print(f"wrote {stem}.json")


if __name__ == "__main__":
    main()
