"""Checkpoint files: crash-safe folders and the ES state that makes a resume exact (a leaf: plain arguments only).

A checkpoint is written into a staging folder ([`staging_dir`]: `_tmp-checkpoint-N`, matched neither by Trainer's
`checkpoint-*` glob nor pushed to the Hub), every file is fsynced, and the folder is renamed to `checkpoint-N` in one
atomic step ([`commit_checkpoint`]): a crash leaves either the complete new checkpoint or none. Old checkpoints are
renamed out of the `checkpoint-N` namespace before they are deleted ([`rotate_checkpoints`]). [`checkpoint_problem`]
says why a folder cannot be resumed from; [`latest_complete_checkpoint`] skips incomplete ones.

The ES state is `es_state.json` (step, the settings a resume must share, token count) and, when the model is not fp32,
`es_master.safetensors`: the fp32 centre that the model's low-precision weights round ([`save_es_state`],
[`load_es_state`]). `CheckpointingMixin` (`saving.py`) calls these from its `Trainer` overrides.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers.trainer import TRAINER_STATE_NAME, TRAINING_ARGS_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, sort_checkpoints

logger = logging.getLogger(__name__)

__all__ = [
    "ES_MASTER_NAME",
    "ES_STATE_NAME",
    "RESUME_FIELDS",
    "STAGING_PREFIX",
    "checkpoint_problem",
    "commit_checkpoint",
    "latest_complete_checkpoint",
    "load_es_state",
    "remove_stale_staging",
    "resolve_resume_checkpoint",
    "resume_settings",
    "rotate_checkpoints",
    "save_es_state",
    "staging_dir",
    "write_redacted_training_args",
]

ES_MASTER_NAME = "es_master.safetensors"
ES_STATE_NAME = "es_state.json"
STAGING_PREFIX = f"_tmp-{PREFIX_CHECKPOINT_DIR}-"
_OLD_PREFIX = "_old-"
_CHECKPOINT_RE = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
RESUME_FIELDS = (
    "es_target_modules",
    "perturbation",
    "perturbation_rank",
    "low_rank_non_matrix_noise",
    "seed",
    "noise_seed",
    "noise_type",
    "noise_table_size",
    "population_size",
    "sigma",
    "estimator",
    "fitness_shaping",
    "per_device_train_batch_size",
    "shuffle_dataset",
    "num_generations",
    "max_completion_length",
    "temperature",
    "top_p",
    "top_k",
)
"""ES settings that must match between a checkpoint and the resuming run for the resume to be exact."""


def staging_dir(run_dir: str, step: int) -> str:
    """Where the checkpoint of `step` is written before [`commit_checkpoint`] renames it to `checkpoint-<step>`."""
    return os.path.join(run_dir, f"{STAGING_PREFIX}{step}")


def remove_stale_staging(run_dir: str) -> None:
    """Deletes staging and half-rotated folders left in `run_dir` by a crash during an earlier save."""
    os.makedirs(run_dir, exist_ok=True)
    for name in os.listdir(run_dir):
        if name.startswith(STAGING_PREFIX) or name.startswith(_OLD_PREFIX + PREFIX_CHECKPOINT_DIR):
            shutil.rmtree(os.path.join(run_dir, name), ignore_errors=True)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse to fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def commit_checkpoint(staging: str, final_dir: str) -> None:
    """Flushes every file of `staging` to disk, then atomically renames it to `final_dir` (replacing an older save
    of the same step)."""
    for root, _, files in os.walk(staging):
        for file in files:
            with open(os.path.join(root, file), "rb") as f:
                os.fsync(f.fileno())
    old_dir = None
    if os.path.exists(final_dir):  # re-saving the same step (e.g. a rerun without resume): swap it out
        old_dir = os.path.join(os.path.dirname(final_dir), _OLD_PREFIX + os.path.basename(final_dir))
        shutil.rmtree(old_dir, ignore_errors=True)
        os.replace(final_dir, old_dir)
    os.replace(staging, final_dir)
    _fsync_dir(os.path.dirname(final_dir))
    if old_dir is not None:
        shutil.rmtree(old_dir, ignore_errors=True)


def rotate_checkpoints(run_dir: str, limit: int | None, best_checkpoint: str | None = None) -> None:
    """Keeps the newest `limit` checkpoints (and the best one), as Trainer's `save_total_limit`, but each old one is
    first renamed out of the `checkpoint-N` namespace, so a crash while deleting it never leaves a half-deleted
    `checkpoint-N`."""
    if limit is None or limit <= 0:
        return
    checkpoints = sort_checkpoints(run_dir, use_mtime=True)
    protected = set(checkpoints[-1:]) | ({str(Path(best_checkpoint))} if best_checkpoint is not None else set())
    remaining = len(checkpoints)
    for checkpoint in checkpoints:
        if remaining <= max(limit, len(protected)):
            break
        if checkpoint in protected:
            continue
        doomed = os.path.join(run_dir, _OLD_PREFIX + os.path.basename(checkpoint))
        shutil.rmtree(doomed, ignore_errors=True)
        os.replace(checkpoint, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        remaining -= 1


def checkpoint_problem(checkpoint: str) -> str | None:
    """Why `checkpoint` cannot be resumed from (a missing or unreadable file), or None if it is complete."""
    if not os.path.isdir(checkpoint):
        return "no such directory"
    for name in (TRAINER_STATE_NAME, ES_STATE_NAME):
        try:
            with open(os.path.join(checkpoint, name)) as f:
                json.load(f)
        except FileNotFoundError:
            return f"{name} is missing (the save did not finish)"
        except (OSError, ValueError) as error:
            return f"{name} is unreadable ({error})"
    if not any(
        os.path.isfile(os.path.join(checkpoint, name))
        for name in ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")
    ):
        return "model.safetensors is missing (the save did not finish)"
    return None


def latest_complete_checkpoint(output_dir: str) -> str | None:
    """The `checkpoint-N` of `output_dir` with the largest N that [`checkpoint_problem`] accepts (incomplete ones are
    skipped with a warning), or None."""
    if not os.path.isdir(output_dir):
        return None
    steps = sorted(
        (int(match.group(1)), name)
        for name in os.listdir(output_dir)
        if (match := _CHECKPOINT_RE.match(name)) and os.path.isdir(os.path.join(output_dir, name))
    )
    for _, name in reversed(steps):
        path = os.path.join(output_dir, name)
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        logger.warning(f"Skipping incomplete checkpoint {path}: {problem}.")
    return None


def resolve_resume_checkpoint(resume_from_checkpoint: Any, output_dir: str) -> Any:
    """`Trainer.train`'s `resume_from_checkpoint`, checked: `True` becomes the latest *complete* checkpoint in
    `output_dir` (incomplete ones, e.g. from a crash, are skipped with a warning); a path must be complete.

    Raises:
        ValueError: no complete checkpoint in `output_dir`, or the given one is incomplete (the reason is named).
    """
    if resume_from_checkpoint is True:
        resume_from_checkpoint = latest_complete_checkpoint(output_dir)
        if resume_from_checkpoint is None:
            raise ValueError(f"No complete checkpoint found in output directory ({output_dir}).")
        logger.info(f"Resuming from {resume_from_checkpoint}.")
    elif isinstance(resume_from_checkpoint, (str, os.PathLike)):
        problem = checkpoint_problem(str(resume_from_checkpoint))
        if problem is not None:
            raise ValueError(f"Cannot resume from {resume_from_checkpoint}: {problem}.")
    return resume_from_checkpoint


def resume_settings(args: Any) -> dict[str, Any]:
    """The [`RESUME_FIELDS`] of an `ESConfig`, as JSON values."""
    values = {name: getattr(args, name) for name in RESUME_FIELDS}
    return {k: v if isinstance(v, (int, float, str, bool)) or v is None else str(v) for k, v in values.items()}


def save_es_state(
    output_dir: str,
    state: Mapping[str, Any],
    master: Mapping[str, torch.Tensor] | None = None,
    *,
    master_omitted: bool = False,
) -> None:
    """Writes `es_state.json` and, when `master` is given, `es_master.safetensors`.

    Args:
        output_dir: The checkpoint (or final save) folder.
        state: JSON fields (step, epoch, [`resume_settings`], token count, ...).
        master: The fp32 centre (`name -> tensor`), when the saved model weights only round it (not fp32).
        master_omitted: A master exists but is left out on purpose (a final save); recorded so a resume can say so.
    """
    if master is not None:
        save_file({k: v.contiguous().cpu() for k, v in master.items()}, os.path.join(output_dir, ES_MASTER_NAME))
    fields = {**state, "has_fp32_master": master is not None, "fp32_master_omitted": master_omitted}
    with open(os.path.join(output_dir, ES_STATE_NAME), "w") as f:
        json.dump(fields, f, indent=2)


def load_es_state(checkpoint: str) -> tuple[dict[str, Any], dict[str, torch.Tensor] | None]:
    """`(state, master)` of a checkpoint: the `es_state.json` fields, and the fp32 master (None when the model
    weights themselves are the fp32 centre). Raises a `ValueError` when a recorded master is missing."""
    state: dict[str, Any] = {}
    state_path = os.path.join(checkpoint, ES_STATE_NAME)
    if os.path.isfile(state_path):
        with open(state_path) as f:
            state = json.load(f)
    master_path = os.path.join(checkpoint, ES_MASTER_NAME)
    if state.get("has_fp32_master") and not os.path.isfile(master_path):
        raise ValueError(f"Cannot resume from {checkpoint}: {ES_MASTER_NAME} is missing.")
    master = load_file(master_path, device="cpu") if os.path.isfile(master_path) else None
    return state, master


def write_redacted_training_args(output_dir: str, args: Any) -> None:
    """Replaces `Trainer`'s pickled `training_args.bin` (which holds the Hub token) with redacted JSON."""
    pickled = os.path.join(output_dir, TRAINING_ARGS_NAME)
    if os.path.isfile(pickled):
        os.remove(pickled)
    with open(os.path.join(output_dir, "training_args.json"), "w") as f:
        f.write(args.to_json_string())
