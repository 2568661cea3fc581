# Copyright 2026 The hf_es Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
"""
Make `evaluate.load("pass_at_k")` and `evaluate.load("maj_at_k")` work by bare name.

`evaluate.load(name)` with a bare name (evaluate 0.4.x, `evaluate.loading.evaluation_module_factory`) tries, in order:

1. a local script `./<name>/<name>.py` or `./<name>.py` relative to the working directory;
2. the Hub Space `evaluate-metric/<name>` (skipped offline: `HF_HUB_OFFLINE=1` or no network);
3. its module cache, `$HF_MODULES_CACHE/evaluate_modules/metrics/evaluate-metric--<name>/<hash>/<name>.py` (the
   most recently written `<hash>`), which is where step 2 stores what it downloads.

Registration writes our metric folders into step 3's location with evaluate's own
`LocalEvaluationModuleFactory`, under the canonical name `evaluate-metric/<name>`: the cache then holds exactly what
downloading such a Space would have produced. The Hub's `evaluate-metric` namespace has no `pass_at_k` or
`maj_at_k` (evaluate's canonical metrics are its repository's `metrics/` folder; checked for evaluate 0.4.6), so
step 2 answers "not found" and step 3 loads ours, online and offline. Should the Hub ever publish one of these
names, evaluate would load the Hub's online, and offline too once it has downloaded it (it becomes the most recent
cache entry); [`hf_es.metrics.load`] always loads ours.

Registration runs on `import hf_es` when our files are not in the cache yet (once per hf_es version; set
`HF_ES_REGISTER_METRICS=0` to turn this off), or explicitly with `python -m hf_es.metrics register`.
`python -m hf_es.metrics unregister` removes exactly the cache entries registration wrote.
"""

from __future__ import annotations

import filecmp
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["CANONICAL_NAMESPACE", "ensure_registered", "modules_cache", "register", "registered", "unregister"]

logger = logging.getLogger(__name__)

CANONICAL_NAMESPACE = "evaluate-metric"
METRICS_DIR = Path(__file__).resolve().parent
AVAILABLE_METRICS = ("pass_at_k", "maj_at_k")
_FALSE = {"0", "false", "no", "off"}


def modules_cache() -> Path:
    """
    `evaluate`'s module cache, computed as `evaluate.config.HF_MODULES_CACHE` does, without importing `evaluate`.

    Returns:
        `Path`: `$HF_MODULES_CACHE`, else `$HF_HOME/modules`, else `$XDG_CACHE_HOME/huggingface/modules`, else
        `~/.cache/huggingface/modules`; once `evaluate` is imported, the value it read then (it reads it once).
    """
    if "evaluate.config" in sys.modules:
        return Path(sys.modules["evaluate.config"].HF_MODULES_CACHE)
    if os.environ.get("HF_MODULES_CACHE"):
        return Path(os.environ["HF_MODULES_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME", "~/.cache")
    return Path(os.path.expanduser(os.environ.get("HF_HOME", os.path.join(xdg, "huggingface")))) / "modules"


def _cache_folder(name: str) -> Path:
    return modules_cache() / "evaluate_modules" / "metrics" / f"{CANONICAL_NAMESPACE}--{name}"


def _source_files(name: str) -> list[Path]:
    """The metric script and the helper modules it imports (what evaluate copies), not the Space's app.py."""
    folder = METRICS_DIR / name
    return [path for path in sorted(folder.glob("*.py")) if path.name not in ("__init__.py", "app.py")]


def _is_ours(hash_dir: Path, name: str) -> bool:
    # evaluate writes `<name>.json` with the script it copied; ours comes from a `hf_es/metrics/<name>/` folder.
    try:
        with open(hash_dir / f"{name}.json", encoding="utf-8") as f:
            original = Path(json.load(f)["original file path"])
    except (OSError, ValueError, KeyError):
        return False
    return original.parts[-4:-1] == ("hf_es", "metrics", name)


def registered(name: str) -> list[Path]:
    """
    Cache entries that registration wrote for a metric.

    Args:
        name (`str`): `"pass_at_k"` or `"maj_at_k"`.

    Returns:
        `list[Path]`: the `<hash>` folders (any hf_es version) under `evaluate-metric--<name>`.
    """
    folder = _cache_folder(name)
    if not folder.is_dir():
        return []
    return sorted(path for path in folder.iterdir() if path.is_dir() and _is_ours(path, name))


def _is_current(name: str) -> bool:
    sources = _source_files(name)
    return any(
        all((entry / src.name).is_file() and filecmp.cmp(src, entry / src.name, shallow=False) for src in sources)
        for entry in registered(name)
    )


def _check_names(names: Iterable[str]) -> list[str]:
    names = list(names)
    unknown = [name for name in names if name not in AVAILABLE_METRICS]
    if unknown:
        raise ValueError(f"Unknown hf_es metric(s) {unknown}; available: {', '.join(AVAILABLE_METRICS)}.")
    return names


def register(names: Iterable[str] = AVAILABLE_METRICS) -> dict[str, str]:
    """
    Write the metrics into `evaluate`'s module cache under `evaluate-metric/<name>` (see the module docstring).

    Idempotent: evaluate names the entry after a hash of the files, so registering the same files again changes
    nothing, and a new hf_es version adds a newer entry that evaluate prefers.

    Args:
        names (iterable of `str`, *optional*): metrics to register (default: all).

    Returns:
        `dict[str, str]`: for every metric, the Python module path evaluate will import.
    """
    from evaluate.loading import LocalEvaluationModuleFactory, init_dynamic_modules

    modules = {}
    dynamic_modules_path = init_dynamic_modules(hf_modules_cache=modules_cache())
    for name in _check_names(names):
        factory = LocalEvaluationModuleFactory(
            str(METRICS_DIR / name / f"{name}.py"), dynamic_modules_path=dynamic_modules_path
        )
        # The canonical Hub name gives the cache layout that `evaluate.load(name)` falls back to.
        factory.name = f"{CANONICAL_NAMESPACE}/{name}"
        modules[name] = factory.get_module().module_path
    return modules


def unregister(names: Iterable[str] = AVAILABLE_METRICS) -> list[Path]:
    """
    Remove the cache entries written by [`register`] (entries downloaded from the Hub are left alone).

    `import hf_es` registers again unless `HF_ES_REGISTER_METRICS=0`.

    Args:
        names (iterable of `str`, *optional*): metrics to unregister (default: all).

    Returns:
        `list[Path]`: the folders removed.
    """
    removed = []
    for name in _check_names(names):
        for entry in registered(name):
            shutil.rmtree(entry)
            removed.append(entry)
    return removed


def ensure_registered() -> None:
    """
    Register the metrics unless they already are (cheap: compares files, imports nothing) or
    `HF_ES_REGISTER_METRICS=0`. Never raises: a read-only cache or a missing `evaluate` only logs a warning.
    """
    if os.environ.get("HF_ES_REGISTER_METRICS", "1").strip().lower() in _FALSE:
        return
    try:
        missing = [name for name in AVAILABLE_METRICS if not _is_current(name)]
        if missing:
            register(missing)
    except Exception as error:  # registration is a convenience: it must never break `import hf_es`
        logger.warning(
            f"Could not register the hf_es metrics with `evaluate` ({error}); `evaluate.load('pass_at_k')` may not "
            "find them by bare name. Use `hf_es.metrics.load('pass_at_k')`, or run `python -m hf_es.metrics register`."
        )
