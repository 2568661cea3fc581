"""Training lineage: the chain of stages (ES, GRPO, ...) that produced a checkpoint, shared by the ES and GRPO cards.

Every run that saves a model writes `hf_es_lineage.json` beside its weights: the stages recorded in the checkpoint it
started from, then its own. A composition such as ES->GRPO->ES can therefore be traced from its final folder alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .._io import write_text_atomic
from ..models import base_model_id

__all__ = ["LINEAGE_NAME", "read_lineage", "training_lineage", "write_lineage"]

LINEAGE_NAME = "hf_es_lineage.json"


def read_lineage(model_path: str) -> list[dict[str, Any]]:
    """The stages recorded in a checkpoint folder's `hf_es_lineage.json`.

    Args:
        model_path: A model folder (or a Hub id, which has no local record).

    Returns:
        The recorded stages, oldest first; `[]` when the folder has none.
    """
    path = os.path.join(model_path, LINEAGE_NAME)
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return list(json.load(f))


def training_lineage(
    base_model_path: str, steps: int, dataset_name: str | None = None, method: str = "ES"
) -> list[dict[str, Any]]:
    """The stages up to and including this run.

    Args:
        base_model_path: The model this run started from (its recorded stages come first).
        steps: Number of updates of this run.
        dataset_name: The task this run trained on, if known.
        method: This run's method name (`"ES"`, `"GRPO"`).

    Returns:
        The earlier stages, then `{"method", "model", "steps"[, "dataset"]}` for this run.
    """
    stage: dict[str, Any] = {"method": method, "model": base_model_id(base_model_path), "steps": steps}
    if dataset_name:
        stage["dataset"] = dataset_name
    return read_lineage(base_model_path) + [stage]


def write_lineage(output_dir: str, lineage: list[dict[str, Any]]) -> None:
    """Writes `lineage` as `hf_es_lineage.json` in `output_dir` (atomically)."""
    write_text_atomic(Path(output_dir) / LINEAGE_NAME, json.dumps(lineage, indent=2))
