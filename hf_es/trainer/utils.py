"""Pieces shared by `ESTrainer` and the GRPO baseline trainer (`scripts/train_grpo.py`), so both save the same way."""

from __future__ import annotations

import os
from typing import Any

from transformers.trainer import TRAINING_ARGS_NAME

__all__ = ["write_redacted_training_args"]


def write_redacted_training_args(output_dir: str, args: Any) -> None:
    """Replaces `Trainer`'s pickled `training_args.bin` (which holds the Hub token) with redacted JSON."""
    pickled = os.path.join(output_dir, TRAINING_ARGS_NAME)
    if os.path.isfile(pickled):
        os.remove(pickled)
    with open(os.path.join(output_dir, "training_args.json"), "w") as f:
        f.write(args.to_json_string())
