"""The fast schema pre-check of :mod:`recipe_spec.schema_check`, compiled once per schema.

:func:`compiled_check` turns a modifier schema into nested closures that answer the same
yes/no question as :func:`recipe_spec.schema_check.fast_is_valid` on the arguments *as
loaded* (``FrozenDict`` mappings, tuples for lists, keys of any scalar type), so the
arguments need not be converted to plain JSON values first. A schema holding anything the
pre-check does not know compiles to None, and the interpreted pre-check decides it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from .frozen import FrozenDict
from .schema_check import _ANNOTATIONS, _equal, _pattern, _Unknown

__all__ = ["compiled_check", "jsonable"]

Check = Callable[[Any], bool]


def jsonable(value: Any) -> Any:
    """``value`` with mappings as dicts with text keys and tuples as lists (what jsonschema
    and the interpreted pre-check read)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [jsonable(v) for v in value]
    return value


def _data(value: Any) -> dict[Any, Any] | None:
    """The text-keyed dict a mapping argument stands for, or None for any other value."""
    if value.__class__ is FrozenDict:
        data = value._data
    elif isinstance(value, Mapping):
        data = value
    else:
        return None
    for k in data:
        if k.__class__ is not str:
            return {str(k): v for k, v in data.items()}
    return data


def _equal_any(value: Any, choices: list[Any]) -> bool:
    plain = jsonable(value)
    return any(_equal(plain, c) for c in choices)


def _all(check: Check, values: Any) -> bool:
    for v in values:
        if not check(v):
            return False
    return True


_NUMBER = "(isinstance({v}, (int, float)) and {v}.__class__ is not bool)"
_TYPES = {
    "null": "{v} is None",
    "boolean": "{v}.__class__ is bool",
    "number": _NUMBER,
    "integer": "({v}.__class__ is not bool and (isinstance({v}, int) or "
    "(isinstance({v}, float) and {v}.is_integer())))",
    "string": "isinstance({v}, str)",
    "array": "isinstance({v}, (tuple, list))",
    "object": "({v}.__class__ is _FrozenDict or isinstance({v}, _Mapping))",
}
#: The comparison that makes a number fail each bound.
_BOUNDS = {"minimum": "<", "maximum": ">", "exclusiveMinimum": "<=", "exclusiveMaximum": ">="}
_OBJECT_KEYS = (
    "properties", "required", "additionalProperties", "propertyNames",
    "minProperties", "maxProperties", "dependentSchemas",
)


