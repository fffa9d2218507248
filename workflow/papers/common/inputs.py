"""Input paths in the configuration, checked when the workflow is parsed.

A value that names a file or folder the workflow reads (a data set, a pretrained model) carries
``input: true`` in its paper's schema (workflow/schemas/<slug>.schema.yaml), on the string itself or
on the items of a list of strings; null means "the packaged data". :func:`missing_inputs` walks the
configuration with the schema and returns each such path that does not exist, so that the workflow
stops before the dry run, naming the key (``sam_late.data.path``) -- not in the prepare job, which
on a cluster runs after submission.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import yaml

KEYWORD = "input"


# The message by which the validator below reports a path that exists (collected by configured_inputs).
_PRESENT = "input path present: "


def _validator_class(report_present: bool = False):
    from jsonschema import Draft202012Validator, ValidationError, validators

    def input_path(validator, flagged, instance, schema):
        if flagged and isinstance(instance, str):
            if not os.path.exists(instance):
                yield ValidationError(f"no such file or directory: '{instance}' (relative paths start from "
                                      f"{os.getcwd()})")
            elif report_present:
                yield ValidationError(_PRESENT + instance)

    return validators.extend(Draft202012Validator, {KEYWORD: input_path})


def missing_inputs(config: dict, schema_file: str | Path, sections=None) -> list[tuple[str, str]]:
    """``[(dotted key, message)]`` for every configured input path that does not exist.

    `schema_file` is the workflow's config schema (its ``$ref`` to the papers' schemas are followed);
    `sections`, if given, limits the check to those top-level keys (the selected papers).
    """
    return [(k, m) for k, m in _input_errors(config, schema_file, sections, False) if not m.startswith(_PRESENT)]


def configured_inputs(config: dict, schema_file: str | Path, sections=None) -> dict[str, str]:
    """``{dotted key: path}`` of every configured input path that exists (a user's data file or folder; null,
    the packaged data, names none). The workflow declares them as the inputs of the rules whose stage reads
    them, so that editing such a file in place reruns what reads it."""
    return {k: m[len(_PRESENT):] for k, m in _input_errors(config, schema_file, sections, True) if m.startswith(_PRESENT)}


def in_section(dotted: str, section) -> bool:
    """Whether the value at `dotted` (``sam_late.data.path``, without the paper's name) lies in `section`, a
    (possibly cut-down) config section."""
    node = section
    for key in dotted.replace("[", ".[").split("."):
        if key.startswith("["):
            index = int(key[1:-1])
            if not isinstance(node, (list, tuple)) or index >= len(node):
                return False
            node = node[index]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return False
    return True


def _schema(path: Path) -> dict:
    """A schema file, parsed once per process and version (a parse checks every paper twice), with libyaml where
    it is built: the pure-Python parser took seconds of every Snakemake start."""
    return _schema_cached(path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _schema_cached(path: Path, mtime_ns: int) -> dict:
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _input_errors(config: dict, schema_file: str | Path, sections, report_present: bool) -> list[tuple[str, str]]:
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    schema_file = Path(schema_file).resolve()
    schema = {**_schema(schema_file), "$id": schema_file.as_uri()}

    def retrieve(uri):
        # Without its `$schema`, a paper's schema is checked by this validator (with the `input`
        # keyword), not by the plain one that jsonschema would pick for that meta-schema.
        contents = dict(_schema(Path(url2pathname(urlparse(uri).path))))
        contents.pop("$schema", None)
        return Resource.from_contents(contents, default_specification=DRAFT202012)

    registry = Registry(retrieve=retrieve).with_resource(schema_file.as_uri(), Resource.from_contents(schema))
    checked = {k: v for k, v in config.items() if sections is None or k in sections}
    validator = _validator_class(report_present)(schema, registry=registry)
    found = []
    for error in validator.iter_errors(checked):
        for e in [error, *_leaves(error)]:
            if e.validator == KEYWORD:
                found.append((_dotted(e.absolute_path), e.message))
    return sorted(set(found))


def _dotted(path) -> str:
    """``sbdd_vs.data.decoy_pool[0]`` from the path of keys and list indices."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _leaves(error):
    """Errors under a oneOf / anyOf (a path is one branch of `null or a string`)."""
    for sub in error.context or ():
        yield sub
        yield from _leaves(sub)
