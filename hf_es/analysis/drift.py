"""Parameter drift between a base checkpoint and a tuned one (METHOD.md section 3).

Everything here streams tensor by tensor (and row block by row block inside large tensors) from `safetensors`
files, so comparing two 7B checkpoints needs memory for a few row blocks, not for two models. Deltas are always
computed in float32 from the values as stored (bfloat16 and float16 convert to float32 exactly), sums of squares are
accumulated in float64, and thresholds are compared exactly (`|delta| <= tau` with `tau` as a real number, not as a
rounded float32).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "DEFAULT_TAUS",
    "TOP_K_GROUPS",
    "DriftReport",
    "TensorDrift",
    "compare_drift",
    "compute_drift",
    "module_type",
    "layer_index",
    "threshold_checkpoint",
    "threshold_sweep",
]

DEFAULT_TAUS: tuple[float, ...] = (1e-6, 1e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 1.5e-3, 2e-3, 3e-3, 5e-3, 1e-2, 3e-2)
"""Default grid of thresholds for the update sparsity `s_tau` (includes the paper's `tau = 1.5e-3`)."""

TOP_K_GROUPS: tuple[int, ...] = (9, 100, 144)
"""The `k` values for which the largest-|delta| coordinates are counted by module type."""

# log10|delta| histogram: bins of 0.25 decades from 1e-12 to 1e2, plus an underflow and an overflow bin.
_HIST_EDGES_LOG10: tuple[float, ...] = tuple(np.round(np.arange(-12.0, 2.0001, 0.25), 2).tolist())

_WEIGHT_SUFFIX = ".safetensors"
_INDEX_NAME = "model.safetensors.index.json"
_SINGLE_NAME = "model.safetensors"
_EMBEDDING_NAMES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")
_LM_HEAD_NAMES = ("lm_head.weight", "embed_out.weight")
# Files of a checkpoint folder that describe the tuned model rather than the thresholded one: never copied.
_NOT_COPIED = {"README.md", "drift_stats.json", "trainer_state.json", "training_args.bin", "threshold.json"}


# --------------------------------------------------------------------------------------------------------------------
# Naming: module type and layer of a parameter
# --------------------------------------------------------------------------------------------------------------------

_MODULE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("lm_head", re.compile(r"(^|\.)(lm_head|embed_out|output_layer)\.")),
    (
        "embedding",
        re.compile(r"(^|\.)(embed_tokens|wte|wpe|word_embeddings|embed_in|embed_positions|position_embeddings)\."),
    ),
    ("norm", re.compile(r"(norm|ln_\d|ln_f|ln_attn|ln_mlp|layernorm)[^.]*\.(weight|bias)$", re.IGNORECASE)),
    ("attn_qkv", re.compile(r"\.(qkv_proj|c_attn|query_key_value|Wqkv|in_proj)\.")),
    ("attn_q", re.compile(r"\.(q_proj|query|q_a_proj|q_b_proj)\.")),
    ("attn_k", re.compile(r"\.(k_proj|key)\.")),
    ("attn_v", re.compile(r"\.(v_proj|value)\.")),
    ("attn_kv", re.compile(r"\.(kv_a_proj_with_mqa|kv_b_proj)\.")),
    (
        "attn_o",
        re.compile(
            r"\.(o_proj|out_proj|attn\.c_proj|attention\.dense|self_attention\.dense|attention\.output\.dense)\."
        ),
    ),
    (
        "mlp",
        re.compile(
            r"\.(mlp|feed_forward|ffn|experts|block_sparse_moe|gate_proj|up_proj|down_proj|fc1|fc2|c_fc|w1|w2|w3|dense_h_to_4h|dense_4h_to_h|intermediate|output)\b"
        ),
    ),
)
_LAYER_PATTERN = re.compile(r"\.(?:layers|h|blocks|layer|decoder_layers)\.(\d+)\.")


