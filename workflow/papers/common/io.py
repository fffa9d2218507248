"""Reading and writing the DAG's files: Parquet tables and JSON, deterministic and atomic enough.

Every writer creates the parent folder; JSON is written with sorted keys and a trailing newline so
that two runs of the same config give byte-identical files.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def ensure_parent(path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_parquet(df: pd.DataFrame, path: str | Path) -> None:
    df.to_parquet(ensure_parent(path), index=False)


def read_parquet(path: str | Path) -> pd.DataFrame:
    return pd.read_parquet(path)


def read_parquets(paths) -> pd.DataFrame:
    """Concatenate the tables of several jobs (e.g. one per seed or arm) into one."""
    return pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf; None reads as "not measured"
    return value


def write_json(data: Any, path: str | Path) -> None:
    text = json.dumps(_jsonable(data), indent=2, sort_keys=True, allow_nan=False)
    ensure_parent(path).write_text(text + "\n")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())
