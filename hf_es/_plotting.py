"""The matplotlib set-up every figure of hf_es shares (training curves, drift, Pass@K, the reproduction report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["pyplot", "save_figure"]


def pyplot() -> Any:
    """`matplotlib.pyplot` on the file-only `Agg` backend (unless a backend was chosen already), imported on first
    use so that importing hf_es never pulls in matplotlib."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path) -> Path:
    """Lays out `fig`, writes it to `path` as a 120-dpi PNG (creating the folder) and closes it.

    Returns:
        The path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
    return path
