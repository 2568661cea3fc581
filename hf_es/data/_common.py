"""Shared helpers for the dataset loaders: source resolution (Hub id, local path, packaged copy) and chat prompts."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datasets import Dataset

logger = logging.getLogger(__name__)

#: Folder with the JSONL copies shipped in the package (GSM8K, MATH-500) and their licences.
PACKAGED_DATA_DIR = Path(__file__).resolve().parent / "files"

#: Default system prompt of the math loaders: step-by-step reasoning, final answer in `\\boxed{}`.
BOXED_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."

_TRUE = {"1", "true", "yes", "on"}


def is_offline() -> bool:
    """Whether the Hugging Face Hub must not be contacted (`HF_HUB_OFFLINE` or `HF_DATASETS_OFFLINE` set)."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def packaged_path(name: str, split: str) -> Path:
    """Path of a packaged JSONL file, e.g. `packaged_path("gsm8k", "test")`."""
    return PACKAGED_DATA_DIR / name / f"{split}.jsonl"


def read_jsonl(path: str | os.PathLike) -> Dataset:
    """Reads a JSON-lines file into a `datasets.Dataset` (in memory, no cache files)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return Dataset.from_list(rows)


def _load_local(path: Path, split: str) -> Dataset:
    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "state.json").exists():
            from datasets import load_from_disk

            ds = load_from_disk(str(path))
            return ds[split] if hasattr(ds, "keys") else ds
        for candidate in (
            path / f"{split}.jsonl",
            path / f"{split}.json",
            path / f"{split}.parquet",
            *sorted(path.glob(f"{split}-*.parquet")),
            *sorted(path.glob(f"*/{split}-*.parquet")),
            *sorted(path.glob(f"{split}/*.parquet")),
        ):
            if candidate.exists():
                return _load_local(candidate, split)
        raise FileNotFoundError(f"No {split!r} split (.jsonl/.json/.parquet) found under {path}")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        try:
            return read_jsonl(path)
        except json.JSONDecodeError:  # a single JSON array
            with open(path, encoding="utf-8") as f:
                return Dataset.from_list(json.load(f))
    if suffix == ".parquet":
        return Dataset.from_parquet(str(path))
    raise ValueError(f"Unsupported data file {path} (expected .jsonl, .json or .parquet)")


def load_source(
    name_or_path: str | os.PathLike,
    *,
    split: str,
    hub_id: str,
    packaged_name: str,
    hub_config: str | None = None,
    offline: bool | None = None,
) -> Dataset:
    """Loads raw rows from a local path, the Hub, or the packaged copy.

    Resolution order: an existing local file/folder is read directly; otherwise, for the canonical Hub id, the
    packaged copy is used when offline (`offline=True`, or `HF_HUB_OFFLINE`/`HF_DATASETS_OFFLINE` set when
    `offline=None`) or when loading from the Hub fails (with a warning); any other id is loaded from the Hub.

    Args:
        name_or_path (`str` or `os.PathLike`): Hub dataset id or local path.
        split (`str`): split name.
        hub_id (`str`): the canonical Hub id whose data is shipped in the package.
        packaged_name (`str`): folder under [`PACKAGED_DATA_DIR`].
        hub_config (`str`, *optional*): Hub config name.
        offline (`bool`, *optional*): never contact the Hub; `None` follows `HF_HUB_OFFLINE`/`HF_DATASETS_OFFLINE`.

    Returns:
        `datasets.Dataset`: the raw rows.
    """
    path = Path(os.fspath(name_or_path)).expanduser()
    if path.exists():
        return _load_local(path, split)
    name = os.fspath(name_or_path)
    canonical = name == hub_id
    local_copy = packaged_path(packaged_name, split)
    if offline is None:
        offline = is_offline()
    if canonical and offline:
        if not local_copy.exists():
            raise FileNotFoundError(f"{hub_id} split {split!r} is not shipped with hf_es and the Hub is offline")
        return read_jsonl(local_copy)
    if offline:
        raise FileNotFoundError(f"{name!r} is not a local path and the Hub is offline")
    from datasets import load_dataset

    try:
        return load_dataset(name, hub_config, split=split)
    except Exception as e:  # noqa: BLE001 - no network, Hub down, ...
        if canonical and local_copy.exists():
            logger.warning("Could not load %s from the Hub (%s); using the copy shipped with hf_es.", name, e)
            return read_jsonl(local_copy)
        raise


def hashed_split(key: str, held_out_fraction: float) -> str:
    """`"test"` or `"train"` for a problem identified by `key`: a stable hash of the key maps it to [0, 1), and the
    first `held_out_fraction` of that interval is the held-out split. Independent of any generator state, so the
    same problem always lands in the same split."""
    bucket = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64
    return "test" if bucket < held_out_fraction else "train"


def build_messages(user: str, system_prompt: str | None = None, instruction: str | None = None) -> list[dict]:
    """Chat messages for one problem.

    Args:
        user (`str`): the problem text.
        system_prompt (`str`, *optional*): a system message (omitted if `None` or empty).
        instruction (`str`, *optional*): appended to the user message after a blank line (for models without a
            system role).

    Returns:
        `list[dict]`: `[{"role": "system", ...}, {"role": "user", ...}]`.
    """
    messages = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    content = f"{user}\n\n{instruction}" if instruction else user
    messages.append({"role": "user", "content": content})
    return messages


def finalize(
    ds: Dataset,
    *,
    to_user_text: Callable[[dict], str],
    to_solution: Callable[[dict], Any],
    system_prompt: str | None,
    instruction: str | None = None,
    conversational: bool = True,
    num_samples: int | None = None,
    seed: int | None = None,
    extra: Callable[[dict], dict] | None = None,
) -> Dataset:
    """Subsamples `ds` and adds the `prompt` and `solution` columns.

    Args:
        ds: The raw rows.
        to_user_text: Row -> the problem text of its user message.
        to_solution: Row -> the `solution` column.
        system_prompt: System message (`None` omits it).
        instruction: Text appended to each problem.
        conversational: `prompt` as chat messages; `False` joins them into one string.
        num_samples: Keep this many rows (after shuffling with `seed` if given); `None` keeps all.
        seed: Shuffle seed for `num_samples`.
        extra: Row -> further columns.

    Returns:
        `datasets.Dataset` with `prompt`, `solution` and the original (and `extra`) columns.
    """
    if num_samples is not None:
        if seed is not None:
            ds = ds.shuffle(seed=seed)
        ds = ds.select(range(min(num_samples, len(ds))))

    def convert(row: dict) -> dict:
        messages = build_messages(to_user_text(row), system_prompt, instruction)
        if conversational:
            prompt: Any = messages
        else:
            prompt = "\n\n".join(m["content"] for m in messages)
        out = {"prompt": prompt, "solution": to_solution(row)}
        if extra is not None:
            out.update(extra(row))
        return out

    return ds.map(convert, desc=None, load_from_cache_file=False)
