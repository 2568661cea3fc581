"""The drift report: per-tensor statistics ([`TensorDrift`]) and the whole-model [`DriftReport`] with its JSON and
Markdown forms (relative L2 distance, update sparsity, top-k coordinates)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_TAUS",
    "HIST_EDGES_LOG10",
    "TOP_K_GROUPS",
    "DriftReport",
    "TensorDrift",
    "finite_or_none",
    "tau_key",
]

DEFAULT_TAUS: tuple[float, ...] = (1e-6, 1e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 1.5e-3, 2e-3, 3e-3, 5e-3, 1e-2, 3e-2)
"""Default grid of thresholds for the update sparsity `s_tau` (includes the paper's `tau = 1.5e-3`)."""

TOP_K_GROUPS: tuple[int, ...] = (9, 100, 144)
"""The `k` values for which the largest-|delta| coordinates are counted by module type."""

HIST_EDGES_LOG10: tuple[float, ...] = tuple(np.round(np.arange(-12.0, 2.0001, 0.25), 2).tolist())
"""log10|delta| histogram edges: bins of 0.25 decades from 1e-12 to 1e2, plus an underflow and an overflow bin."""


def finite_or_none(value: float) -> float | None:
    """`value`, or `None` when it is NaN or infinite (JSON has no infinities)."""
    return value if math.isfinite(value) else None


def tau_key(tau: float) -> str:
    """A threshold as a JSON key (`1.5e-3` -> `"0.0015"`)."""
    return f"{tau:g}"


@dataclass
class TensorDrift:
    """Drift statistics of one tensor (tied aliases are reported once, under the canonical name).

    Attributes:
        name (`str`): Parameter name.
        module_type (`str`): See [`module_type`].
        layer (`int` or `None`): Transformer block index.
        shape (`list[int]`): Tensor shape.
        dtype (`str`): Stored dtype of the tuned tensor (`"bfloat16->float32"` when base and tuned differ).
        numel (`int`): Number of coordinates.
        base_sq (`float`): Squared L2 norm of the base tensor.
        delta_sq (`float`): Squared L2 norm of the update.
        num_unchanged (`int`): Coordinates whose stored value did not change (`delta == 0` exactly).
        num_nonfinite (`int`): Coordinates whose delta is NaN or infinite (excluded from every other statistic).
        max_abs_delta (`float`): Largest |delta|.
        num_below (`dict[float, int]`): For each tau, the number of coordinates with `0 < |delta| <= tau`.
        aliases (`list[str]`): Other names tied to this tensor.
    """

    name: str
    module_type: str
    layer: int | None
    shape: list[int]
    dtype: str
    numel: int
    base_sq: float = 0.0
    delta_sq: float = 0.0
    num_unchanged: int = 0
    num_nonfinite: int = 0
    max_abs_delta: float = 0.0
    num_below: dict[float, int] = field(default_factory=dict)
    aliases: list[str] = field(default_factory=list)

    @property
    def num_changed(self) -> int:
        return self.numel - self.num_unchanged - self.num_nonfinite

    @property
    def relative_l2(self) -> float:
        """||delta|| / ||theta_0|| for this tensor (`inf` if the base tensor is all zeros and it moved)."""
        if self.base_sq == 0.0:
            return 0.0 if self.delta_sq == 0.0 else math.inf
        return math.sqrt(self.delta_sq / self.base_sq)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["num_below"] = {tau_key(tau): count for tau, count in self.num_below.items()}
        out["relative_l2"] = finite_or_none(self.relative_l2)
        out["num_changed"] = self.num_changed
        return out


@dataclass
class DriftReport:
    r"""
    Parameter drift of a tuned checkpoint from its base. Built by [`compute_drift`].

    Attributes:
        base (`str`): Description of the base checkpoint (path, Hub id or `"<state dict>"`).
        tuned (`str`): Description of the tuned checkpoint.
        taus (`tuple[float, ...]`): Threshold grid for the update sparsity.
        relative_l2 (`float`): Whole-model relative L2 distance `||theta - theta_0|| / ||theta_0||`.
        l2_delta (`float`): `||theta - theta_0||`.
        l2_base (`float`): `||theta_0||`.
        num_params (`int`): Number of compared coordinates (tied tensors counted once).
        num_unchanged (`int`): Coordinates whose stored value is exactly unchanged.
        num_nonfinite (`int`): Coordinates with a NaN / infinite delta (excluded from everything else).
        update_sparsity (`dict[float, float]`): `s_tau = |{i: 0 < |d_i| <= tau}| / |{i: |d_i| > 0}|` for each tau.
        max_abs_delta (`float`): Largest |delta| over the model.
        per_tensor (`dict[str, TensorDrift]`): Per-tensor statistics.
        per_module_type (`dict[str, dict]`): Aggregates by module type (`relative_l2`, `share_of_sq_drift`, ...).
        per_layer (`dict[int, dict]`): Aggregates by transformer block.
        top_k (`list[dict]`): The largest |delta| coordinates, largest first (`name`, `index`, `module_type`,
            `layer`, `delta`, `base`).
        top_k_by_module_type (`dict[int, dict[str, int]]`): For each `k` in `TOP_K_GROUPS`, counts of the top-k
            coordinates by module type.
        histogram (`dict`): Histogram of log10|delta| over changed coordinates: `edges` (log10 values) and `counts`
            (`len(edges) + 1` bins: below the first edge, between edges, above the last edge).
        dtypes (`dict[str, int]`): Number of coordinates per stored dtype.
        notes (`list[str]`): Caveats about precision, tied weights and tensors present on one side only.
        missing_in_tuned (`list[str]`), missing_in_base (`list[str]`): Tensors found on one side only (skipped).
    """

    base: str
    tuned: str
    taus: tuple[float, ...]
    relative_l2: float
    l2_delta: float
    l2_base: float
    num_params: int
    num_unchanged: int
    num_nonfinite: int
    update_sparsity: dict[float, float]
    max_abs_delta: float
    per_tensor: dict[str, TensorDrift]
    per_module_type: dict[str, dict[str, Any]]
    per_layer: dict[int, dict[str, Any]]
    top_k: list[dict[str, Any]]
    top_k_by_module_type: dict[int, dict[str, int]]
    histogram: dict[str, list]
    dtypes: dict[str, int]
    notes: list[str] = field(default_factory=list)
    missing_in_tuned: list[str] = field(default_factory=list)
    missing_in_base: list[str] = field(default_factory=list)

    @property
    def num_changed(self) -> int:
        """Coordinates with a nonzero, finite delta."""
        return self.num_params - self.num_unchanged - self.num_nonfinite

    @property
    def fraction_unchanged(self) -> float:
        """Fraction of coordinates whose stored value is exactly unchanged."""
        return self.num_unchanged / self.num_params if self.num_params else 0.0

    def to_dict(self, *, per_tensor: bool = True) -> dict[str, Any]:
        """A JSON-serialisable dict (tau keys as strings such as `"0.0015"`; non-finite numbers as `None`).

        Args:
            per_tensor (`bool`, *optional*, defaults to `True`): Include the per-tensor table.
        """
        return {
            "base": self.base,
            "tuned": self.tuned,
            "taus": list(self.taus),
            "relative_l2": finite_or_none(self.relative_l2),
            "l2_delta": self.l2_delta,
            "l2_base": self.l2_base,
            "num_params": self.num_params,
            "num_changed": self.num_changed,
            "num_unchanged": self.num_unchanged,
            "num_nonfinite": self.num_nonfinite,
            "fraction_unchanged": self.fraction_unchanged,
            "update_sparsity": {tau_key(tau): s for tau, s in self.update_sparsity.items()},
            "max_abs_delta": self.max_abs_delta,
            "per_module_type": self.per_module_type,
            "per_layer": {str(layer): stats for layer, stats in self.per_layer.items()},
            "top_k": self.top_k,
            "top_k_by_module_type": {str(k): counts for k, counts in self.top_k_by_module_type.items()},
            "histogram": self.histogram,
            "dtypes": self.dtypes,
            "notes": self.notes,
            "missing_in_tuned": self.missing_in_tuned,
            "missing_in_base": self.missing_in_base,
            "per_tensor": {name: t.to_dict() for name, t in self.per_tensor.items()} if per_tensor else None,
        }

    def save(self, path: str | Path, *, per_tensor: bool = True) -> Path:
        """Writes [`DriftReport.to_dict`] as JSON (e.g. `drift_stats.json`) and returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(per_tensor=per_tensor), indent=2) + "\n")
        return path

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DriftReport:
        """Rebuilds a report from [`DriftReport.to_dict`] output (the per-tensor table may be absent)."""
        per_tensor = {}
        for name, t in (data.get("per_tensor") or {}).items():
            t = dict(t)
            for key in ("relative_l2", "num_changed"):
                t.pop(key, None)
            t["num_below"] = {float(tau): count for tau, count in t.get("num_below", {}).items()}
            per_tensor[name] = TensorDrift(**t)
        relative_l2 = data.get("relative_l2")
        return cls(
            base=data["base"],
            tuned=data["tuned"],
            taus=tuple(data["taus"]),
            relative_l2=math.inf if relative_l2 is None else relative_l2,
            l2_delta=data["l2_delta"],
            l2_base=data["l2_base"],
            num_params=data["num_params"],
            num_unchanged=data["num_unchanged"],
            num_nonfinite=data.get("num_nonfinite", 0),
            update_sparsity={float(tau): s for tau, s in data["update_sparsity"].items()},
            max_abs_delta=data["max_abs_delta"],
            per_tensor=per_tensor,
            per_module_type=dict(data["per_module_type"]),
            per_layer={int(layer): stats for layer, stats in data["per_layer"].items()},
            top_k=list(data["top_k"]),
            top_k_by_module_type={int(k): counts for k, counts in data["top_k_by_module_type"].items()},
            histogram=dict(data["histogram"]),
            dtypes=dict(data["dtypes"]),
            notes=list(data.get("notes", [])),
            missing_in_tuned=list(data.get("missing_in_tuned", [])),
            missing_in_base=list(data.get("missing_in_base", [])),
        )

    @classmethod
    def load(cls, path: str | Path) -> DriftReport:
        """Reads a report written by [`DriftReport.save`]."""
        return cls.from_dict(json.loads(Path(path).read_text()))

    def sparsity_at(self, tau: float) -> float:
        """`s_tau` for a tau of the grid (closest grid value within 1e-9 relative)."""
        for grid_tau, value in self.update_sparsity.items():
            if math.isclose(grid_tau, tau, rel_tol=1e-9):
                return value
        raise KeyError(f"tau={tau:g} is not in the report's grid {[tau_key(t) for t in self.taus]}.")

    def to_markdown(self, *, taus: Sequence[float] | None = None, top_k: int = 9) -> str:
        """Markdown tables: summary, update sparsity, module types, top-k counts (for model cards and reports).

        Args:
            taus (`Sequence[float]`, *optional*): Subset of the grid to show; defaults to all.
            top_k (`int`, *optional*, defaults to 9): How many of the largest coordinates to list.
        """
        taus = list(self.taus if taus is None else taus)
        lines = [
            "| Statistic | Value |",
            "|---|---|",
            f"| Relative L2 distance ‖θ−θ₀‖/‖θ₀‖ | {_fmt(self.relative_l2)} |",
            f"| ‖θ−θ₀‖ | {_fmt(self.l2_delta)} |",
            f"| Parameters compared | {self.num_params:,} |",
            f"| Exactly unchanged | {self.num_unchanged:,} ({100 * self.fraction_unchanged:.2f}%) |",
            f"| Largest \\|Δθ\\| | {_fmt(self.max_abs_delta)} |",
            "",
            "| τ | s_τ (share of nonzero updates with \\|Δθ\\| ≤ τ) |",
            "|---|---|",
        ]
        lines += [f"| {tau_key(tau)} | {100 * self.sparsity_at(tau):.2f}% |" for tau in taus]
        lines += [
            "",
            "| Module type | Parameters | Relative L2 | Share of ‖Δθ‖² | Unchanged |",
            "|---|---|---|---|---|",
        ]
        for kind, stats in sorted(self.per_module_type.items(), key=lambda kv: -kv[1]["share_of_sq_drift"]):
            lines.append(
                f"| {kind} | {stats['numel']:,} | {_fmt(stats['relative_l2'])} | {100 * stats['share_of_sq_drift']:.2f}% "
                f"| {100 * stats['fraction_unchanged']:.2f}% |"
            )
        if self.top_k_by_module_type:
            kinds = sorted({kind for counts in self.top_k_by_module_type.values() for kind in counts})
            lines += ["", "| Top-k largest \\|Δθ\\| | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
            for k, counts in sorted(self.top_k_by_module_type.items()):
                lines.append(f"| k={k} | " + " | ".join(str(counts.get(kind, 0)) for kind in kinds) + " |")
        if top_k and self.top_k:
            lines += ["", "| # | Tensor | Index | Module type | Δθ | θ₀ |", "|---|---|---|---|---|---|"]
            for rank, entry in enumerate(self.top_k[:top_k], 1):
                lines.append(
                    f"| {rank} | `{entry['name']}` | {tuple(entry['index'])} | {entry['module_type']} "
                    f"| {entry['delta']:+.3e} | {entry['base']:+.3e} |"
                )
        if self.notes:
            lines += [""] + [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"


def _fmt(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.4g}" if value >= 1e-3 else f"{value:.3e}"