def module_type(name: str) -> str:
    """Classifies a parameter name into the module types the drift report groups by.

    Args:
        name (`str`): Fully qualified parameter name, e.g. `"model.layers.3.self_attn.q_proj.weight"`.

    Returns:
        `str`: One of `"embedding"`, `"lm_head"`, `"norm"` (LayerNorm / RMSNorm weights and biases), `"attn_q"`,
        `"attn_k"`, `"attn_v"`, `"attn_o"`, `"attn_qkv"` (fused projections), `"attn_kv"`, `"mlp"`, `"bias"` (biases
        of any other linear layer; norm biases stay `"norm"`) or `"other"`.
    """
    for kind, pattern in _MODULE_PATTERNS[:3]:
        if pattern.search(name):
            return kind
    if name.endswith(".bias"):
        return "bias"
    for kind, pattern in _MODULE_PATTERNS[3:]:
        if pattern.search(name):
            return kind
    return "other"


def layer_index(name: str) -> int | None:
    """Returns the transformer block index of a parameter (`model.layers.7.mlp...` -> `7`), or `None`."""
    match = _LAYER_PATTERN.search(name)
    return int(match.group(1)) if match else None


# --------------------------------------------------------------------------------------------------------------------
# Streaming sources
# --------------------------------------------------------------------------------------------------------------------


