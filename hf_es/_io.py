"""File writing shared by the packages that write results a later run reads back (evaluation, reproduction)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_text_atomic"]


def write_text_atomic(path: Path, text: str) -> Path:
    """Writes `text` to `path` through `<path>.tmp` and a rename, so a crash never leaves a truncated file that a
    resuming run would take for a finished one. Creates the parent folders.

    Returns:
        `path`.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
