"""A fast yes/no check of an instance against a modifier schema.

Almost every real modifier is valid, and importing and running jsonschema costs more than the
whole rest of ``recipe-spec validate FILE``. This checker answers "valid" for the subset of
draft 2020-12 that the modifier schemas use, with jsonschema's semantics (an ``integer`` is
any number with no fraction; booleans are not numbers; ``const``/``enum`` compare types too).
When it answers False, or meets a keyword it does not know (None), jsonschema runs and
produces the messages. A test checks both agree on every corpus modifier and every fixture.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

__all__ = ["fast_is_valid"]

ANNOTATIONS = frozenset(
    {"description", "default", "deprecated", "title", "$schema", "$id", "$comment", "$defs",
     "x-recipe-spec", "examples"}
)


class UnknownSchemaKeyword(Exception):
    pass


@lru_cache(maxsize=256)
def compiled_pattern(text: str) -> re.Pattern[str]:
    return re.compile(text)


def _type_ok(value: Any, t: str) -> bool:
    if t == "null":
        return value is None
    if t == "boolean":
        return isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "integer":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return isinstance(value, int) or value.is_integer()
    if t == "string":
        return isinstance(value, str)
    if t == "array":
        return isinstance(value, list)
    if t == "object":
        return isinstance(value, dict)
    raise UnknownSchemaKeyword(t)


def json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return bool(a == b) and (isinstance(a, (int, float)) == isinstance(b, (int, float)))


def _valid(schema: Any, value: Any, root: Mapping[str, Any]) -> bool:
    if schema is True or schema == {}:
        return True
    if schema is False:
        return False
    for key, arg in schema.items():
        if key in ANNOTATIONS:
            continue
        if key == "type":
            types = arg if isinstance(arg, list) else [arg]
            if not any(_type_ok(value, t) for t in types):
                return False
        elif key == "$ref":
            if not arg.startswith("#/$defs/"):
                raise UnknownSchemaKeyword(arg)
            if not _valid(root["$defs"][arg[len("#/$defs/"):]], value, root):
                return False
        elif key == "const":
            if not json_equal(value, arg):
                return False
        elif key == "enum":
            if not any(json_equal(value, a) for a in arg):
                return False
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if key == "minimum" and value < arg:
                    return False
                if key == "maximum" and value > arg:
                    return False
                if key == "exclusiveMinimum" and value <= arg:
                    return False
                if key == "exclusiveMaximum" and value >= arg:
                    return False
                if key == "multipleOf":
                    quotient = value / arg
                    if quotient != int(quotient):
                        return False
        elif key in ("minLength", "pattern"):
            if isinstance(value, str):
                if key == "minLength" and len(value) < arg:
                    return False
                if key == "pattern" and not compiled_pattern(arg).search(value):
                    return False
        elif key in ("items", "minItems", "maxItems"):
            if isinstance(value, list):
                if key == "items" and not all(_valid(arg, v, root) for v in value):
                    return False
                if key == "minItems" and len(value) < arg:
                    return False
                if key == "maxItems" and len(value) > arg:
                    return False
        elif key in (
            "properties", "required", "additionalProperties", "propertyNames",
            "minProperties", "maxProperties", "dependentSchemas",
        ):
            if isinstance(value, dict) and not _object_ok(key, arg, schema, value, root):
                return False
        elif key == "anyOf":
            if not any(_valid(s, value, root) for s in arg):
                return False
        elif key == "allOf":
            if not all(_valid(s, value, root) for s in arg):
                return False
        elif key == "not":
            if _valid(arg, value, root):
                return False
        elif key == "if":
            branch = schema.get("then") if _valid(arg, value, root) else schema.get("else")
            if branch is not None and not _valid(branch, value, root):
                return False
        elif key in ("then", "else"):
            continue
        else:
            raise UnknownSchemaKeyword(key)
    return True


def _object_ok(key: str, arg: Any, schema: Mapping[str, Any], value: dict[str, Any], root: Any) -> bool:
    if key == "properties":
        return all(_valid(s, value[k], root) for k, s in arg.items() if k in value)
    if key == "required":
        return all(k in value for k in arg)
    if key == "additionalProperties":
        known = schema.get("properties", {})
        if "patternProperties" in schema:
            raise UnknownSchemaKeyword("patternProperties")
        return all(_valid(arg, v, root) for k, v in value.items() if k not in known)
    if key == "propertyNames":
        return all(_valid(arg, k, root) for k in value)
    if key == "minProperties":
        return len(value) >= arg
    if key == "maxProperties":
        return len(value) <= arg
    if key == "dependentSchemas":
        return all(_valid(s, value, root) for k, s in arg.items() if k in value)
    raise UnknownSchemaKeyword(key)  # pragma: no cover


def fast_is_valid(schema: Mapping[str, Any], instance: Any) -> bool | None:
    """True/False when this checker can decide; None when it meets a keyword it lacks.

    >>> fast_is_valid({"type": "object", "properties": {"a": {"type": "integer"}}}, {"a": 1.0})
    True
    >>> fast_is_valid({"type": "number"}, True)
    False
    """
    try:
        return _valid(schema, instance, schema)
    except UnknownSchemaKeyword:
        return None