class _Source:
    """Read-only, row-block access to the tensors of one checkpoint (safetensors files or an in-memory state dict)."""

    def __init__(self, source: Any, *, revision: str | None = None, tied_weights: Mapping[str, str] | None = None):
        self._stack = contextlib.ExitStack()
        self._handles: dict[str, Any] = {}
        self.directory: Path | None = None
        self.config: dict[str, Any] = {}
        self.file_of: dict[str, str] = {}  # tensor name -> file path (safetensors sources)
        self.index: dict[str, Any] | None = None
        self.state_dict: Mapping[str, torch.Tensor] | None = None
        self.aliases: dict[str, str] = {}  # alias name -> canonical name (tied weights, counted once)

        if isinstance(source, torch.nn.Module):
            source = source.state_dict()
        if isinstance(source, Mapping):
            self.description = "<state dict>"
            self.state_dict = {
                name: tensor.detach() for name, tensor in source.items() if isinstance(tensor, torch.Tensor)
            }
            self.names = list(self.state_dict)
            self.aliases = _shared_storage_aliases(self.state_dict)
        else:
            path = _resolve_path(source, revision=revision)
            self.description = str(source)
            self._open_files(path)
            self.aliases = self._config_aliases()
        if tied_weights:
            for alias, canonical in tied_weights.items():
                if alias in self.names and canonical in self.names:
                    self.aliases[alias] = canonical
        self.canonical_names = [name for name in self.names if name not in self.aliases]

    def _open_files(self, path: Path) -> None:
        from safetensors import safe_open

        if path.is_file():
            if path.name.endswith(".index.json"):
                self.directory = path.parent
                index_path = path
            else:
                self.directory = path.parent
                index_path = None
                files = [path]
        else:
            self.directory = path
            index_path = path / _INDEX_NAME
            if not index_path.is_file():
                candidates = sorted(path.glob("*.safetensors.index.json"))
                index_path = candidates[0] if candidates else None
            if index_path is None:
                files = (
                    [path / _SINGLE_NAME]
                    if (path / _SINGLE_NAME).is_file()
                    else sorted(path.glob("*" + _WEIGHT_SUFFIX))
                )
                if not files:
                    hint = (
                        " (found PyTorch .bin weights: convert them to safetensors first)"
                        if list(path.glob("*.bin"))
                        else ""
                    )
                    raise FileNotFoundError(f"No safetensors weights in {path}{hint}.")
        if index_path is not None:
            self.index = json.loads(index_path.read_text())
            files = sorted({index_path.parent / fname for fname in self.index["weight_map"].values()})
        config_path = self.directory / "config.json"
        if config_path.is_file():
            self.config = json.loads(config_path.read_text())
        self.names = []
        for file in files:
            handle = self._stack.enter_context(safe_open(str(file), framework="pt"))
            self._handles[str(file)] = handle
            for name in handle.keys():
                if name in self.file_of:
                    raise ValueError(f"Tensor {name!r} is stored twice ({self.file_of[name]} and {file}).")
                self.file_of[name] = str(file)
                self.names.append(name)

    @property
    def ties_embeddings(self) -> bool:
        """Whether `config.json` says the LM head is tied to the input embeddings."""
        return bool(
            self.config.get("tie_word_embeddings", self.config.get("text_config", {}).get("tie_word_embeddings"))
        )

    def counterpart(self, name: str) -> str | None:
        """The tensor of this checkpoint to compare `name` against: itself, or the input embedding for a tied LM head
        that the files omit (as `save_pretrained` does); `None` if there is none."""
        if name in self.names:
            return name
        if name.endswith(_LM_HEAD_NAMES) and self.ties_embeddings:
            embeddings = [n for n in self.names if n.endswith(_EMBEDDING_NAMES)]
            if len(embeddings) == 1:
                return embeddings[0]
        return None

    def _config_aliases(self) -> dict[str, str]:
        """Tied input/output embeddings stored twice in the files: the LM head is counted as an alias."""
        if not self.ties_embeddings:
            return {}
        heads = [n for n in self.names if n.endswith(_LM_HEAD_NAMES)]
        embeddings = [n for n in self.names if n.endswith(_EMBEDDING_NAMES)]
        if len(heads) == 1 and len(embeddings) == 1 and self.shape(heads[0]) == self.shape(embeddings[0]):
            return {heads[0]: embeddings[0]}
        return {}

    # -- metadata ----------------------------------------------------------------------------------------------------

    def shape(self, name: str) -> tuple[int, ...]:
        if self.state_dict is not None:
            return tuple(self.state_dict[name].shape)
        return tuple(self._handles[self.file_of[name]].get_slice(name).get_shape())

    def dtype(self, name: str) -> str:
        if self.state_dict is not None:
            return str(self.state_dict[name].dtype).removeprefix("torch.")
        return _SAFETENSORS_DTYPES.get(self._handles[self.file_of[name]].get_slice(name).get_dtype(), "unknown")

    def files(self) -> dict[str, list[str]]:
        """File name -> tensor names, in the order the tensors are stored."""
        if self.state_dict is not None:
            return {_SINGLE_NAME: list(self.names)}
        grouped: dict[str, list[str]] = {}
        for name in self.names:
            grouped.setdefault(Path(self.file_of[name]).name, []).append(name)
        return grouped

    # -- data --------------------------------------------------------------------------------------------------------

    def rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows `start:stop` of the tensor along its first dimension (whole tensor for 0-d tensors)."""
        if self.state_dict is not None:
            tensor = self.state_dict[name]
            return tensor.reshape(1) if tensor.dim() == 0 else tensor[start:stop]
        handle = self._handles[self.file_of[name]]
        if len(self.shape(name)) == 0:
            return handle.get_tensor(name).reshape(1)
        return handle.get_slice(name)[start:stop]

    def close(self) -> None:
        self._handles.clear()
        self._stack.close()

    def __enter__(self) -> _Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}
_LOW_PRECISION = {"bfloat16": 8, "float16": 11, "float8_e4m3fn": 4, "float8_e5m2": 3}  # significand bits


def _shared_storage_aliases(state_dict: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """Names that view exactly the same memory as an earlier name (e.g. tied `lm_head.weight`)."""
    seen: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    for name, tensor in state_dict.items():
        if tensor.device.type == "meta" or tensor.numel() == 0:
            continue
        key = (
            tensor.untyped_storage().data_ptr(),
            tensor.storage_offset(),
            tuple(tensor.shape),
            tensor.stride(),
            tensor.dtype,
        )
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
    return aliases


def _resolve_path(source: str | Path, *, revision: str | None = None) -> Path:
    """A local file / folder, or a Hub repo id (`"org/name"` or `"org/name@revision"`) downloaded to the cache."""
    path = Path(source).expanduser()
    if path.exists():
        return path
    repo_id = str(source)
    if "@" in repo_id and revision is None:
        repo_id, revision = repo_id.split("@", 1)
    if repo_id.count("/") != 1:
        raise FileNotFoundError(f"{source!r} is neither a local checkpoint nor a Hub repo id of the form 'org/name'.")
    from huggingface_hub import snapshot_download

    local = snapshot_download(
        repo_id,
        revision=revision,
        allow_patterns=["*.safetensors", "*.safetensors.index.json", "*.json", "*.jinja", "*.txt", "*.model"],
    )
    return Path(local)


def _row_block(shape: Sequence[int], chunk_size: int) -> tuple[int, int]:
    """(number of rows, rows per block) so that a block holds at most ~`chunk_size` elements."""
    if len(shape) == 0:
        return 1, 1
    rows = shape[0]
    per_row = max(1, math.prod(shape[1:]))
    return rows, max(1, chunk_size // per_row)


def _f32_floor(value: float) -> float:
    """The largest float32 `<= value`, so `x <= tau` on float32 `x` is decided exactly against the real `tau`."""
    f = np.float32(value)
    if float(f) > value:
        f = np.nextafter(f, np.float32(-np.inf))
    return float(f)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


# --------------------------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------------------------


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
        out["num_below"] = {_tau_key(tau): count for tau, count in self.num_below.items()}
        out["relative_l2"] = _finite_or_none(self.relative_l2)
        out["num_changed"] = self.num_changed
        return out


def _tau_key(tau: float) -> str:
    return f"{tau:g}"


@dataclass
class DriftReport:
    r"""
    Parameter drift of a tuned checkpoint from its base (METHOD.md section 3). Built by [`compute_drift`].

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
            "relative_l2": _finite_or_none(self.relative_l2),
            "l2_delta": self.l2_delta,
            "l2_base": self.l2_base,
            "num_params": self.num_params,
            "num_changed": self.num_changed,
            "num_unchanged": self.num_unchanged,
            "num_nonfinite": self.num_nonfinite,
            "fraction_unchanged": self.fraction_unchanged,
            "update_sparsity": {_tau_key(tau): s for tau, s in self.update_sparsity.items()},
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
        raise KeyError(f"tau={tau:g} is not in the report's grid {[_tau_key(t) for t in self.taus]}.")

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
        lines += [f"| {_tau_key(tau)} | {100 * self.sparsity_at(tau):.2f}% |" for tau in taus]
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


