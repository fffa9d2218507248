"""A paper's parameters as one frozen dataclass, built from its section of the config.

Each paper defines ``@dataclass(frozen=True) class Params`` whose fields cite their source (the
paper's section or table, or the official code) and whose defaults are the paper's own values;
the config of a scale overrides what differs. :func:`from_config` builds it and names any key it
does not know, so a typo fails before any work, with the key in the message.

Each stage reads only part of the parameters, and says which in its paper's ``STAGE_PARAMS``
(``{"prepare": ("seeds", "data"), ..., "report": ALL}``). The workflow gives each rule only that part
as its ``cfg`` parameter (:func:`stage_section`), so a change to another parameter (a report's
threshold, say) does not rerun the stage; and the stage sees its parameters through
:func:`for_stage`, which refuses to read a configured parameter it did not declare, so the
declaration cannot silently fall behind the code.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
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
    """A dataclass as plain JSON-ready data (tuples become lists); a stage's view gives what it may read."""
    hidden = getattr(type(params), "_hidden_fields", frozenset())
    return _thaw({f.name: _plain(getattr(params, f.name))
                  for f in dataclasses.fields(params) if f.name not in hidden})


def _plain(value):
    """What dataclasses.asdict does to a field's value: nested dataclasses become dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        hidden = getattr(type(value), "_hidden_fields", frozenset())  # a stage's view: what it may read
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name not in hidden}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _thaw(value):
    if isinstance(value, (list, tuple)):
        return [_thaw(v) for v in value]
    if isinstance(value, dict):
        return {k: _thaw(v) for k, v in value.items()}
    return value


# ---- What one stage may read ------------------------------------------------------------------
ALL = "all"  # a stage that reads every parameter (a report writes them all to params.json)


def stage_section(module, stage: str, section: Mapping[str, Any], where: str) -> dict:
    """The part of a paper's config `section` that `stage` reads, as its paper declares it.

    `module` is the paper's ``params`` module; its ``STAGE_PARAMS[stage]`` is :data:`ALL` or the
    names of the fields the stage reads: a top-level field (``"mlp"``, the whole nested section) or one
    key of a nested section (``"mlp.width"``), so that a stage that reads one key of a section does not
    rerun when another key of it changes. Raises KeyError naming the file when the stage or a field is
    not declared, so the workflow stops at parse time.
    """
    source = f"STAGE_PARAMS in {module.__file__}"
    try:
        keys = module.STAGE_PARAMS[stage]
    except (AttributeError, KeyError):
        raise KeyError(f"{where}: stage '{stage}' has no entry in {source}") from None
    if keys == ALL:
        return dict(section)
    fields = {f.name for f in dataclasses.fields(module.Params)}
    unknown = sorted({k.split(".", 1)[0] for k in keys} - fields)
    if unknown:
        raise KeyError(f"{where}: {source}['{stage}'] names {', '.join(unknown)}, not parameters of {where}")
    view: dict = {}
    for key in keys:
        head, _, sub = key.partition(".")
        if head not in section:
            continue
        if not sub:
            view[head] = section[head]
        elif isinstance(section[head], Mapping):
            if sub in section[head]:
                part = view.setdefault(head, {})
                if isinstance(part, dict) and part is not section[head]:
                    part[sub] = section[head][sub]
        else:
            raise KeyError(f"{where}: {source}['{stage}'] names {key}, but {where}.{head} is not a section")
    # A section declared whole and by key is read whole.
    return {k: (section[k] if k in keys else v) for k, v in view.items()}


class StageConfig(dict):
    """A paper's whole config section as one rule's stage receives it.

    `readable` is the part the rule was given (its ``cfg`` parameter, :func:`stage_section`): only
    changes to those values rerun the stage, so :func:`for_stage` lets the stage read those and the
    parameters that are not configured at all (their defaults), and nothing else. A nested section of
    which only some keys were given (``"mlp.width"``) hides its other configured keys.
    """

    def __init__(self, section: Mapping[str, Any], readable, rule: str):
        super().__init__(section)
        self.hidden = frozenset(set(section) - set(readable))
        self.partial = {k: frozenset(set(section[k]) - set(readable[k])) for k in readable
                        if isinstance(section.get(k), Mapping) and isinstance(readable[k], Mapping)
                        and set(section[k]) - set(readable[k])}
        self.rule = rule


class UndeclaredParameter(LookupError):
    """A stage read a parameter that its rule does not receive (see :class:`StageConfig`)."""


def _refusal(name: str, rule: str) -> UndeclaredParameter:
    return UndeclaredParameter(
        f"rule {rule} reads parameter '{name}', which its rule does not receive: add it to this "
        f"stage's entry in STAGE_PARAMS (the paper's params.py), or a change to it would not rerun "
        f"the stage")


@functools.lru_cache(maxsize=None)
def _guarded(cls: type, hidden: frozenset, rule: str) -> type:
    """A subclass of dataclass `cls` whose instances refuse to read the fields in `hidden`."""

    def __getattribute__(self, name):
        if name in hidden:
            raise _refusal(name, rule)
        return object.__getattribute__(self, name)

    def __repr__(self):
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.name not in hidden)
        return f"{cls.__name__}({shown}, ... {len(hidden)} not read by {rule})"

    return type(cls.__name__, (cls,), {"__getattribute__": __getattribute__, "__repr__": __repr__,
                                      "__hash__": None, "_hidden_fields": hidden})


class _GuardedSection(dict):
    """A nested config section (a plain mapping) that refuses to read the keys its stage did not declare."""

    def __init__(self, data, hidden: frozenset, prefix: str, rule: str):
        super().__init__(data)
        self._hidden, self._prefix, self._rule = hidden, prefix, rule

    def __getitem__(self, key):
        if key in self._hidden:
            raise _refusal(f"{self._prefix}.{key}", self._rule)
        return super().__getitem__(key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __iter__(self):
        return (k for k in super().__iter__() if k not in self._hidden)

    def items(self):
        return [(k, self[k]) for k in self]

    def values(self):
        return [self[k] for k in self]

    def keys(self):
        return list(iter(self))


def _guard_nested(value, hidden: frozenset, prefix: str, rule: str):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        hidden = hidden & {f.name for f in dataclasses.fields(value)}
        view = copy.copy(value)
        object.__setattr__(view, "__class__", _guarded(type(value), hidden, f"{rule} ({prefix})"))
        return view
    if isinstance(value, Mapping):
        return _GuardedSection(value, hidden, prefix, rule)
    return value


def for_stage(params: T, cfg: Mapping[str, Any]) -> T:
    """`params` as a stage may read them: unchanged for a plain mapping (a test, a notebook); for a
    :class:`StageConfig`, a copy that raises :class:`UndeclaredParameter` on reading a parameter the
    stage's rule was not given. A paper's ``parse`` returns this, after its checks across fields."""
    names = {f.name for f in dataclasses.fields(params)}
    hidden = frozenset(getattr(cfg, "hidden", ())) & names
    partial = {k: v for k, v in getattr(cfg, "partial", {}).items() if k in names}
    if not hidden and not partial:
        return params
    view = copy.copy(params)
    for name, keys in partial.items():
        object.__setattr__(view, name, _guard_nested(getattr(params, name), keys, name, cfg.rule))
    object.__setattr__(view, "__class__", _guarded(type(params), hidden, cfg.rule))
    return view
