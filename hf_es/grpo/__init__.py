"""The GRPO baseline: TRL's `GRPOTrainer` evaluated, saved and carded like `ESTrainer`, so that ES and GRPO numbers
and lineages are comparable (`scripts/train_grpo.py` is its command line)."""

from .trainer import GRPOEvalArguments, SharedEvalGRPOTrainer

__all__ = ["GRPOEvalArguments", "SharedEvalGRPOTrainer"]
