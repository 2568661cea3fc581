"""The paper's headline comparison end to end: base, ES, GRPO, ES→GRPO and GRPO→ES with matched updates, Pass@K /
Maj@K / greedy evaluation on a rewarded and a held-out task, parameter drift, a magnitude-threshold sweep, and a
report (`scripts/reproduce_paper.py` is the command line).

- `plan`: [`ReproductionPlan`] per scale (`cpu`, `smoke`, `paper-easy`, `paper-hard`) and the runs it trains;
- `pipeline`: [`Pipeline`], the resumable stages and the output layout;
- `budget`: updates, generated tokens and wall time of a saved run;
- `results`: per-method numbers with their spread over seeds, the training dynamics, and `export_results` (the
  report's inputs without the weights); `plots`: coverage and dynamics figures; `report`: `report.md`.
"""

from .pipeline import Pipeline, Stage
from .plan import METHODS, PAPER_REFERENCE, SCALES, ReproductionPlan, TaskSpec, TrainingRun, get_plan
from .report import SECTIONS, build_report
from .results import export_results

__all__ = [
    "METHODS",
    "PAPER_REFERENCE",
    "SCALES",
    "SECTIONS",
    "Pipeline",
    "ReproductionPlan",
    "Stage",
    "TaskSpec",
    "TrainingRun",
    "build_report",
    "export_results",
    "get_plan",
]
