#!/usr/bin/env python
"""Reproduce the paper's headline comparison end to end: base, ES, GRPO, ES->GRPO and GRPO->ES with the same number
of updates, Pass@K / Maj@K / greedy on a rewarded and a held-out task, parameter drift (ES vs GRPO), a
magnitude-threshold sweep, and `report.md` with its figures. Every stage is skipped when its output exists, so
re-running the same command resumes an interrupted run. The library is `hf_es.reproduce`.

examples:
  # the CPU scale: bundled SmolLM2-135M-Instruct, ES and GRPO x 3 seeds, under 3 hours on 2 cores
  OMP_NUM_THREADS=2 python scripts/reproduce_paper.py --scale cpu --output_dir runs/paper_cpu
  # every stage in a few minutes (2 updates, 4 problems, M=4), e.g. with a tiny model folder
  python scripts/reproduce_paper.py --smoke --output_dir /tmp/smoke --model path/to/tiny-model
  # the paper's GPU settings: write the commands (easy: Qwen2.5-1.5B-Instruct on GSM8K; hard: DeepSeek-R1-Distill-
  # Qwen-1.5B on DeepScaleR -> MATH-500), or run them on a GPU node with --execute
  python scripts/reproduce_paper.py --scale paper --setting easy --output_dir runs/paper_easy
  python scripts/reproduce_paper.py --scale paper --setting easy --execute --output_dir runs/paper_easy
  # rebuild report.md from whatever has finished
  python scripts/reproduce_paper.py --scale cpu --output_dir runs/paper_cpu --report_only
  # copy the report with everything it is built from (per-problem results, training logs; no weights) to share it
  python scripts/reproduce_paper.py --scale cpu --output_dir runs/paper_cpu --export docs/reproduce_cpu
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

# Make `hf_es` importable when the script is run from a source checkout without installing the package.
_REPO_ROOT = Path(__file__).resolve().parent.parent
if (_REPO_ROOT / "hf_es").is_dir() and str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))

from hf_es.cli import SimpleArgumentParser  # noqa: E402
from hf_es.recipes.compose import run_stage  # noqa: E402
from hf_es.reproduce import Pipeline, build_report, export_results, get_plan  # noqa: E402
from hf_es.reproduce.commands import plan_commands  # noqa: E402

logger = logging.getLogger("reproduce_paper")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (defaults shown in `--help`)."""
    parser = SimpleArgumentParser(
        prog="reproduce_paper.py",
        description=__doc__.split("\n\nexamples:")[0],
        epilog="examples:" + __doc__.split("examples:")[1],
    )
    add = parser.add_argument
    add("--scale", choices=("cpu", "paper"), default="cpu", help="cpu: SmolLM2 here; paper: the GPU settings.")
    add("--setting", choices=("easy", "hard"), default="easy", help="Paper setting (with --scale paper).")
    add("--smoke", action="store_true", help="2 updates per stage, 4 problems, M=4: exercises every stage.")
    add("--output_dir", required=True, help="Where every stage's output, report.md and figures/ go.")
    add("--model", default=None, help="Base model instead of the scale's (Hub id or local folder).")
    add("--total_steps", type=int, default=None, help="Updates per checkpoint instead of the scale's.")
    add("--seeds", type=int, nargs="+", default=None, help="Training seeds instead of the scale's.")
    add("--execute", action="store_true", help="With --scale paper: run the pipeline here (a GPU node).")
    add("--skip_training", action="store_true", help="Use checkpoints trained elsewhere under output_dir/train.")
    add("--report_only", action="store_true", help="Only rebuild report.md from the finished stages.")
    add("--export", default=None, metavar="DIR",
        help="Copy report.md, figures and the files they are built from (no weights) to DIR, then exit.")  # fmt: skip
    add("--no_progress", action="store_true", help="No progress bars (log lines only).")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.smoke and args.scale == "paper":
        parser.error("--smoke is a CPU-scale check; drop --scale paper")
    if args.total_steps is not None and args.total_steps < 2:
        parser.error(f"--total_steps must be >= 2 (a composition gives each stage half), got {args.total_steps}")
    if args.model and not Path(args.model).exists() and args.model.count("/") != 1:
        parser.error(f"--model {args.model}: no such folder, and not a Hub id of the form org/name")
    scale = "smoke" if args.smoke else ("cpu" if args.scale == "cpu" else f"paper-{args.setting}")
    overrides = {"model": args.model, "total_steps": args.total_steps}
    if args.seeds:
        overrides["seeds"] = tuple(args.seeds)
    plan = get_plan(scale, **overrides)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    output_dir = Path(args.output_dir)
    if args.scale == "paper" and not args.execute:
        output_dir.mkdir(parents=True, exist_ok=True)
        commands = plan_commands(plan, str(output_dir))
        path = output_dir / f"paper_{args.setting}_commands.sh"
        path.write_text(commands)
        print(commands)
        logger.info("Wrote %s", path)
        return 0
    if args.report_only:
        logger.info("Wrote %s", build_report(output_dir, plan))
        return 0
    if args.export:
        if not (output_dir / "plan.json").is_file():
            parser.error(f"--export: {output_dir} holds no reproduction (no plan.json); run it first")
        written = export_results(output_dir, Path(args.export))
        logger.info("Copied %d files to %s (rebuild with build_report: same report)", len(written), args.export)
        return 0
    pipeline = Pipeline(plan, output_dir, train_fn=None if args.skip_training else run_stage,
                        show_progress=not args.no_progress)  # fmt: skip
    try:
        pipeline.check_plan()
    except ValueError as error:  # output_dir holds a run of another plan
        parser.error(str(error))
    pipeline.run(report_fn=lambda root: build_report(root, plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
