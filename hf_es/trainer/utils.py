"""Pieces shared by `ESTrainer` and the GRPO baseline trainer (`scripts/train_grpo.py`), so both evaluate and save
the same way."""

from __future__ import annotations

from .checkpoint_files import write_redacted_training_args  # re-exported: scripts/train_grpo.py imports it from here
from .scoring import RewardTally  # re-exported: scripts/train_grpo.py imports it from here

__all__ = ["RewardTally", "write_redacted_training_args"]
