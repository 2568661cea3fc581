"""[`CheckpointingMixin`]: ESTrainer's save and resume overrides of `transformers.Trainer`.

The crash-safe checkpoint steps and the ES state files live in `checkpointing.py`; this mixin is the thin layer that
plugs them into `Trainer` (resume selection, staged `_save_checkpoint`, RNG/optimizer/scaler loads that ES has no
use for, and the ES files next to every saved model).
"""

from __future__ import annotations

from typing import Any

from accelerate.utils import is_peft_model

from . import checkpointing
from .adapters import save_merged_model
from .publishing import write_trainer_card
from .utils import write_redacted_training_args

__all__ = ["CheckpointingMixin"]


class CheckpointingMixin:
    """Save and resume overrides for [`ESTrainer`]; placed before `transformers.Trainer` in its bases, and relying on
    the trainer's `args`, `state`, `backend`, `model` and `_init_centre`."""

    def train(
        self,
        resume_from_checkpoint: str | bool | None = None,
        trial: Any = None,
        ignore_keys_for_eval: list[str] | None = None,
    ):
        """Trains with ES; as `Trainer.train`, but `resume_from_checkpoint=True` takes the latest *complete* checkpoint
        in `args.output_dir` (incomplete ones, e.g. from a crash, are skipped with a warning) and an explicit
        checkpoint is checked for completeness before anything is loaded."""
        resume_from_checkpoint = checkpointing.resolve_resume_checkpoint(resume_from_checkpoint, self.args.output_dir)
        return super().train(resume_from_checkpoint, trial, ignore_keys_for_eval)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """Writes the checkpoint into `_tmp-checkpoint-N`, then renames it to `checkpoint-N`: a crash at any point
        leaves either the complete new checkpoint or none (the previous one is then the latest)."""
        # No super(): Trainer's body writes straight into `checkpoint-N`, pushes before the ES files exist and rotates
        # by plain deletion; each would break crash safety. Same steps, staged. Checked against transformers 5.24.
        checkpointing.save_checkpoint_staged(self, trial)

    def _load_rng_state(self, checkpoint: str | None) -> None:
        # No super(): ES re-derives every RNG from (seed, step, process) each step; no pickle to trust. Checked: 5.24.
        return None

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        # No super(): ES has no optimizer state; the schedule is fast-forwarded from global_step. Checked: 5.24.
        return None

    def _load_scaler(self, checkpoint: str | None) -> None:
        # No super(): no mixed-precision grad scaler without gradients. Checked against transformers 5.24.
        return None

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Saves what loading the model needs: the centre weights (model dtype), tokenizer, `es_state.json` and the
        model card. The fp32 master (`es_master.safetensors`) is added only with `args.save_es_master`; checkpoints
        always hold it."""
        self.backend.restore()
        output_dir = output_dir or self.args.output_dir
        super().save_model(output_dir, _internal_call)
        if self.args.should_save:
            self._save_es_state(output_dir, include_master=self.args.save_es_master)
            if self.args.save_merged_model and is_peft_model(self.model):
                save_merged_model(self.model, output_dir, self.processing_class)
            write_trainer_card(self, output_dir)

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        super()._save(output_dir, state_dict)
        write_redacted_training_args(output_dir or self.args.output_dir, self.args)

    def _save_es_state(self, output_dir: str, include_master: bool) -> None:
        fields = {"global_step": self.state.global_step, "epoch": self.state.epoch}
        fields["total_generated_tokens"] = self._total_generated_tokens
        checkpointing.save_centre_state(output_dir, self.backend.centre, self.args, fields, include_master)

    def _load_es_state(self, checkpoint: str) -> None:
        state = checkpointing.restore_centre_state(checkpoint, self.backend, self.args, self._init_centre)
        self._total_generated_tokens = state.get("total_generated_tokens", 0)
