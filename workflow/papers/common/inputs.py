"""Input paths in the configuration, checked when the workflow is parsed.

A value that names a file or folder the workflow reads (a data set, a pretrained model) carries
``input: true`` in its paper's schema (workflow/schemas/<slug>.schema.yaml), on the string itself or
on the items of a list of strings; null means "the packaged data". :func:`missing_inputs` walks the
configuration with the schema and returns each such path that does not exist, so that the workflow
stops before the dry run, naming the key (``sam_late.data.path``) -- not in the prepare job, which
on a cluster runs after submission.
"""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import yaml

KEYWORD = "input"


def _validator_class():
    from jsonschema import Draft202012Validator, ValidationError, validators

    def input_path(validator, flagged, instance, schema):
        if flagged and isinstance(instance, str) and not os.path.exists(instance):
            yield ValidationError(f"no such file or directory: '{instance}' (relative paths start from "
                                  f"{os.getcwd()})")

    return validators.extend(Draft202012Validator, {KEYWORD: input_path})


def missing_inputs(config: dict, schema_file: str | Path, sections=None) -> list[tuple[str, str]]:
    """``[(dotted key, message)]`` for every configured input path that does not exist.

    `schema_file` is the workflow's config schema (its ``$ref`` to the papers' schemas are followed);
    `sections`, if given, limits the check to those top-level keys (the selected papers).
    """
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    schema_file = Path(schema_file).resolve()
    schema = {**yaml.safe_load(schema_file.read_text()), "$id": schema_file.as_uri()}

    def retrieve(uri):
        # Without its `$schema`, a paper's schema is checked by this validator (with the `input`
        # keyword), not by the plain one that jsonschema would pick for that meta-schema.
        contents = yaml.safe_load(Path(url2pathname(urlparse(uri).path)).read_text())
        contents.pop("$schema", None)
        return Resource.from_contents(contents, default_specification=DRAFT202012)

    registry = Registry(retrieve=retrieve).with_resource(schema_file.as_uri(), Resource.from_contents(schema))
    checked = {k: v for k, v in config.items() if sections is None or k in sections}
    validator = _validator_class()(schema, registry=registry)
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
