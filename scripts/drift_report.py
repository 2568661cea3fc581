#!/usr/bin/env python
"""Parameter-drift report of a tuned checkpoint against its base (README, "Parameter drift and model cards").

Writes `drift_stats.json`, a Markdown table `drift_report.md` and PNGs (histogram of log10|delta|, s_tau curve,
relative L2 per layer and per module type) to `--output_dir`. With `--compare OTHER_TUNED` (e.g. a GRPO run from the
same base) it also reports the ratio of relative L2 distances TUNED / OTHER (the paper's ES / GRPO ratio) and plots
both runs side by side.

Examples:

```bash
python scripts/drift_report.py Qwen/Qwen2.5-1.5B-Instruct runs/es-gsm8k --compare runs/grpo-gsm8k --output_dir drift/
python scripts/drift_report.py base_dir tuned_dir --taus 1e-4 1.5e-3 1e-2 --no-per-tensor
```
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hf_es.analysis import DEFAULT_TAUS, compare_drift, compute_drift
from hf_es.analysis import plots as drift_plots
from hf_es.cli import SimpleArgumentParser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = SimpleArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="Base checkpoint: folder with safetensors, .safetensors file or Hub repo id.")
    parser.add_argument("tuned", help="Tuned checkpoint (same forms).")
    parser.add_argument("--compare", default=None, help="A second tuned checkpoint from the same base (e.g. GRPO).")
    parser.add_argument("--labels", nargs=2, default=("ES", "GRPO"), help="Labels of TUNED and --compare.")
    parser.add_argument(
        "--output_dir", "--output-dir", default="drift_report", help="Where to write JSON, Markdown, PNGs."
    )
    parser.add_argument("--taus", nargs="+", type=float, default=list(DEFAULT_TAUS), help="Threshold grid for s_tau.")
    parser.add_argument("--top_k", "--top-k", type=int, default=144, help="Largest |delta| coordinates to keep.")
    parser.add_argument("--revision", default=None, help="Hub revision for repo ids.")
    parser.add_argument("--chunk_size", "--chunk-size", type=int, default=1 << 22, help="Elements read at once.")
    parser.add_argument(
        "--no-per-tensor", dest="per_tensor", action="store_false", help="Omit per-tensor stats from JSON."
    )
    parser.add_argument("--no-plots", dest="plots", action="store_false", help="Skip the PNGs.")
    parser.add_argument("--quiet", action="store_true", help="Do not print the Markdown report.")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    """Runs the report; returns the summary dict that is also written to `drift_stats.json`."""
    args = parse_args(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    kwargs = {"taus": args.taus, "top_k": args.top_k, "revision": args.revision, "chunk_size": args.chunk_size}

    start = time.perf_counter()
    report = compute_drift(args.base, args.tuned, show_progress=not args.quiet, **kwargs)
    elapsed = time.perf_counter() - start
    report.save(out / "drift_stats.json", per_tensor=args.per_tensor)
    label, other_label = args.labels

    markdown = [f"# Parameter drift: `{args.tuned}` vs `{args.base}`", "", report.to_markdown()]
    summary: dict = {"drift": str(out / "drift_stats.json"), "relative_l2": report.relative_l2, "seconds": elapsed}
    reports = {label: report}
    other = None
    if args.compare:
        other = compute_drift(args.base, args.compare, show_progress=not args.quiet, **kwargs)
        other.save(out / "drift_stats_compare.json", per_tensor=args.per_tensor)
        comparison = compare_drift(report, other)
        (out / "drift_comparison.json").write_text(json.dumps(comparison, indent=2) + "\n")
        reports[other_label] = other
        ratio = comparison["relative_l2_ratio"]
        summary["comparison"] = comparison
        markdown += [
            f"## Comparison: {label} (`{args.tuned}`) vs {other_label} (`{args.compare}`)",
            "",
            f"| | {label} | {other_label} | ratio {label}/{other_label} |",
            "|---|---|---|---|",
            f"| Relative L2 | {report.relative_l2:.4g} | {other.relative_l2:.4g} | {'n/a' if ratio is None else f'{ratio:.1f}x'} |",
        ]
        for tau in report.taus:
            markdown.append(
                f"| s_τ at τ={tau:g} | {100 * report.update_sparsity[tau]:.2f}% | {100 * other.update_sparsity[tau]:.2f}% | |"
            )
        for kind, r in comparison["per_module_type"].items():
            markdown.append(
                f"| Relative L2, {kind} | {report.per_module_type[kind]['relative_l2'] or 0:.4g} "
                f"| {(other.per_module_type.get(kind, {}).get('relative_l2') or 0):.4g} | {'n/a' if r is None else f'{r:.1f}x'} |"
            )
        markdown += ["", f"### {other_label} drift", "", other.to_markdown()]

    if args.plots:
        pngs = [
            drift_plots.plot_delta_histogram(reports, out / "delta_histogram.png"),
            drift_plots.plot_sparsity_curve(reports, out / "sparsity_curve.png"),
            drift_plots.plot_layer_distance(reports, out / "layer_distance.png"),
            drift_plots.plot_module_type_distance(reports, out / "module_type_distance.png"),
        ]
        if other is not None:
            pngs.append(
                drift_plots.plot_layer_ratio(report, other, out / "layer_ratio.png", labels=(label, other_label))
            )
        summary["plots"] = [str(p) for p in pngs]
        markdown += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in pngs]

    (out / "drift_report.md").write_text("\n".join(markdown) + "\n")
    summary["markdown"] = str(out / "drift_report.md")
    if not args.quiet:
        print("\n".join(markdown))
        print(f"\nWrote {out}/ (drift computed in {elapsed:.1f}s)", file=sys.stderr)
    return summary


if __name__ == "__main__":
    main()
