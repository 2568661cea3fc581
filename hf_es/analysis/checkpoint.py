"""Read-only, row-block streaming access to the tensors of a checkpoint: safetensors files (local or from the Hub,
sharded or not) or an in-memory state dict, with tied weights counted once."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["INDEX_NAME", "LOW_PRECISION_BITS", "WEIGHT_SUFFIX", "CheckpointSource", "f32_floor", "row_block"]

WEIGHT_SUFFIX = ".safetensors"
INDEX_NAME = "model.safetensors.index.json"
_SINGLE_NAME = "model.safetensors"
_EMBEDDING_NAMES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")
_LM_HEAD_NAMES = ("lm_head.weight", "embed_out.weight")


class CheckpointSource:
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
            index_path = path / INDEX_NAME
            if not index_path.is_file():
                candidates = sorted(path.glob("*.safetensors.index.json"))
                index_path = candidates[0] if candidates else None
            if index_path is None:
                files = (
                    [path / _SINGLE_NAME]
                    if (path / _SINGLE_NAME).is_file()
                    else sorted(path.glob("*" + WEIGHT_SUFFIX))
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

    def __enter__(self) -> CheckpointSource:
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
LOW_PRECISION_BITS = {"bfloat16": 8, "float16": 11, "float8_e4m3fn": 4, "float8_e5m2": 3}  # significand bits


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


def row_block(shape: Sequence[int], chunk_size: int) -> tuple[int, int]:
    """(number of rows, rows per block) so that a block holds at most ~`chunk_size` elements."""
    if len(shape) == 0:
        return 1, 1
    rows = shape[0]
    per_row = max(1, math.prod(shape[1:]))
    return rows, max(1, chunk_size // per_row)


def f32_floor(value: float) -> float:
    """The largest float32 `<= value`, so `x <= tau` on float32 `x` is decided exactly against the real `tau`."""
    f = np.float32(value)
    if float(f) > value:
        f = np.nextafter(f, np.float32(-np.inf))
    return float(f)
