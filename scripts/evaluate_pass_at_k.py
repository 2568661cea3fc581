#!/usr/bin/env python
# Copyright 2026 The hf_es Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
"""Pass@K / Maj@K evaluation of one or more checkpoints on any registered task or a local JSONL file.

For every checkpoint and problem, samples M completions, scores each with the task's verifier and writes
`<output_dir>/results.json` (per-problem correctness, Pass@K for K = 1..M, Maj@K, greedy accuracy, all as fractions
of problems in [0, 1]), `pass_at_k.png` and `pareto.png`. Given several checkpoints, each later one is compared with
the first at Pass@1, Pass@M and greedy accuracy: the difference with its 95% paired bootstrap interval over problems
(`comparisons` in the JSON; an interval holding 0 is logged as "no difference measured"). Re-running with the same --output_dir resumes; the library
is `hf_es.evaluation`.

examples:
  python scripts/evaluate_pass_at_k.py --model outputs/smollm2-es-arithmetic HuggingFaceTB/SmolLM2-135M-Instruct \\
      --dataset arithmetic --max_problems 128 -M 8 --max_new_tokens 10 --greedy --output_dir outputs/eval_arith
  python scripts/evaluate_pass_at_k.py --model Qwen/Qwen2.5-1.5B-Instruct --dataset gsm8k --greedy \\
      --output_dir outputs/eval_gsm8k
"""

from __future__ import annotations

import argparse
import logging
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Make `hf_es` importable when the script is run from a source checkout without installing the package.
_REPO_ROOT = Path(__file__).resolve().parent.parent
if (_REPO_ROOT / "hf_es").is_dir() and str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))

from hf_es.cli import SimpleArgumentParser, closest_name  # noqa: E402
from hf_es.evaluation import (  # noqa: E402
    PassAtKConfig,
    evaluate_checkpoints,
    is_local_file,
    load_problems,
    load_results,
    plot_results,
    save_results,
    summary_line,
)
from hf_es.evaluation.uncertainty import compare_checkpoints  # noqa: E402
from hf_es.generation import BACKENDS  # noqa: E402
from hf_es.tasks import TASKS, TaskArguments, get_task, is_registered  # noqa: E402