# --------------------------------------------------------------------------------------------------------------------
# compute_drift
# --------------------------------------------------------------------------------------------------------------------


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
    Measures how far `tuned` moved from `base`, streaming tensor by tensor (METHOD.md section 3).

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
    boundaries = torch.tensor([_f32_floor(t) for t in taus], dtype=torch.float32)
    hist_edges = torch.tensor([10.0**e for e in _HIST_EDGES_LOG10], dtype=torch.float64)
    hist_edges32 = torch.tensor([_f32_floor(float(e)) for e in hist_edges], dtype=torch.float32)

    with (
        _Source(base, revision=revision, tied_weights=tied_weights) as src_base,
        _Source(tuned, revision=revision, tied_weights=tied_weights) as src_tuned,
    ):
        per_tensor: dict[str, TensorDrift] = {}
        topk = _TopK(top_k)
        hist_counts = torch.zeros(len(hist_edges) + 1, dtype=torch.int64)
        dtypes: dict[str, int] = {}
        notes: list[str] = []
        pairs = {n: src_base.counterpart(n) for n in src_tuned.canonical_names}
        names = [n for n, base_name in pairs.items() if base_name is not None]
        missing_in_base = [n for n, base_name in pairs.items() if base_name is None]
        matched = {pairs[n] for n in names}
        missing_in_tuned = [n for n in src_base.canonical_names if n not in matched and n not in src_tuned.names]
        iterator: Any = names
        if show_progress:
            from tqdm.auto import tqdm

            iterator = tqdm(names, desc="drift", unit="tensor")
        for tensor_id, name in enumerate(iterator):
            shape = src_tuned.shape(name)
            base_name = pairs[name]
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
                num_below=dict.fromkeys(taus, 0),
                aliases=sorted(a for a, c in src_tuned.aliases.items() if c == name),
            )
            dtypes[stats.dtype] = dtypes.get(stats.dtype, 0) + stats.numel
            below = torch.zeros(len(taus) + 1, dtype=torch.int64)
            rows, block = _row_block(shape, chunk_size)
            offset = 0
            for start in range(0, rows, block):
                b = src_base.rows(base_name, start, start + block).to(torch.float32).reshape(-1)
                t = src_tuned.rows(name, start, start + block).to(torch.float32).reshape(-1)
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
                # bucket i holds boundaries[i-1] < |d| <= boundaries[i]; zeros fall in bucket 0.
                below += torch.bincount(torch.bucketize(ad, boundaries, right=False), minlength=len(taus) + 1)
                nonzero = ad[ad > 0]
                hist_counts += torch.bincount(
                    torch.bucketize(nonzero, hist_edges32, right=False), minlength=len(hist_edges) + 1
                )
                topk.update(ad, d, b, tensor_id, offset)
                offset += ad.numel()
            cumulative = torch.cumsum(below, 0)
            zeros_in_bucket0 = stats.num_unchanged + stats.num_nonfinite  # non-finite were zeroed above
            for i, tau in enumerate(taus):
                stats.num_below[tau] = int(cumulative[i]) - zeros_in_bucket0
            per_tensor[name] = stats

        # ---- aggregates ------------------------------------------------------------------------------------------
        total_base = sum(t.base_sq for t in per_tensor.values())
        total_delta = sum(t.delta_sq for t in per_tensor.values())
        num_params = sum(t.numel for t in per_tensor.values())
        num_unchanged = sum(t.num_unchanged for t in per_tensor.values())
        num_nonfinite = sum(t.num_nonfinite for t in per_tensor.values())
        num_changed = num_params - num_unchanged - num_nonfinite
        update_sparsity = {
            tau: (sum(t.num_below[tau] for t in per_tensor.values()) / num_changed if num_changed else 0.0)
            for tau in taus
        }

        def aggregate(group: list[TensorDrift]) -> dict[str, Any]:
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
                "relative_l2": _finite_or_none(rel),
                "share_of_sq_drift": delta_sq / total_delta if total_delta > 0 else 0.0,
                "fraction_unchanged": unchanged / numel if numel else 0.0,
                "max_abs_delta": max((t.max_abs_delta for t in group), default=0.0),
                "update_sparsity": {
                    _tau_key(tau): (sum(t.num_below[tau] for t in group) / changed if changed else 0.0) for tau in taus
                },
            }

        by_type: dict[str, list[TensorDrift]] = {}
        by_layer: dict[int, list[TensorDrift]] = {}
        for t in per_tensor.values():
            by_type.setdefault(t.module_type, []).append(t)
            if t.layer is not None:
                by_layer.setdefault(t.layer, []).append(t)

        top_entries = []
        for abs_delta, tensor_id, flat, delta, base_value in topk.sorted():
            name = names[tensor_id]
            shape = per_tensor[name].shape
            index = [int(i) for i in np.unravel_index(flat, shape)] if shape else []
            top_entries.append(
                {
                    "name": name,
                    "index": index,
                    "module_type": per_tensor[name].module_type,
                    "layer": per_tensor[name].layer,
                    "abs_delta": abs_delta,
                    "delta": delta,
                    "base": base_value,
                }
            )
        top_counts: dict[int, dict[str, int]] = {}
        for k in TOP_K_GROUPS:
            if k <= top_k:
                counts: dict[str, int] = {}
                for entry in top_entries[:k]:
                    counts[entry["module_type"]] = counts.get(entry["module_type"], 0) + 1
                top_counts[k] = dict(sorted(counts.items(), key=lambda kv: -kv[1]))

        # ---- notes -----------------------------------------------------------------------------------------------
        notes.append("Deltas computed in float32 from the stored dtypes; sums of squares accumulated in float64.")
        for dtype_name, count in dtypes.items():
            stored = dtype_name.split("->")[-1]
            if stored in _LOW_PRECISION:
                bits = _LOW_PRECISION[stored]
                notes.append(
                    f"{count:,} coordinates are stored in {stored}: a weight w cannot move by less than about "
                    f"|w|*2^-{bits - 1} (one ulp), so smaller updates were rounded away when the checkpoint was saved and "
                    "count as exactly unchanged; nonzero deltas are multiples of the ulp."
                )
            if "->" in dtype_name:
                notes.append(
                    f"{count:,} coordinates changed dtype between base and tuned ({dtype_name}); part of the delta is rounding."
                )
        all_aliases = {**src_base.aliases, **src_tuned.aliases}
        if all_aliases:
            notes.append(
                "Tied tensors counted once: "
                + ", ".join(f"{alias} = {canonical}" for alias, canonical in sorted(all_aliases.items()))
                + "."
            )
        if missing_in_base or missing_in_tuned:
            notes.append(
                f"Skipped {len(missing_in_base)} tensor(s) only in the tuned checkpoint and {len(missing_in_tuned)} only in the base."
            )
        if num_nonfinite:
            notes.append(f"{num_nonfinite:,} coordinates have a non-finite delta (NaN/inf) and were excluded.")

        return DriftReport(
            base=src_base.description,
            tuned=src_tuned.description,
            taus=taus,
            relative_l2=math.sqrt(total_delta / total_base)
            if total_base > 0
            else (0.0 if total_delta == 0 else math.inf),
            l2_delta=math.sqrt(total_delta),
            l2_base=math.sqrt(total_base),
            num_params=num_params,
            num_unchanged=num_unchanged,
            num_nonfinite=num_nonfinite,
            update_sparsity=update_sparsity,
            max_abs_delta=max((t.max_abs_delta for t in per_tensor.values()), default=0.0),
            per_tensor=per_tensor,
            per_module_type={kind: aggregate(group) for kind, group in sorted(by_type.items())},
            per_layer={layer: aggregate(group) for layer, group in sorted(by_layer.items())},
            top_k=top_entries,
            top_k_by_module_type=top_counts,
            histogram={"edges_log10": list(_HIST_EDGES_LOG10), "counts": hist_counts.tolist()},
            dtypes=dtypes,
            notes=notes,
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
            _tau_key(tau): (s, other.update_sparsity.get(tau)) for tau, s in report.update_sparsity.items()
        },
    }


