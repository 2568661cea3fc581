"""Old import path of [`hf_es.trainer.checkpoint_files`] (the checkpoint file operations), kept while
`tests/trainer/test_reliability.py` imports `checkpoint_problem` and `latest_complete_checkpoint` from here."""

from .checkpoint_files import checkpoint_problem, latest_complete_checkpoint

__all__ = ["checkpoint_problem", "latest_complete_checkpoint"]
