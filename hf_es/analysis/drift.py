"""Parameter drift between a base checkpoint and a tuned one: relative L2 distance, update sparsity, top-k
coordinates, streamed tensor by tensor (and row block by row block inside large tensors) from safetensors, so
comparing two 7B checkpoints needs memory for a few row blocks, not for two models.

Deltas are computed in float32 from the values as stored (bfloat16 and float16 convert to float32 exactly), sums of
squares are accumulated in float64, and thresholds are compared exactly (`|delta| <= tau` with `tau` as a real
number, not as a rounded float32). This module computes; `hf_es.analysis.plots` draws.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .checkpoint import LOW_PRECISION_BITS, CheckpointSource, f32_floor, row_block
from .names import layer_index, module_type
from .report import DEFAULT_TAUS, HIST_EDGES_LOG10, TOP_K_GROUPS, DriftReport, TensorDrift, finite_or_none, tau_key

__all__ = ["compare_drift", "compute_drift"]


class _TopK:
    """Running top-k of |delta| over all tensors (value, tensor id, flat index, signed delta, base value)."""

    def __init__(self, k: int):
        self.k = k
        self.abs = torch.empty(0, dtype=torch.float32)
        self.tensor_id = torch.empty(0, dtype=torch.int64)
        self.flat = torch.empty(0, dtype=torch.int64)
        self.delta = torch.empty(0, dtype=torch.float32)
        self.base = torch.empty(0, dtype=torch.float32)

    def update(
        self, abs_delta: torch.Tensor, delta: torch.Tensor, base: torch.Tensor, tensor_id: int, offset: int
    ) -> None:
        if self.k <= 0 or abs_delta.numel() == 0:
            return
        k = min(self.k, abs_delta.numel())
        values, idx = torch.topk(abs_delta, k, sorted=False)
        keep = values > 0
        values, idx = values[keep], idx[keep]
        self.abs = torch.cat([self.abs, values])
        self.tensor_id = torch.cat([self.tensor_id, torch.full_like(idx, tensor_id)])
        self.flat = torch.cat([self.flat, idx + offset])
        self.delta = torch.cat([self.delta, delta[idx]])
        self.base = torch.cat([self.base, base[idx]])
        if self.abs.numel() > self.k:
            # Stable order: by |delta| descending, ties by (tensor id, flat index) so results are deterministic.
            order = np.lexsort((self.flat.numpy(), self.tensor_id.numpy(), -self.abs.numpy()))[: self.k]
            order = torch.from_numpy(order)
            self.abs, self.tensor_id, self.flat = self.abs[order], self.tensor_id[order], self.flat[order]
            self.delta, self.base = self.delta[order], self.base[order]

    def sorted(self) -> list[tuple[float, int, int, float, float]]:
        order = np.lexsort((self.flat.numpy(), self.tensor_id.numpy(), -self.abs.numpy()))
        return [
            (float(self.abs[i]), int(self.tensor_id[i]), int(self.flat[i]), float(self.delta[i]), float(self.base[i]))
            for i in order
        ]


def compute_drift(
    base: str | Path | Mapping[str, torch.Tensor] | torch.nn.Module,
    tuned: str | Path | Mapping[str, torch.Tensor] | torch.nn.Module,
    taus: Sequence[float] = DEFAULT_TAUS,
    *,
    top_k: int = max(TOP_K_GROUPS),
    chunk_size: int = 1 << 22,
    tied_weights: Mapping[str, str] | None = None,
    revision: str | None = None,
    show_progress: bool = False,
) -> DriftReport:
    r"""
    Measures how far `tuned` moved from `base`, streaming tensor by tensor.

    Deltas are computed in float32 from the stored values, norms are accumulated in float64, and `|delta| <= tau` is
    decided exactly for the real number `tau`. Coordinates whose stored value is bit-identical count as unchanged:
    with bfloat16 storage, updates smaller than about half a bfloat16 ulp of the weight round to zero there, so the
    unchanged fraction includes them (the report says so in `notes`).

    Args:
        base (`str`, `Path`, `Mapping[str, torch.Tensor]` or `torch.nn.Module`):
            The starting checkpoint: a folder with `model.safetensors` or a sharded
            `model.safetensors.index.json`, a single `.safetensors` file, a Hub repo id (`"org/name"` or
            `"org/name@revision"`), a state dict or a model.
        tuned: The tuned checkpoint, in any of the same forms.
        taus (`Sequence[float]`, *optional*, defaults to `DEFAULT_TAUS`):
            Thresholds for the update sparsity `s_tau`.
        top_k (`int`, *optional*, defaults to 144):
            How many of the largest |delta| coordinates to keep.
        chunk_size (`int`, *optional*, defaults to `2**22`):
            Approximate number of elements read at once from a tensor (bounds peak memory).
        tied_weights (`Mapping[str, str]`, *optional*):
            Extra `{alias: canonical}` pairs of tied tensors to count once. Tied input/output embeddings are detected
            from `config.json` (`tie_word_embeddings`) and state dicts sharing storage are detected automatically.
        revision (`str`, *optional*):
            Hub revision used when `base` or `tuned` is a repo id.
        show_progress (`bool`, *optional*, defaults to `False`):
            Show a progress bar over tensors.

    Returns:
        [`DriftReport`]: whole-model, per-tensor, per-module-type and per-layer statistics.

    Example:

    ```python
    >>> from hf_es.analysis import compute_drift
    >>> report = compute_drift("Qwen/Qwen2.5-1.5B-Instruct", "./es-gsm8k/checkpoint-500")
    >>> report.relative_l2, report.update_sparsity[1.5e-3]
    ```
    """
    taus = tuple(sorted(float(t) for t in taus))
    if any(t <= 0 for t in taus):
        raise ValueError(f"Every tau must be positive, got {taus}.")
    with (
        CheckpointSource(base, revision=revision, tied_weights=tied_weights) as src_base,
        CheckpointSource(tuned, revision=revision, tied_weights=tied_weights) as src_tuned,
    ):
        pairs = {n: src_base.counterpart(n) for n in src_tuned.canonical_names}
        names = [n for n, base_name in pairs.items() if base_name is not None]
        missing_in_base = [n for n, base_name in pairs.items() if base_name is None]
        matched = {pairs[n] for n in names}
        missing_in_tuned = [n for n in src_base.canonical_names if n not in matched and n not in src_tuned.names]
        accumulator = _Accumulator(taus, top_k)
        iterator: Any = names
        if show_progress:
            from tqdm.auto import tqdm

            iterator = tqdm(names, desc="drift", unit="tensor")
        per_tensor = {
            name: accumulator.tensor_drift(src_base, src_tuned, name, pairs[name], tensor_id, chunk_size)
            for tensor_id, name in enumerate(iterator)
        }
        aliases = {**src_base.aliases, **src_tuned.aliases}
        descriptions = (src_base.description, src_tuned.description)
    return _build_report(
        descriptions, taus, per_tensor, accumulator, names, top_k, aliases, missing_in_base, missing_in_tuned
    )


class _Accumulator:
    """Model-wide running statistics filled tensor by tensor: top-k coordinates, |delta| histogram, dtypes."""

    def __init__(self, taus: tuple[float, ...], top_k: int):
        self.taus = taus
        self.boundaries = torch.tensor([f32_floor(t) for t in taus], dtype=torch.float32)
        self.hist_edges32 = torch.tensor([f32_floor(10.0**e) for e in HIST_EDGES_LOG10], dtype=torch.float32)
        self.hist_counts = torch.zeros(len(HIST_EDGES_LOG10) + 1, dtype=torch.int64)
        self.topk = _TopK(top_k)
        self.dtypes: dict[str, int] = {}

    def tensor_drift(
        self,
        src_base: CheckpointSource,
        src_tuned: CheckpointSource,
        name: str,
        base_name: str,
        tensor_id: int,
        chunk_size: int,
    ) -> TensorDrift:
        """Streams one tensor pair row block by row block into its [`TensorDrift`] (and the model-wide counters)."""
        shape = src_tuned.shape(name)
        if src_base.shape(base_name) != shape:
            raise ValueError(f"Shape mismatch for {name!r}: base {src_base.shape(base_name)} vs tuned {shape}.")
        dtype_b, dtype_t = src_base.dtype(base_name), src_tuned.dtype(name)
        stats = TensorDrift(
            name=name,
            module_type=module_type(name),
            layer=layer_index(name),
            shape=list(shape),
            dtype=dtype_t if dtype_b == dtype_t else f"{dtype_b}->{dtype_t}",
            numel=math.prod(shape),
            num_below=dict.fromkeys(self.taus, 0),
            aliases=sorted(a for a, c in src_tuned.aliases.items() if c == name),
        )
        self.dtypes[stats.dtype] = self.dtypes.get(stats.dtype, 0) + stats.numel
        below = torch.zeros(len(self.taus) + 1, dtype=torch.int64)
        rows, block = row_block(shape, chunk_size)
        offset = 0
        for start in range(0, rows, block):
            b = src_base.rows(base_name, start, start + block).to(torch.float32).reshape(-1)
            t = src_tuned.rows(name, start, start + block).to(torch.float32).reshape(-1)
            below += self._add_block(stats, b, t, tensor_id, offset)
            offset += b.numel()
        cumulative = torch.cumsum(below, 0)
        zeros_in_bucket0 = stats.num_unchanged + stats.num_nonfinite  # non-finite were zeroed in _add_block
        for i, tau in enumerate(self.taus):
            stats.num_below[tau] = int(cumulative[i]) - zeros_in_bucket0
        return stats

    def _add_block(self, stats: TensorDrift, b: torch.Tensor, t: torch.Tensor, tensor_id: int, offset: int):
        d = t - b
        ad = d.abs()
        finite = torch.isfinite(ad)
        nonfinite = int((~finite).sum())
        if nonfinite:
            stats.num_nonfinite += nonfinite
            ad = torch.where(finite, ad, torch.zeros_like(ad))
            d = torch.where(finite, d, torch.zeros_like(d))
            b = torch.where(torch.isfinite(b), b, torch.zeros_like(b))
        stats.base_sq += float(b.double().square().sum())
        stats.delta_sq += float(d.double().square().sum())
        stats.num_unchanged += int((ad == 0).sum()) - nonfinite
        if ad.numel():
            stats.max_abs_delta = max(stats.max_abs_delta, float(ad.max()))
        nonzero = ad[ad > 0]
        self.hist_counts += torch.bincount(
            torch.bucketize(nonzero, self.hist_edges32, right=False), minlength=len(HIST_EDGES_LOG10) + 1
        )
        self.topk.update(ad, d, b, tensor_id, offset)
        # bucket i holds boundaries[i-1] < |d| <= boundaries[i]; zeros fall in bucket 0.
        return torch.bincount(torch.bucketize(ad, self.boundaries, right=False), minlength=len(self.taus) + 1)


def _aggregate(group: list[TensorDrift], total_delta: float, taus: Sequence[float]) -> dict[str, Any]:
    """Statistics of a group of tensors (a module type or a layer)."""
    base_sq = sum(t.base_sq for t in group)
    delta_sq = sum(t.delta_sq for t in group)
    numel = sum(t.numel for t in group)
    unchanged = sum(t.num_unchanged for t in group)
    changed = sum(t.num_changed for t in group)
    rel = math.sqrt(delta_sq / base_sq) if base_sq > 0 else (0.0 if delta_sq == 0 else math.inf)
    return {
        "numel": numel,
        "num_tensors": len(group),
        "l2_delta": math.sqrt(delta_sq),
        "l2_base": math.sqrt(base_sq),
        "relative_l2": finite_or_none(rel),
        "share_of_sq_drift": delta_sq / total_delta if total_delta > 0 else 0.0,
        "fraction_unchanged": unchanged / numel if numel else 0.0,
        "max_abs_delta": max((t.max_abs_delta for t in group), default=0.0),
        "update_sparsity": {
            tau_key(tau): (sum(t.num_below[tau] for t in group) / changed if changed else 0.0) for tau in taus
        },
    }


def _top_entries(
    topk: _TopK, names: list[str], per_tensor: Mapping[str, TensorDrift], top_k: int
) -> tuple[list[dict[str, Any]], dict[int, dict[str, int]]]:
    """The largest |delta| coordinates, and their counts by module type for each k of `TOP_K_GROUPS`."""
    entries = []
    for abs_delta, tensor_id, flat, delta, base_value in topk.sorted():
        tensor = per_tensor[names[tensor_id]]
        index = [int(i) for i in np.unravel_index(flat, tensor.shape)] if tensor.shape else []
        entries.append(
            {
                "name": tensor.name,
                "index": index,
                "module_type": tensor.module_type,
                "layer": tensor.layer,
                "abs_delta": abs_delta,
                "delta": delta,
                "base": base_value,
            }
        )
    counts_by_k: dict[int, dict[str, int]] = {}
    for k in TOP_K_GROUPS:
        if k <= top_k:
            counts: dict[str, int] = {}
            for entry in entries[:k]:
                counts[entry["module_type"]] = counts.get(entry["module_type"], 0) + 1
            counts_by_k[k] = dict(sorted(counts.items(), key=lambda kv: -kv[1]))
    return entries, counts_by_k


def _notes(
    dtypes: Mapping[str, int],
    aliases: Mapping[str, str],
    missing_in_base: list[str],
    missing_in_tuned: list[str],
    num_nonfinite: int,
) -> list[str]:
    """Caveats about precision, dtype changes, tied weights and tensors present on one side only."""
    notes = ["Deltas computed in float32 from the stored dtypes; sums of squares accumulated in float64."]
    for dtype_name, count in dtypes.items():
        stored = dtype_name.split("->")[-1]
        if stored in LOW_PRECISION_BITS:
            bits = LOW_PRECISION_BITS[stored]
            notes.append(
                f"{count:,} coordinates are stored in {stored}: a weight w cannot move by less than about "
                f"|w|*2^-{bits - 1} (one ulp), so smaller updates were rounded away when the checkpoint was saved and "
                "count as exactly unchanged; nonzero deltas are multiples of the ulp."
            )
        if "->" in dtype_name:
            notes.append(
                f"{count:,} coordinates changed dtype between base and tuned ({dtype_name}); part of the delta is "
                "rounding."
            )
    if aliases:
        tied = ", ".join(f"{alias} = {canonical}" for alias, canonical in sorted(aliases.items()))
        notes.append(f"Tied tensors counted once: {tied}.")
    if missing_in_base or missing_in_tuned:
        notes.append(
            f"Skipped {len(missing_in_base)} tensor(s) only in the tuned checkpoint and {len(missing_in_tuned)} only "
            "in the base."
        )
    if num_nonfinite:
        notes.append(f"{num_nonfinite:,} coordinates have a non-finite delta (NaN/inf) and were excluded.")
    return notes


def _build_report(
    descriptions: tuple[str, str],
    taus: tuple[float, ...],
    per_tensor: dict[str, TensorDrift],
    accumulator: _Accumulator,
    names: list[str],
    top_k: int,
    aliases: Mapping[str, str],
    missing_in_base: list[str],
    missing_in_tuned: list[str],
) -> DriftReport:
    total_base = sum(t.base_sq for t in per_tensor.values())
    total_delta = sum(t.delta_sq for t in per_tensor.values())
    num_params = sum(t.numel for t in per_tensor.values())
    num_unchanged = sum(t.num_unchanged for t in per_tensor.values())
    num_nonfinite = sum(t.num_nonfinite for t in per_tensor.values())
    num_changed = num_params - num_unchanged - num_nonfinite
    by_type: dict[str, list[TensorDrift]] = {}
    by_layer: dict[int, list[TensorDrift]] = {}
    for t in per_tensor.values():
        by_type.setdefault(t.module_type, []).append(t)
        if t.layer is not None:
            by_layer.setdefault(t.layer, []).append(t)
    top_entries, top_counts = _top_entries(accumulator.topk, names, per_tensor, top_k)
    return DriftReport(
        base=descriptions[0],
        tuned=descriptions[1],
        taus=taus,
        relative_l2=math.sqrt(total_delta / total_base) if total_base > 0 else (0.0 if total_delta == 0 else math.inf),
        l2_delta=math.sqrt(total_delta),
        l2_base=math.sqrt(total_base),
        num_params=num_params,
        num_unchanged=num_unchanged,
        num_nonfinite=num_nonfinite,
        update_sparsity={
            tau: (sum(t.num_below[tau] for t in per_tensor.values()) / num_changed if num_changed else 0.0)
            for tau in taus
        },
        max_abs_delta=max((t.max_abs_delta for t in per_tensor.values()), default=0.0),
        per_tensor=per_tensor,
        per_module_type={kind: _aggregate(group, total_delta, taus) for kind, group in sorted(by_type.items())},
        per_layer={layer: _aggregate(group, total_delta, taus) for layer, group in sorted(by_layer.items())},
        top_k=top_entries,
        top_k_by_module_type=top_counts,
        histogram={"edges_log10": list(HIST_EDGES_LOG10), "counts": accumulator.hist_counts.tolist()},
        dtypes=accumulator.dtypes,
        notes=_notes(accumulator.dtypes, aliases, missing_in_base, missing_in_tuned, num_nonfinite),
        missing_in_tuned=missing_in_tuned,
        missing_in_base=missing_in_base,
    )


def compare_drift(report: DriftReport, other: DriftReport) -> dict[str, Any]:
    """Ratios of relative L2 distance `report / other` (e.g. ES / GRPO): whole model, per module type, per layer.

    Args:
        report ([`DriftReport`]): Numerator run (e.g. ES).
        other ([`DriftReport`]): Denominator run (e.g. GRPO) against the same base.

    Returns:
        `dict`: `relative_l2_ratio`, `per_module_type` and `per_layer` ratios (`None` where undefined).
    """

    def ratio(a: float | None, b: float | None) -> float | None:
        if a is None or b is None or b == 0 or not math.isfinite(a) or not math.isfinite(b):
            return None
        return a / b

    return {
        "relative_l2": report.relative_l2,
        "other_relative_l2": other.relative_l2,
        "relative_l2_ratio": ratio(report.relative_l2, other.relative_l2),
        "per_module_type": {
            kind: ratio(stats["relative_l2"], other.per_module_type.get(kind, {}).get("relative_l2"))
            for kind, stats in report.per_module_type.items()
        },
        "per_layer": {
            str(layer): ratio(stats["relative_l2"], other.per_layer.get(layer, {}).get("relative_l2"))
            for layer, stats in report.per_layer.items()
        },
        "update_sparsity": {
            tau_key(tau): (s, other.update_sparsity.get(tau)) for tau, s in report.update_sparsity.items()
        },
    }