# --------------------------------------------------------------------------------------------------------------------
# Thresholded checkpoints
# --------------------------------------------------------------------------------------------------------------------


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

    This is the magnitude-thresholded checkpoint of METHOD.md section 3, a post-hoc diagnostic: evaluating it shows
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
    tau32 = _f32_floor(float(tau))
    num_params = num_changed = num_reset = 0
    with (
        _Source(base, revision=revision, tied_weights=tied_weights) as src_base,
        _Source(tuned, revision=revision, tied_weights=tied_weights) as src_tuned,
    ):
        for file_name, names in src_tuned.files().items():
            tensors: dict[str, torch.Tensor] = {}
            for name in names:
                shape = src_tuned.shape(name)
                rows, block = _row_block(shape, chunk_size)
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
            (output_dir / _INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
        if copy_files and src_tuned.directory is not None:
            for item in src_tuned.directory.iterdir():
                if (
                    item.is_file()
                    and not item.name.endswith(_WEIGHT_SUFFIX)
                    and not item.name.endswith((".safetensors.index.json", ".bin", ".pt", ".pth"))
                    and item.name not in _NOT_COPIED
                ):
                    shutil.copy2(item, output_dir / item.name)

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


def threshold_sweep(
    base: str | Path | Mapping[str, torch.Tensor] | torch.nn.Module,
    tuned: str | Path | Mapping[str, torch.Tensor] | torch.nn.Module,
    evaluate_fn: Callable[[Path], float | Mapping[str, float]],
    taus: Sequence[float] = DEFAULT_TAUS,
    *,
    work_dir: str | Path | None = None,
    keep_checkpoints: bool = False,
    metric: str | None = None,
    plot_path: str | Path | None = None,
    results_path: str | Path | None = None,
    **threshold_kwargs: Any,
) -> list[dict[str, Any]]:
    r"""
    Target-task accuracy against update sparsity: thresholds `tuned` at every tau, evaluates each checkpoint.

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
        plot_path (`str` or `Path`, *optional*): Where to save the accuracy-vs-sparsity plot (PNG).
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
            ckpt = root / f"tau_{_tau_key(tau)}"
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
    if plot_path is not None:
        from .plots import plot_threshold_sweep

        plot_threshold_sweep(rows, plot_path)
    return rows
