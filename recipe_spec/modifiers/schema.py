"""A modifier's JSON Schema, generated from its declaration.

``schemas/modifiers/<Name>.schema.json`` holds :func:`schema_text` of each declaration (written
by ``python -m recipe_spec.docgen``) for editors and other tools; recipe-spec itself reads the
declarations.

>>> from recipe_spec.modifiers import spec
>>> schema = json_schema(spec("EpochRangeModifier"))
>>> list(schema)[:6], schema["required"]
(['$schema', '$id', 'title', 'description', 'type', 'properties'], ['start_epoch', 'end_epoch'])
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .spec import ModifierSpec

__all__ = ["SCHEMA_DIALECT", "json_schema", "schema_text", "schema_path"]

#: The JSON Schema dialect of every modifier schema.
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _plain(value: Any) -> Any:
    """A fresh copy of a JSON-like value, so no caller can change a shared declaration."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def json_schema(spec: ModifierSpec) -> dict[str, Any]:
    """The JSON Schema of ``spec``: a new dict, keys in the order of the shipped files.

    ``$schema``, ``$id``, ``title``, ``description``, ``type``, ``properties`` (one per
    argument, in declaration order), the keys of ``schema_extra`` in their order, then
    ``x-recipe-spec`` (category and example).
    """
    schema: dict[str, Any] = {
        "$schema": SCHEMA_DIALECT,
        "$id": f"urn:recipe-spec:schemas:modifiers/{spec.name}",
        "title": spec.name,
        "description": spec.description,
        "type": "object",
        "properties": {arg.name: _plain(arg.schema) for arg in spec.args},
    }
    for key, value in spec.schema_extra.items():
        schema[key] = _plain(value)
    schema["x-recipe-spec"] = {"category": spec.category, "example": _plain(spec.example)}
    return schema


def schema_text(spec: ModifierSpec) -> str:
    """The text of ``schemas/modifiers/<Name>.schema.json`` for ``spec`` (2-space JSON, ASCII,
    one trailing newline)."""
    return json.dumps(json_schema(spec), indent=2) + "\n"


def schema_path(spec: ModifierSpec) -> str:
    """Where :func:`schema_text` of ``spec`` is shipped, relative to the repository root.

    >>> from recipe_spec.modifiers import spec
    >>> schema_path(spec("GMPruningModifier"))
    'schemas/modifiers/GMPruningModifier.schema.json'
    """
    return f"schemas/modifiers/{spec.name}.schema.json"
