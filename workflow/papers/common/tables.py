"""Results tables: our numbers beside the paper's, mean +- std over seeds, as Markdown and CSV."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from papers.common.io import ensure_parent


def mean_std(values, digits: int = 3) -> str:
    """'0.882 +- 0.012' over seeds (sample std; a single value prints alone)."""
    values = np.asarray(values, dtype=float)
    if values.size == 1:
        return f"{values[0]:.{digits}g}"
    return f"{values.mean():.{digits}g} +- {values.std(ddof=1):.{digits}g}"


def _cell(value) -> str:
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            return "n/a"
        return f"{value:.4g}"
    return str(value)


def to_markdown(df: pd.DataFrame) -> str:
    header = "| " + " | ".join(str(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"


def write_table(df: pd.DataFrame, md_path: str | Path, csv_path: str | Path, *, caption: str = "",
                csv_df: pd.DataFrame | None = None) -> None:
    """Write `table.md` (`df`, with a caption line) and `table.csv` (`csv_df`, default `df`).

    The Markdown table is for reading (mean +- std strings); pass the numbers behind it as `csv_df`
    (one column per quantity) so that the CSV stays machine-readable. CSV floats keep 6 significant
    digits, which also makes reruns byte-identical across BLAS thread counts.
    """
    md = (caption.strip() + "\n\n" if caption else "") + to_markdown(df)
    ensure_parent(md_path).write_text(md)
    (df if csv_df is None else csv_df).to_csv(ensure_parent(csv_path), index=False, float_format="%.6g")