class _Compiler:
    """Writes one Python function per schema node that needs statements (objects, lists,
    definitions) and inline expressions for the rest, then compiles them all at once."""

    def __init__(self, root: Mapping[str, Any]):
        self.root = root
        self.lines: list[str] = []
        self.names: dict[str, Any] = {
            "_FrozenDict": FrozenDict, "_Mapping": Mapping, "_data": _data,
            "_equal_any": _equal_any, "_all": _all,
        }
        self.refs: dict[str, str] = {}
        self.post: list[str] = []  # statements run once every function is defined

    def const(self, value: Any) -> str:
        name = f"_k{len(self.names)}"
        self.names[name] = value
        return name

    def function(self, schema: Any) -> str:
        name = f"_f{len(self.names)}"
        self.names[name] = None  # reserved; defined by the generated code
        body = self.expr(schema, "v")
        self.lines += [f"def {name}(v):", f"    return {body}", ""]
        return name

    def ref(self, arg: Any) -> str:
        if not isinstance(arg, str) or not arg.startswith("#/$defs/"):
            raise _Unknown(arg)
        key = arg[len("#/$defs/"):]
        name = self.refs.get(key)
        if name is None:
            name = self.refs[key] = f"_r{len(self.names)}"
            self.names[name] = None
            body = self.expr(self.root["$defs"][key], "v")
            self.lines += [f"def {name}(v):", f"    return {body}", ""]
        return name

    def expr(self, schema: Any, v: str) -> str:
        if schema is True or schema == {}:
            return "True"
        if schema is False:
            return "False"
        parts: list[str] = []
        objects = False
        for key, arg in schema.items():
            if key in _ANNOTATIONS or key in ("then", "else"):
                continue
            if key == "type":
                types = arg if isinstance(arg, list) else [arg]
                for t in types:
                    if t not in _TYPES:
                        raise _Unknown(t)
                parts.append("(" + (" or ".join(_TYPES[t].format(v=v) for t in types) or "False") + ")")
            elif key == "$ref":
                parts.append(f"{self.ref(arg)}({v})")
            elif key in ("const", "enum"):
                parts.append(self.choice(v, [arg] if key == "const" else list(arg)))
            elif key in _BOUNDS:
                number = _NUMBER.format(v=v)
                parts.append(f"(not {number} or not {v} {_BOUNDS[key]} {self.const(arg)})")
            elif key == "multipleOf":
                number = _NUMBER.format(v=v)
                k = self.const(arg)
                parts.append(f"(not {number} or {v} / {k} == int({v} / {k}))")
            elif key == "minLength":
                parts.append(f"(not isinstance({v}, str) or len({v}) >= {self.const(arg)})")
            elif key == "pattern":
                parts.append(
                    f"(not isinstance({v}, str) or {self.const(_pattern(arg))}.search({v}) is not None)"
                )
            elif key == "items":
                parts.append(f"(not isinstance({v}, (tuple, list)) or _all({self.function(arg)}, {v}))")
            elif key == "minItems":
                parts.append(f"(not isinstance({v}, (tuple, list)) or len({v}) >= {self.const(arg)})")
            elif key == "maxItems":
                parts.append(f"(not isinstance({v}, (tuple, list)) or len({v}) <= {self.const(arg)})")
            elif key in _OBJECT_KEYS:
                objects = True
            elif key in ("anyOf", "allOf"):
                joiner = " or " if key == "anyOf" else " and "
                subs = [self.expr(sub, v) for sub in arg]
                parts.append("(" + (joiner.join(subs) or ("False" if key == "anyOf" else "True")) + ")")
            elif key == "not":
                parts.append(f"(not {self.expr(arg, v)})")
            elif key == "if":
                then = self.expr(schema["then"], v) if schema.get("then") is not None else "True"
                other = self.expr(schema["else"], v) if schema.get("else") is not None else "True"
                parts.append(f"(({then}) if {self.expr(arg, v)} else ({other}))")
            else:
                raise _Unknown(key)
        if objects:
            parts.append(f"{self.object_function(schema)}({v})")
        return "(" + " and ".join(parts) + ")" if parts else "True"

    def choice(self, v: str, choices: list[Any]) -> str:
        """``const``/``enum``: text and plain numbers by lookup, anything else by ``_equal``."""
        general = f"_equal_any({v}, {self.const(choices)})"
        numbers = [c for c in choices if c.__class__ in (int, float)]
        if any(n != n or n in (float("inf"), float("-inf")) for n in numbers) or any(
            c.__class__ not in (str, int, float, bool, type(None), list, dict) for c in choices
        ):
            return general
        texts = self.const(frozenset(c for c in choices if isinstance(c, str)))
        return (
            f"(({v} in {texts}) if {v}.__class__ is str else ({v} in {self.const(frozenset(numbers))}) "
            f"if ({v}.__class__ is int or {v}.__class__ is float) else {general})"
        )

    def object_function(self, schema: Mapping[str, Any]) -> str:
        name = f"_o{len(self.names)}"
        self.names[name] = None
        body = ["    d = _data(v)", "    if d is None:", "        return True"]
        if "required" in schema:
            for k in schema["required"]:
                body += [f"    if {self.const(k)} not in d:", "        return False"]
        if "minProperties" in schema:
            body += [f"    if len(d) < {self.const(schema['minProperties'])}:", "        return False"]
        if "maxProperties" in schema:
            body += [f"    if len(d) > {self.const(schema['maxProperties'])}:", "        return False"]
        props = schema.get("properties") if "properties" in schema else None
        extra = schema.get("additionalProperties")
        if "additionalProperties" in schema and "patternProperties" in schema:
            raise _Unknown("patternProperties")
        if props is not None or "additionalProperties" in schema:
            entries = [f"{self.const(k)}: {self.function(sub)}" for k, sub in (props or {}).items()]
            table = self.const(None)
            self.post.append(f"{table} = {{{', '.join(entries)}}}")
            body += ["    for k, x in d.items():", f"        f = {table}.get(k)"]
            if "additionalProperties" in schema:
                extra_check = "False" if extra is False else f"{self.function(extra)}(x)"
                body += [
                    "        if f is None:",
                    f"            if not {extra_check}:",
                    "                return False",
                    "        elif not f(x):",
                    "            return False",
                ]
            else:
                body += ["        if f is not None and not f(x):", "            return False"]
        if "propertyNames" in schema:
            fn = self.function(schema["propertyNames"])
            body += ["    for k in d:", f"        if not {fn}(k):", "            return False"]
        if "dependentSchemas" in schema:
            for k, sub in schema["dependentSchemas"].items():
                body += [f"    if {self.const(k)} in d and not {self.function(sub)}(v):", "        return False"]
        self.lines += [f"def {name}(v):", *body, "    return True", ""]
        return name

    def compile(self, schema: Any) -> Check:
        top = self.function(schema)
        namespace = dict(self.names)
        exec(compile("\n".join(self.lines + self.post), "<schema check>", "exec"), namespace)  # noqa: S102
        return namespace[top]  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=512)
def _compiled(key: int, schema_ref: Any) -> Check | None:
    schema = schema_ref[0]
    try:
        return _Compiler(schema).compile(schema)
    except (_Unknown, KeyError, TypeError, AttributeError):
        return None


class _Ref(tuple):  # type: ignore[type-arg]
    """Holds a schema for the cache key without hashing it (schemas are dicts)."""

    def __hash__(self) -> int:
        return id(self[0])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Ref) and self[0] is other[0]


def compiled_check(schema: Mapping[str, Any]) -> Check | None:
    """A function answering whether a loaded value is valid for ``schema`` (as
    ``fast_is_valid`` would on its JSON form), or None when the schema holds a keyword the
    pre-check does not know. Compiled once per schema object."""
    return _compiled(id(schema), _Ref((schema,)))
