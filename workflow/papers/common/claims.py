"""The claims contract: each headline claim of a paper, measured, with a verdict computed in code.

A paper's report stage builds a list of :class:`Claim` from measured data and calls
:func:`write_claims`, which validates the file against ``workflow/schemas/claims.schema.json``.
``holds`` is always the value of a comparison in code (``criterion`` states it in words and with
the numbers); it is never written by hand.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from papers.common.io import read_json, write_json

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "claims.schema.json"


@dataclasses.dataclass
class Claim:
    id: str
    statement: str  # the claim in words
    paper: str  # the paper's number or direction
    measured: Any  # a number, or a dict of named numbers / strings
    criterion: str  # the rule, in words and as applied, with the numbers
    holds: bool  # computed by the criterion from `measured`
    note: str = ""  # why it does not hold, or what limits it

    def __post_init__(self):
        if not isinstance(self.holds, (bool, np.bool_)):
            raise TypeError(f"claim {self.id}: holds must be the bool result of a comparison, got {self.holds!r}")
        self.holds = bool(self.holds)


def validate_claims(data: dict) -> None:
    """Raise ``jsonschema.ValidationError`` if `data` breaks the claims contract."""
    import jsonschema

    jsonschema.validate(data, read_json(SCHEMA))


def write_claims(claims: list[Claim], path: str | Path, *, paper: str, scale: str) -> dict:
    data = {
        "paper": paper,
        "scale": scale,
        "claims": [{**{k: v for k, v in dataclasses.asdict(c).items() if k != "note" or v}, "scale": scale}
                   for c in claims],
    }
    write_json(data, path)
    validate_claims(read_json(path))  # what was written, NaN turned into null included
    return data


def verdict(holds: bool) -> str:
    return "holds" if holds else "does not hold"
