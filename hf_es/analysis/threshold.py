"""Magnitude-thresholded checkpoints: reset every coordinate whose update is at most tau, and sweep tau against a
target-task metric (does the small movement matter?)."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .checkpoint import INDEX_NAME, WEIGHT_SUFFIX, CheckpointSource, f32_floor, row_block
from .report import DEFAULT_TAUS, tau_key

__all__ = ["threshold_checkpoint", "threshold_sweep"]

# Files of a checkpoint folder that describe the tuned model rather than the thresholded one: never copied.
_NOT_COPIED = {"README.md", "drift_stats.json", "trainer_state.json", "training_args.bin", "threshold.json"}


def threshold_checkpoint(
    base: str | Path | Mapping[str, torch.Tensor] | torch.nn.Module,
    tuned: str | Path | Mapping[str, torch.Tensor] | torch.nn.Module,
    tau: float,
    output_dir: str | Path,
    *,
    chunk_size: int = 1 << 22,
    copy_files: bool = True,
    tied_weights: Mapping[str, str] | None = None,
    revision: str | None = None,
) -> dict[str, Any]:
    r"""
    Writes a checkpoint equal to `tuned` except that every coordinate with `|tuned - base| <= tau` is reset to `base`.

    This is the magnitude-thresholded checkpoint of the paper's drift analysis, a post-hoc diagnostic: evaluating it shows
    whether the small updates matter. The comparison is done in float32 from the stored values, exactly against the
    real `tau`, the same rule [`compute_drift`] uses, so the fraction of changed coordinates reset here equals
    `s_tau`. The output keeps the tuned checkpoint's dtypes, tensor names and sharding (with its index file) and, when
    `tuned` is a folder, its config, tokenizer and generation files, so it loads with `from_pretrained`.

    Args:
        base: Base checkpoint (folder, `.safetensors` file, Hub id, state dict or model).
        tuned: Tuned checkpoint, in any of the same forms.
        tau (`float`): Threshold; `tau = 0` reproduces `tuned`.
        output_dir (`str` or `Path`): Folder to write (created; existing weight files are overwritten).
        chunk_size (`int`, *optional*, defaults to `2**22`): Elements processed at once.
        copy_files (`bool`, *optional*, defaults to `True`): Copy the tuned folder's non-weight files.
        tied_weights (`Mapping[str, str]`, *optional*): Extra `{alias: canonical}` tied pairs (see [`compute_drift`]).
        revision (`str`, *optional*): Hub revision for repo ids.

    Returns:
        `dict`: `output_dir`, `tau`, `num_params`, `num_changed` (nonzero deltas), `num_reset`, `num_kept` and
        `update_sparsity` (`num_reset / num_changed`, i.e. `s_tau`), also written to `output_dir/threshold.json`.
    """
    if tau < 0:
        raise ValueError(f"tau must be >= 0, got {tau}.")
    from safetensors.torch import save_file

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tau32 = f32_floor(float(tau))
    num_params = num_changed = num_reset = 0
    with (
        CheckpointSource(base, revision=revision, tied_weights=tied_weights) as src_base,
        CheckpointSource(tuned, revision=revision, tied_weights=tied_weights) as src_tuned,
    ):
        for file_name, names in src_tuned.files().items():
            tensors: dict[str, torch.Tensor] = {}
            for name in names:
                shape = src_tuned.shape(name)
                rows, block = row_block(shape, chunk_size)
                counted = name not in src_tuned.aliases
                base_name = src_base.counterpart(name)
                if base_name is None and name in src_tuned.aliases:
                    base_name = src_base.counterpart(src_tuned.aliases[name])
                if base_name is None:
                    raise ValueError(f"Tensor {name!r} of the tuned checkpoint is missing from the base checkpoint.")
                if src_base.shape(base_name) != shape:
                    raise ValueError(
                        f"Shape mismatch for {name!r}: base {src_base.shape(base_name)} vs tuned {shape}."
                    )
                pieces = []
                for start in range(0, rows, block):
                    t_raw = src_tuned.rows(name, start, start + block)
                    b_raw = src_base.rows(base_name, start, start + block)
                    d = t_raw.to(torch.float32) - b_raw.to(torch.float32)
                    ad = d.abs()
                    reset = ad <= tau32
                    changed = ad > 0
                    if counted:
                        num_params += ad.numel()
                        num_changed += int((changed & torch.isfinite(ad)).sum())
                        num_reset += int((reset & changed).sum())
                    pieces.append(torch.where(reset, b_raw.to(t_raw.dtype), t_raw))
                tensor = torch.cat(pieces) if len(shape) else pieces[0].reshape(())
                tensors[name] = tensor.contiguous()
            save_file(tensors, str(output_dir / file_name), metadata={"format": "pt"})
            del tensors

        if src_tuned.index is not None:
            index = dict(src_tuned.index)
            (output_dir / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
        if copy_files and src_tuned.directory is not None:
            _copy_side_files(src_tuned.directory, output_dir)

    summary = {
        "output_dir": str(output_dir),
        "tau": float(tau),
        "base": src_base.description,
        "tuned": src_tuned.description,
        "num_params": num_params,
        "num_changed": num_changed,
        "num_reset": num_reset,
        "num_kept": num_changed - num_reset,
        "update_sparsity": num_reset / num_changed if num_changed else 0.0,
    }
    (output_dir / "threshold.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _copy_side_files(source: Path, output_dir: Path) -> None:
    """Copies config, tokenizer and generation files (not weights, not files describing the tuned run)."""
    for item in source.iterdir():
        if (
            item.is_file()
            and not item.name.endswith(WEIGHT_SUFFIX)
            and not item.name.endswith((".safetensors.index.json", ".bin", ".pt", ".pth"))
            and item.name not in _NOT_COPIED
        ):
            shutil.copy2(item, output_dir / item.name)


def threshold_sweep(
    base: str | Path | Mapping[str, torch.Tensor] | torch.nn.Module,
    tuned: str | Path | Mapping[str, torch.Tensor] | torch.nn.Module,
    evaluate_fn: Callable[[Path], float | Mapping[str, float]],
    taus: Sequence[float] = DEFAULT_TAUS,
    *,
    work_dir: str | Path | None = None,
    keep_checkpoints: bool = False,
    metric: str | None = None,
    results_path: str | Path | None = None,
    **threshold_kwargs: Any,
) -> list[dict[str, Any]]:
    r"""
    Target-task accuracy against update sparsity: thresholds `tuned` at every tau, evaluates each checkpoint.
    Draw the rows with [`~hf_es.analysis.plots.plot_threshold_sweep`].

    Args:
        base: Base checkpoint (see [`threshold_checkpoint`]).
        tuned: Tuned checkpoint.
        evaluate_fn (`Callable[[Path], float | Mapping[str, float]]`):
            Called with the folder of each thresholded checkpoint; returns the accuracy (e.g. target-task Pass@1) or
            a dict of metrics (then `metric` picks the one to plot; by default the first).
        taus (`Sequence[float]`, *optional*, defaults to `DEFAULT_TAUS`): Thresholds; `0` (the tuned model itself)
            is always added.
        work_dir (`str` or `Path`, *optional*): Where to write the checkpoints (a temporary folder by default).
        keep_checkpoints (`bool`, *optional*, defaults to `False`): Keep each thresholded checkpoint after its
            evaluation (otherwise deleted to save disk).
        metric (`str`, *optional*): Key of the plotted metric when `evaluate_fn` returns a dict.
        results_path (`str` or `Path`, *optional*): Where to save the rows as JSON.
        **threshold_kwargs: Passed to [`threshold_checkpoint`].

    Returns:
        `list[dict]`: one row per tau (ascending): `tau`, `update_sparsity`, `num_reset`, `accuracy` and, if
        `evaluate_fn` returned a dict, `metrics`.
    """
    import tempfile

    grid = sorted({0.0, *(float(t) for t in taus)})
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        root = (
            Path(work_dir)
            if work_dir is not None
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hf_es_sweep_")))
        )
        for tau in grid:
            ckpt = root / f"tau_{tau_key(tau)}"
            summary = threshold_checkpoint(base, tuned, tau, ckpt, **threshold_kwargs)
            result = evaluate_fn(ckpt)
            row: dict[str, Any] = {
                "tau": tau,
                "update_sparsity": summary["update_sparsity"],
                "num_reset": summary["num_reset"],
                "num_changed": summary["num_changed"],
            }
            if isinstance(result, Mapping):
                key = metric or next(iter(result))
                row["accuracy"] = float(result[key])
                row["metric"] = key
                row["metrics"] = {k: float(v) for k, v in result.items()}
            else:
                row["accuracy"] = float(result)
            rows.append(row)
            if not keep_checkpoints:
                shutil.rmtree(ckpt, ignore_errors=True)
    if results_path is not None:
        Path(results_path).parent.mkdir(parents=True, exist_ok=True)
        Path(results_path).write_text(json.dumps(rows, indent=2) + "\n")
    return rows
