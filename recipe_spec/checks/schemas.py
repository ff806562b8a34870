"""The JSON Schemas of every modifier and which backend supports which modifier.

The schemas are generated from the modifier declarations (:mod:`recipe_spec.modifiers`);
``schemas/modifiers/*.schema.json`` (shipped as the ``recipe_spec.schemas`` package data) are
the same schemas written out for editors and other tools. Backend support is derived from
each backend's declared capabilities (``schemas/backends.json`` writes it out).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from ..modifiers import all_specs
from ..modifiers.schema import SCHEMA_DIALECT, json_schema

__all__ = [
    "modifier_names",
    "modifier_schema",
    "backend_support",
    "combined_schema",
    "SCHEMA_DIALECT",
]


@functools.cache
def _schema(name: str) -> dict[str, Any]:
    """The JSON Schema of modifier ``name``, generated from its declaration on first use."""
    return json_schema(all_specs()[name])


def _all_schemas() -> dict[str, dict[str, Any]]:
    """Every modifier's JSON Schema by name (in name order), generated from the declarations."""
    return {name: _schema(name) for name in all_specs()}


def modifier_names() -> list[str]:
    """Every modifier recipe-spec knows, sorted.

    >>> "GMPruningModifier" in modifier_names()
    True
    """
    return sorted(all_specs())


def modifier_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of modifier ``name`` (``KeyError`` if unknown)."""
    return _schema(name)


def backend_support() -> dict[str, frozenset[str]]:
    """backend name -> the modifiers it runs, derived from each installed backend's declared
    capabilities (:func:`recipe_spec.modifiers.supported_by`)."""
    from ..modifiers import supported_by
    from ..registry import installed_backends

    return {b.name: supported_by(b.capabilities) for b in installed_backends()}


def combined_schema() -> dict[str, Any]:
    """One schema for a whole recipe file, for editors (yaml-language-server).

    Top-level keys containing ``modifiers`` are lists whose items are tagged modifiers; an
    editor sees the tag as a custom tag (declare them with ``yaml.customTags``) and the
    arguments are checked against the union of every modifier's properties.
    """
    defs: dict[str, Any] = {}
    for name, schema in _all_schemas().items():
        body = {k: v for k, v in schema.items() if k not in ("$schema", "$id")}
        inner_defs = body.pop("$defs", {})
        text = json.dumps(body).replace("#/$defs/", f"#/$defs/{name}__")
        defs[name] = json.loads(text)
        for dname, dschema in inner_defs.items():
            defs[f"{name}__{dname}"] = json.loads(
                json.dumps(dschema).replace("#/$defs/", f"#/$defs/{name}__")
            )
    modifier_ref = {"anyOf": [{"$ref": f"#/$defs/{n}"} for n in sorted(_all_schemas())]}
    one_key = {
        "type": "object",
        "minProperties": 1,
        "maxProperties": 1,
        "properties": {n: {"$ref": f"#/$defs/{n}"} for n in sorted(_all_schemas())},
        "additionalProperties": False,
    }
    group = {"type": ["array", "null"], "items": {"anyOf": [modifier_ref, one_key]}}
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": "urn:recipe-spec:schemas:recipe",
        "title": "recipe-spec recipe",
        "description": "A model-compression recipe: variables and lists of !Modifier items "
        "under keys whose name contains 'modifiers'.",
        "type": "object",
        "patternProperties": {
            "modifiers": group,
            "^(?!.*modifiers).*$": {
                "description": "A variable, metadata, or a stage (a mapping with its own "
                "*modifiers lists).",
                "anyOf": [
                    {"type": "object", "patternProperties": {"modifiers": group}},
                    {},
                ],
            },
        },
        "$defs": defs,
    }
