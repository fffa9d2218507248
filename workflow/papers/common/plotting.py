"""Matplotlib figures saved reproducibly (no timestamps in the PNG), for reports and the HTML report."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from papers.common.io import ensure_parent  # noqa: E402


def subplots(nrows: int = 1, ncols: int = 1, *, width: float = 4.5, height: float = 3.4, **kwargs):
    """`plt.subplots` with a panel size in inches; returns (fig, axes)."""
    return plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kwargs)


def savefig(fig, path: str | Path, *, dpi: int = 120) -> None:
    fig.tight_layout()
    fig.savefig(ensure_parent(path), dpi=dpi, metadata={"Software": None})
    plt.close(fig)