logger = logging.getLogger("evaluate_pass_at_k")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (defaults shown in `--help`)."""
    parser = SimpleArgumentParser(
        description=__doc__.split("\n\nexamples:")[0], epilog="examples:" + __doc__.split("examples:")[1]
    )
    add = parser.add_argument
    add("--model", nargs="+", required=True, help="Checkpoints: local folders or Hub ids.")
    add("--dataset", required=True, help=f"A registered task ({', '.join(sorted(TASKS))}) or a local .jsonl file.")
    add("--split", default="test", help="Split of a registered task (ignored for local files).")
    add("--max_problems", type=int, default=None, help="Evaluate the first N problems (generated tasks: N problems).")
    add("--data_seed", type=int, default=0, help="Seed of the task's problems: the recipe's `seed`.")
    add("--task_option", action="append", default=[], metavar="FIELD=VALUE",
        help="Generator parameter of the task as in the recipe, e.g. arithmetic_operation=add (repeatable).")  # fmt: skip
    add("--system_prompt", default=None, help="Overrides the task's system prompt ('' removes it).")
    add("--reward", default=None, help="Verifier name or package.module:function (default: the task's reward).")
    add("--correct_threshold", type=float, default=1.0, help="A sample is correct when its reward is >= this.")
    add("--num_samples", "-M", type=int, default=32, help="Samples per problem (M).")
    add("--temperature", type=float, default=0.6, help="Sampling temperature of the M samples.")
    add("--top_p", type=float, default=1.0, help="Nucleus mass.")
    add("--top_k", type=int, default=0, help="Top-k (0 disables it).")
    add("--max_new_tokens", type=int, default=1024, help="Most new tokens per completion.")
    add("--greedy", action="store_true", help="Also decode greedily once per problem.")
    add("--maj", choices=("auto", "on", "off"), default="auto", help="Majority vote (auto: where the task allows).")
    add("--seed", type=int, default=0, help="Sampling seed.")
    add("--backend", choices=("auto", *sorted(BACKENDS)), default="auto", help="Engine (auto: vLLM with a GPU).")
    add("--batch_size", type=int, default=None,
        help="Most sequences per transformers `generate` call (default: what fits in free accelerator memory).")  # fmt: skip
    add("--dtype", default="auto", help="auto, bfloat16, float16 or float32.")
    add("--revision", default=None, help="Hub revision (applies to every Hub checkpoint).")
    add("--gpu_memory_utilization", type=float, default=0.85, help="vLLM only.")
    add("--save_completions", action="store_true", help="Store the completion texts in the JSON.")
    add("--output_dir", required=True, help="Where results.json and the plots go.")
    add("--overwrite", action="store_true", help="Discard stored results that disagree on settings.")
    add("--plot_only", action="store_true", help="Redraw the plots from the JSON; generate nothing.")
    add("--no_progress", action="store_true", help="Disable the progress bar.")
    return parser


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1


def _task_options(parser: argparse.ArgumentParser, dataset: str, pairs: list[str]) -> dict[str, Any]:
    """`FIELD=VALUE` pairs -> loader keywords of the task, checked against the task's generator parameters."""
    allowed = dict(get_task(dataset).options) if is_registered(dataset) else {}
    by_field = {field_name: keyword for keyword, field_name in allowed.items()}
    options: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in by_field:
            parser.error(
                f"--task_option {pair!r}: {dataset!r} takes {sorted(by_field) or 'no options'} (as FIELD=VALUE)."
            )
        # The recipe field's type (e.g. `arithmetic_held_out_fraction: float`), as in a recipe or on train_es.py.
        kind = typing.get_type_hints(TaskArguments).get(name)
        try:
            options[by_field[name]] = kind(value) if kind in (int, float) else value
        except ValueError:
            parser.error(f"--task_option {pair!r}: {name} takes a{'n integer' if kind is int else ' number'}.")
    return options


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, PassAtKConfig]:
    """Parses and checks the arguments; bad input exits with code 2 and one line naming the problem.

    Returns:
        The namespace and the [`~hf_es.evaluation.PassAtKConfig`] built from it.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if not is_local_file(args.dataset) and not is_registered(args.dataset):
        guess = closest_name(args.dataset, TASKS)
        hint = f" (did you mean {guess!r}?)" if guess else ""
        parser.error(f"unknown task {args.dataset!r}{hint}: use one of {sorted(TASKS)} or an existing .jsonl file.")
    if is_local_file(args.dataset) and not Path(args.dataset).is_file():
        parser.error(f"dataset file {args.dataset} does not exist.")
    missing = [name for name in args.model if _looks_like_path(name) and not Path(name).expanduser().exists()]
    if missing and not args.plot_only:
        parser.error(f"model folder {missing[0]} does not exist (a Hub id has the form org/name).")
    if args.num_samples < 1:
        parser.error("--num_samples must be >= 1.")
    if args.temperature <= 0 and args.num_samples > 1:
        parser.error("--temperature must be > 0 to draw several samples (use --greedy for greedy decoding).")
    config = PassAtKConfig(
        dataset=args.dataset,
        split=args.split,
        reward=args.reward,
        correct_threshold=args.correct_threshold,
        max_problems=args.max_problems,
        num_samples=args.num_samples,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        max_new_tokens=args.max_new_tokens,
        greedy=args.greedy,
        maj=args.maj,
        seed=args.seed,
        data_seed=args.data_seed,
        task_options=_task_options(parser, args.dataset, args.task_option),
        system_prompt=args.system_prompt,
        backend=args.backend,
        batch_size=args.batch_size,
        dtype=args.dtype,
        revision=args.revision,
        gpu_memory_utilization=args.gpu_memory_utilization,
        save_completions=args.save_completions,
        overwrite=args.overwrite,
        show_progress=not args.no_progress,
    )
    return args, config


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the evaluation, logs each checkpoint's summary (fractions of problems) and draws the plots.

    Returns:
        The results JSON.
    """
    args, config = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    results_path = output_dir / "results.json"
    results = load_results(results_path)
    if not args.plot_only:
        data = load_problems(
            config.dataset,
            config.split,
            config.max_problems,
            seed=config.data_seed,
            options=config.task_options,
            system_prompt=config.system_prompt,
        )
        evaluate_checkpoints(args.model, data, config, results, results_path)
        for name in args.model:
            summary = results["checkpoints"][name]["summary"]
            logger.info(
                "%s (%d problems): %s", name, summary["num_problems"], summary_line(summary, config.num_samples)
            )
    if len(args.model) > 1 and all(name in results["checkpoints"] for name in args.model):
        # Differences to the first checkpoint with their interval; one whose interval holds 0 is no difference.
        results["comparisons"] = compare_checkpoints(results, args.model, config.num_samples, seed=config.seed)
        for row in results["comparisons"]:
            logger.info(row["line"])
    else:
        results.pop("comparisons", None)  # a single checkpoint now: an earlier pair's comparison would be stale
    save_results(results, results_path)
    for path in plot_results(results, output_dir):
        logger.info("Wrote %s", path)
    return results


if __name__ == "__main__":
    main()
