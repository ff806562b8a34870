"""The JSON Schemas of every modifier (``schemas/`` in the repository, shipped as the
``recipe_spec.schemas`` package data) and which backend supports which modifier.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "modifier_names",
    "modifier_schema",
    "backend_support",
    "combined_schema",
    "SCHEMA_DIALECT",
]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _root() -> Any:
    """The schemas folder: the installed package data, or ``schemas/`` of a source checkout."""
    try:
        root = resources.files("recipe_spec.schemas")
        if (root / "backends.json").is_file():
            return root
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parent.parent / "schemas"


@functools.cache
def _all_schemas() -> dict[str, dict[str, Any]]:
    folder = _root() / "modifiers"
    found: dict[str, dict[str, Any]] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".schema.json"):
            schema = json.loads(entry.read_text(encoding="utf-8"))
            found[schema["title"]] = schema
    return found


def modifier_names() -> list[str]:
    """Every modifier recipe-spec knows, sorted.

    >>> "GMPruningModifier" in modifier_names()
    True
    """
    return sorted(_all_schemas())


def modifier_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of modifier ``name`` (``KeyError`` if unknown)."""
    return _all_schemas()[name]


@functools.cache
def backend_support() -> dict[str, frozenset[str]]:
    """backend name -> the modifiers it implements (from ``schemas/backends.json``)."""
    data = json.loads((_root() / "backends.json").read_text(encoding="utf-8"))
    return {name: frozenset(b["modifiers"]) for name, b in data["backends"].items()}


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
