"""[`CheckpointingMixin`]: ESTrainer's save and resume overrides of `transformers.Trainer`.

The file operations (staging, fsync and rename, rotation, completeness, the ES state files) live in the leaf
`checkpoint_files.py`; this mixin is the layer that plugs them into `Trainer`: resume selection, the staged
`_save_checkpoint`, RNG/optimizer/scaler loads that ES has no use for, and the ES files next to every saved model.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from accelerate.utils import is_peft_model
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from . import checkpoint_files
from .adapters import save_merged_model

logger = logging.getLogger(__name__)

__all__ = ["CheckpointingMixin"]


class CheckpointingMixin:
    """Save and resume overrides for [`ESTrainer`]; placed before `transformers.Trainer` in its bases, and relying on
    the trainer's `args`, `state`, `backend`, `model`, `_init_centre` and `_total_generated_tokens`, and on
    `_write_model_card` ([`PublishingMixin`]) for the card written with every save."""

    def train(
        self,
        resume_from_checkpoint: str | bool | None = None,
        trial: Any = None,
        ignore_keys_for_eval: list[str] | None = None,
    ):
        """Trains with ES; as `Trainer.train`, but `resume_from_checkpoint=True` takes the latest *complete* checkpoint
        in `args.output_dir` (incomplete ones, e.g. from a crash, are skipped with a warning) and an explicit
        checkpoint is checked for completeness before anything is loaded."""
        resume_from_checkpoint = checkpoint_files.resolve_resume_checkpoint(
            resume_from_checkpoint, self.args.output_dir
        )
        output = super().train(resume_from_checkpoint, trial, ignore_keys_for_eval)
        self.backend.sync_mirror()  # `trainer.model` is the centre once training returns
        return output

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """`Trainer._save_checkpoint`'s steps, staged: writes the model, the ES state (with the fp32 master: exact
        resume) and `trainer_state.json` into `_tmp-checkpoint-N`, renames it to `checkpoint-N`, then pushes
        (`_push_from_checkpoint`) and rotates. A crash at any point leaves either the complete new checkpoint or none
        (the previous one is then the latest)."""
        # No super(): Trainer's body writes straight into `checkpoint-N`, pushes before the ES files exist and rotates
        # by plain deletion; each would break crash safety. Same steps, staged. Checked against transformers 5.24.
        args, state = self.args, self.state
        if self.hp_search_backend is None and trial is None:
            self.store_flos()
        run_dir = self._get_output_dir(trial=trial)
        step = state.global_step
        final_dir = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}")
        staging = checkpoint_files.staging_dir(run_dir, step)
        if args.should_save:
            checkpoint_files.remove_stale_staging(run_dir)
        self.save_model(staging, _internal_call=True)
        if args.should_save:
            self._save_es_state(staging, include_master=True)
        if state.best_global_step:
            best_dir = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.best_global_step}")
            if state.best_global_step == step or os.path.exists(best_dir):
                state.best_model_checkpoint = best_dir
        if args.should_save:
            self._export_callback_states()
            state.save_to_json(os.path.join(staging, TRAINER_STATE_NAME))
            checkpoint_files.commit_checkpoint(staging, final_dir)
        self.accelerator.wait_for_everyone()
        if args.push_to_hub:
            self._push_from_checkpoint(final_dir)
        if args.should_save:
            checkpoint_files.rotate_checkpoints(run_dir, args.save_total_limit, state.best_model_checkpoint)

    def _export_callback_states(self) -> None:
        """Records the `ExportableState` callbacks' and `TrainerControl`'s state in `self.state`, as
        `Trainer._save_checkpoint` does before writing `trainer_state.json`."""
        for callback in self.callback_handler.callbacks + [self.control]:
            if isinstance(callback, ExportableState):
                key, callback_state = callback.__class__.__name__, callback.state()
                if isinstance(self.state.stateful_callbacks.get(key), list):
                    self.state.stateful_callbacks[key].append(callback_state)
                else:
                    self.state.stateful_callbacks[key] = callback_state

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
        self.backend.sync_mirror()  # the saved model is the centre (an engine's HF mirror is synced lazily)
        output_dir = output_dir or self.args.output_dir
        super().save_model(output_dir, _internal_call)
        if self.args.should_save:
            self._save_es_state(output_dir, include_master=self.args.save_es_master)
            if self.args.save_merged_model and is_peft_model(self.model):
                save_merged_model(self.model, output_dir, self.processing_class)
            self._write_model_card(output_dir)

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        super()._save(output_dir, state_dict)
        checkpoint_files.write_redacted_training_args(output_dir or self.args.output_dir, self.args)

    def _save_es_state(self, output_dir: str, include_master: bool) -> None:
        """Writes `es_state.json` (step, token count, [`~checkpoint_files.resume_settings`]) and, when the live
        weights are not fp32 and `include_master` (checkpoints), the fp32 master; a master left out on purpose (final
        saves) is recorded as omitted."""
        centre = self.backend.centre
        needs_master = not all(live.dtype == torch.float32 for live in centre.parameters.values())
        fields = {
            "global_step": self.state.global_step,
            "epoch": self.state.epoch,
            "total_generated_tokens": self._total_generated_tokens,
            **checkpoint_files.resume_settings(self.args),
        }
        master = centre.state_dict() if needs_master and include_master else None
        checkpoint_files.save_es_state(output_dir, fields, master, master_omitted=needs_master and not include_master)

    def _load_es_state(self, checkpoint: str) -> None:
        """Loads a checkpoint's ES state into the backend's centre (the fp32 master, or the model weights Trainer
        loaded), checks it is finite, warns about settings that differ from `args`, and restores the token count."""
        state, master = checkpoint_files.load_es_state(checkpoint)
        if master is not None:
            self.backend.load_centre(master)
        else:  # the model weights Trainer loaded are the centre (exact for an fp32 model)
            self._init_centre(self.backend.centre.noise)
            if state.get("fp32_master_omitted"):
                logger.warning(
                    f"{checkpoint} has no fp32 master (a final save): the resume starts from rounded weights."
                )
        bad = [name for name, tensor in self.backend.centre.master.items() if not torch.isfinite(tensor).all()]
        if bad:
            raise ValueError(
                f"Checkpoint {checkpoint} holds non-finite weights (e.g. {bad[:3]}); resume from an earlier one."
            )
        now = checkpoint_files.resume_settings(self.args)
        changed = {name: (state[name], now[name]) for name in now if name in state and state[name] != now[name]}
        if changed:
            logger.warning(
                f"Resuming from {checkpoint} with different settings (checkpoint, now): {changed}; the run will not "
                "reproduce an uninterrupted one."
            )
        self._total_generated_tokens = state.get("total_generated_tokens", 0)
