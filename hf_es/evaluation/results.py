"""The Pass@K results file: identity of the evaluated weights, resume checks, atomic saves and summaries."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._io import write_text_atomic
from ..metrics.estimators import estimate_pass_at_k

__all__ = [
    "FORMAT_VERSION",
    "RESUME_KEYS",
    "check_resume",
    "load_results",
    "model_revision",
    "prompt_hash",
    "save_results",
    "summarize",
    "summary_line",
]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 2
"""Version 2: prompts follow the TRL convention (text sent raw, chat messages templated) and tasks can be generated."""

RESUME_KEYS = (
    "dataset",
    "split",
    "data_seed",
    "task_options",
    "reward",
    "num_samples",
    "temperature",
    "top_p",
    "top_k",
    "max_new_tokens",
    "seed",
    "system_prompt",
)
"""Settings that change the numbers: stored results are reused only when all of them match."""


def model_revision(model_name: str, commit_hash: str | None = None, revision: str | None = None) -> dict[str, Any]:
    """Identifies the weights that were evaluated.

    A local folder is fingerprinted from its weight files (name, size, and a hash of their first and last MiB); a Hub
    checkpoint records the requested revision and the resolved commit.

    Args:
        model_name: Local folder or Hub id.
        commit_hash: The commit transformers resolved (`config._commit_hash`).
        revision: The requested Hub revision.

    Returns:
        `{"source": "local", "path", "fingerprint"}` or `{"source": "hub", "revision", "commit"}`.
    """
    path = Path(model_name)
    if not path.is_dir():
        return {"source": "hub", "revision": revision or "main", "commit": commit_hash}
    digest = hashlib.sha256()
    for file in sorted(path.iterdir()):
        if file.suffix in (".safetensors", ".bin", ".gguf", ".pt") or file.name == "config.json":
            size = file.stat().st_size
            digest.update(f"{file.name}:{size}".encode())
            with open(file, "rb") as handle:
                digest.update(handle.read(1 << 20))
                if size > 2 << 20:
                    handle.seek(-(1 << 20), os.SEEK_END)
                    digest.update(handle.read())
    return {"source": "local", "path": str(path.resolve()), "fingerprint": digest.hexdigest()[:16]}


def prompt_hash(prompt: Any) -> str:
    """A short hash of a prompt, so a stored problem whose prompt changed is regenerated."""
    return hashlib.sha256(json.dumps(prompt, sort_keys=True).encode()).hexdigest()[:12]


def load_results(path: Path) -> dict[str, Any]:
    """Reads the results JSON, or returns an empty skeleton when there is none."""
    if not path.exists():
        return {"format_version": FORMAT_VERSION, "checkpoints": {}}
    with open(path) as handle:
        results = json.load(handle)
    if results.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path} has format_version {results.get('format_version')}, expected {FORMAT_VERSION}; use another "
            "--output_dir."
        )
    return results


def save_results(results: Mapping[str, Any], path: Path) -> None:
    """Writes the JSON atomically (a crash never leaves a truncated file)."""
    write_text_atomic(path, json.dumps(results, indent=1))


def check_resume(entry: dict[str, Any], settings: Mapping[str, Any], name: str, overwrite: bool) -> dict[str, Any]:
    """The stored entry of a checkpoint if its settings match, `{}` if they differ and `overwrite` is set.

    Raises:
        ValueError: If settings in [`RESUME_KEYS`] differ and `overwrite` is not set.
    """
    stored = entry.get("settings", {})
    mismatched = [key for key in RESUME_KEYS if key in stored and stored[key] != settings[key]]
    if mismatched and not overwrite:
        details = ", ".join(f"{key}: stored {stored[key]!r} vs now {settings[key]!r}" for key in mismatched)
        raise ValueError(
            f"Stored results for {name} were produced with different settings ({details}). Use another --output_dir "
            "or pass --overwrite to discard them."
        )
    if mismatched:
        logger.warning("Discarding stored results for %s (settings changed: %s).", name, mismatched)
        return {}
    return entry


def summarize(problems: Mapping[str, Mapping[str, Any]], num_samples: int) -> dict[str, Any]:
    """Aggregates per-problem records into Pass@K (K = 1..M), Maj@K and greedy accuracy, all as fractions in [0, 1].

    Args:
        problems: Per problem id, a record with `num_samples`, `num_correct`, optionally `maj_correct` (list over
            K = 1..M) and `greedy_correct`.
        num_samples: M.

    Returns:
        `num_problems`, `mean_sample_accuracy`, `pass@k` and `maj@k` (dicts keyed by K as a string), and
        `greedy_accuracy` (or `None`).
    """
    records = list(problems.values())
    if not records:
        return {"num_problems": 0}
    ks = range(1, num_samples + 1)
    pass_at = {
        str(k): sum(estimate_pass_at_k(r["num_samples"], r["num_correct"], k) for r in records) / len(records)
        for k in ks
    }
    summary: dict[str, Any] = {
        "num_problems": len(records),
        "mean_sample_accuracy": sum(r["num_correct"] / r["num_samples"] for r in records) / len(records),
        "pass@k": pass_at,
    }
    if all(r.get("maj_correct") is not None for r in records):
        summary["maj@k"] = {str(k): sum(r["maj_correct"][k - 1] for r in records) / len(records) for k in ks}
    else:
        summary["maj@k"] = None
    greedy = [r["greedy_correct"] for r in records if r.get("greedy_correct") is not None]
    summary["greedy_accuracy"] = sum(greedy) / len(greedy) if greedy and len(greedy) == len(records) else None
    return summary


def summary_line(summary: Mapping[str, Any], num_samples: int) -> str:
    """One log line of a checkpoint's summary, in the metric's units (fractions in [0, 1])."""
    line = ", ".join(
        f"pass@{k}={summary['pass@k'][str(k)]:.3f}" for k in sorted({1, min(16, num_samples), num_samples})
    )
    if summary.get("maj@k"):
        line += f", maj@{num_samples}={summary['maj@k'][str(num_samples)]:.3f}"
    if summary.get("greedy_accuracy") is not None:
        line += f", greedy={summary['greedy_accuracy']:.3f}"
    line += " (fractions of problems)"
    if summary.get("mean_token_entropy") is not None:
        line += f"; token entropy {summary['mean_token_entropy']:.3f} nats"
    elif summary.get("mean_token_entropy_lower_bound") is not None:
        bound, k = summary["mean_token_entropy_lower_bound"], summary.get("entropy_top_k")
        line += f"; token entropy >= {bound:.3f} nats (lower bound from the top-{k} log-probabilities)"
    return line
