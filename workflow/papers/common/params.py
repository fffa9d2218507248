"""A paper's parameters as one frozen dataclass, built from its section of the config.

Each paper defines ``@dataclass(frozen=True) class Params`` whose fields cite their source (the
paper's section or table, or the official code) and whose defaults are the paper's own values;
the config of a scale overrides what differs. :func:`from_config` builds it and names any key it
does not know, so a typo fails before any work, with the key in the message.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, TypeVar

T = TypeVar("T")


def _freeze(value: Any) -> Any:
    """Lists become tuples (hashable, immutable); mappings are frozen recursively."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, Mapping):
        return {k: _freeze(v) for k, v in value.items()}
    return value


def from_config(cls: type[T], cfg: Mapping[str, Any], where: str = "config") -> T:
    """Build dataclass `cls` from mapping `cfg`; nested dataclass fields from nested mappings.

    Raises:
        KeyError: a key of `cfg` is not a field of `cls` (the message names ``where.key``).
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(cfg) - set(fields))
    if unknown:
        raise KeyError(f"unknown parameter(s) {', '.join(f'{where}.{k}' for k in unknown)} "
                       f"(known: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, value in cfg.items():
        sub = _dataclass_type(cls, name)
        if sub is not None and isinstance(value, Mapping):
            kwargs[name] = from_config(sub, value, f"{where}.{name}")
        else:
            kwargs[name] = _freeze(value)
    return cls(**kwargs)


def _dataclass_type(cls, name):
    """The dataclass type of field `name`, if it is one (resolves string annotations)."""
    import typing

    hints = typing.get_type_hints(cls)
    hint = hints.get(name)
    return hint if dataclasses.is_dataclass(hint) else None


def to_dict(params) -> dict:
    """A dataclass as plain JSON-ready data (tuples become lists)."""
    return _thaw(dataclasses.asdict(params))


def _thaw(value):
    if isinstance(value, (list, tuple)):
        return [_thaw(v) for v in value]
    if isinstance(value, dict):
        return {k: _thaw(v) for k, v in value.items()}
    return value
