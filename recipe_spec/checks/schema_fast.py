"""The fast schema pre-check of :mod:`recipe_spec.checks.schema_check`, compiled once per schema.

:func:`compiled_check` turns a modifier schema into nested closures that answer the same
yes/no question as :func:`recipe_spec.checks.schema_check.fast_is_valid` on the arguments *as
loaded* (``FrozenDict`` mappings, tuples for lists, keys of any scalar type), so the
arguments need not be converted to plain JSON values first. A schema holding anything the
pre-check does not know compiles to None, and the interpreted pre-check decides it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..text.frozen import FrozenDict
from .schema_check import ANNOTATIONS, UnknownSchemaKeyword, compiled_pattern, json_equal

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
    return any(json_equal(plain, c) for c in choices)


_ABSENT = object()


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
#: The keywords that constrain only one kind of value, that kind, and the check for it.
_GUARDS = {
    **{k: ("number", _NUMBER) for k in (*_BOUNDS, "multipleOf")},
    **{k: ("string", "isinstance({v}, str)") for k in ("minLength", "pattern")},
    **{k: ("array", "isinstance({v}, (tuple, list))") for k in ("items", "minItems", "maxItems")},
}
_USABLE_NUMBER = "({v}.__class__ is float and {v} - {v} == 0.0 or {v}.__class__ is int and _int_floor < {v} < _int_limit)"
_KINDS = {"integer": "number"}  # a value of type integer passes the guard of numbers
_LITERALS = (str, int, bool, type(None))
_CALL = re.compile(r"^\(*(\w+)\(v\)\)*$")


def _object_only(schema: Any) -> bool:
    """Whether ``schema`` holds only object keywords (and ``allOf``/``if`` of such schemas)."""
    if schema is True or schema is False:
        return True
    if not isinstance(schema, Mapping) or "dependentSchemas" in schema:
        return False
    return all(
        k in ANNOTATIONS or k in _OBJECT_KEYS
        or (k == "allOf" and isinstance(a, list) and all(_object_only(s) for s in a))
        or (k in ("if", "then", "else") and _object_only(a))
        for k, a in schema.items()
    )


class _Compiler:
    """Writes one Python function per schema node that needs statements (objects, lists,
    recursive definitions) and inline expressions for the rest, then compiles them all at
    once. Within one node, the keywords after ``type`` skip the kind checks it settled."""

    def __init__(self, root: Mapping[str, Any]):
        self.root = root
        self.lines: list[str] = []
        self.names: dict[str, Any] = {
            "_FrozenDict": FrozenDict, "_Mapping": Mapping, "_data": _data,
            "_equal_any": _equal_any, "_absent": _ABSENT,
        }
        self.refs: dict[str, str] = {}
        self.inlined: list[str] = []  # the definitions being inlined (a cycle needs a function)
        self.post: list[str] = []  # statements run once every function is defined
        self.fused: Any = None  # the schema whose object check also checks the numbers

    def const(self, value: Any) -> str:
        if value.__class__ in _LITERALS or (value.__class__ is float and value - value == 0):
            return repr(value)
        name = f"_k{len(self.names)}"
        self.names[name] = value
        return name

    def function(self, schema: Any) -> str:
        body = self.expr(schema, "v")
        call = _CALL.match(body)
        if call:
            return call.group(1)  # the check of another function: that function
        name = f"_f{len(self.names)}"
        self.names[name] = None  # reserved; defined by the generated code
        self.lines += [f"def {name}(v):", f"    return {body}", ""]
        return name

    def ref(self, arg: Any, v: str, kinds: frozenset[str] | None) -> str:
        if not isinstance(arg, str) or not arg.startswith("#/$defs/"):
            raise UnknownSchemaKeyword(arg)
        key = arg[len("#/$defs/"):]
        if key not in self.inlined and len(self.inlined) < 8:
            self.inlined.append(key)
            try:
                return self.expr(self.root["$defs"][key], v, kinds)
            finally:
                self.inlined.pop()
        name = self.refs.get(key)
        if name is None:
            name = self.refs[key] = f"_r{len(self.names)}"
            self.names[name] = None
            body = self.expr(self.root["$defs"][key], "v")
            self.lines += [f"def {name}(v):", f"    return {body}", ""]
        return f"{name}({v})"

    def expr(self, schema: Any, v: str, kinds: frozenset[str] | None = None, strict: bool = False) -> str:
        """``schema``'s check of ``v``, known to be of one of ``kinds`` (None: any kind).
        ``strict``: a ``type: number`` also requires a usable float or int (fused checks)."""
        if schema is True or schema == {}:
            return "True"
        if schema is False:
            return "False"
        parts: list[str] = []
        objects = False
        deferred: list[Any] = []  # object-only sub-schemas of the same value: in its object check
        defer = any(k in _OBJECT_KEYS for k in schema)
        for key, arg in schema.items():
            if key in ANNOTATIONS or key in ("then", "else"):
                continue
            if defer and key == "allOf" and any(_object_only(sub) for sub in arg):
                deferred += [sub for sub in arg if _object_only(sub)]
                arg = [sub for sub in arg if not _object_only(sub)]
                if not arg:
                    continue
            elif defer and key == "if" and _object_only({k: schema[k] for k in ("if", "then", "else") if k in schema}):
                deferred.append({k: schema[k] for k in ("if", "then", "else") if k in schema})
                continue
            if strict and key == "type" and arg == "number":
                parts.append(_USABLE_NUMBER.format(v=v))
                kinds = frozenset({"number"}) if kinds is None else kinds & {"number"}
                continue
            if key in _GUARDS:
                kind, guard = _GUARDS[key]
                if kinds is not None and kind not in kinds:
                    continue  # no value here is of the kind the keyword constrains
                guard = "" if kinds is not None and kinds <= {kind} else f"not {guard.format(v=v)} or "
            if key == "type":
                types = arg if isinstance(arg, list) else [arg]
                for t in types:
                    if t not in _TYPES:
                        raise UnknownSchemaKeyword(t)
                parts.append("(" + (" or ".join(_TYPES[t].format(v=v) for t in types) or "False") + ")")
                known = frozenset(_KINDS.get(t, t) for t in types if isinstance(t, str))
                kinds = known if kinds is None else kinds & known
            elif key == "$ref":
                parts.append(self.ref(arg, v, kinds))
            elif key in ("const", "enum"):
                parts.append(self.choice(v, [arg] if key == "const" else list(arg)))
            elif key in _BOUNDS:
                parts.append(f"({guard}not {v} {_BOUNDS[key]} {self.const(arg)})")
            elif key == "multipleOf":
                k = self.const(arg)
                parts.append(f"({guard}{v} / {k} == int({v} / {k}))")
            elif key == "minLength":
                parts.append(f"({guard}len({v}) >= {self.const(arg)})")
            elif key == "pattern":
                parts.append(f"({guard}{self.const(compiled_pattern(arg))}.search({v}) is not None)")
            elif key == "items":
                parts.append(f"({guard}{self.items_function(arg)}({v}))")
            elif key == "minItems":
                parts.append(f"({guard}len({v}) >= {self.const(arg)})")
            elif key == "maxItems":
                parts.append(f"({guard}len({v}) <= {self.const(arg)})")
            elif key in _OBJECT_KEYS:
                objects = True
            elif key in ("anyOf", "allOf"):
                joiner = " or " if key == "anyOf" else " and "
                subs = [self.expr(sub, v, kinds) for sub in arg]
                parts.append("(" + (joiner.join(subs) or ("False" if key == "anyOf" else "True")) + ")")
            elif key == "not":
                parts.append(f"(not {self.expr(arg, v, kinds)})")
            elif key == "if":
                then = self.expr(schema["then"], v, kinds) if schema.get("then") is not None else "True"
                other = self.expr(schema["else"], v, kinds) if schema.get("else") is not None else "True"
                parts.append(f"(({then}) if {self.expr(arg, v, kinds)} else ({other}))")
            else:
                raise UnknownSchemaKeyword(key)
        if deferred and not objects:
            raise UnknownSchemaKeyword(schema)  # (not reached: deferring needs an object keyword)
        if objects and (kinds is None or "object" in kinds):
            fused, self.fused = schema is self.fused, None if schema is self.fused else self.fused
            parts.append(f"{self.object_function(schema, fused, deferred)}({v})")
        return "(" + " and ".join(parts) + ")" if parts else "True"

    def choice(self, v: str, choices: list[Any]) -> str:
        """``const``/``enum``: text and plain numbers by lookup, anything else by ``json_equal``."""
        general = f"_equal_any({v}, {self.const(choices)})"
        numbers = [c for c in choices if c.__class__ in (int, float)]
        if any(n != n or n in (float("inf"), float("-inf")) for n in numbers) or any(
            c.__class__ not in (str, int, float, bool, type(None), list, dict) for c in choices
        ):
            return general
        texts = self.const(frozenset(c for c in choices if isinstance(c, str)))
        if not any(c.__class__ in (list, dict) for c in choices):  # no list equals a plain value
            general = f"(False if ({v}.__class__ is tuple or {v}.__class__ is list) else {general})"
        return (
            f"(({v} in {texts}) if {v}.__class__ is str else ({v} in {self.const(frozenset(numbers))}) "
            f"if ({v}.__class__ is int or {v}.__class__ is float) else {general})"
        )

    def items_function(self, schema: Any) -> str:
        name = f"_l{len(self.names)}"
        self.names[name] = None
        self.lines += [
            f"def {name}(v):", "    for x in v:", f"        if not {self.expr(schema, 'x')}:",
            "            return False", "    return True", "",
        ]
        return name

    def object_function(self, schema: Mapping[str, Any], fused: bool = False, deferred: list[Any] = ()) -> str:  # type: ignore[assignment]
        """The check of ``schema``'s object keywords and the ``deferred`` object-only
        sub-schemas (``allOf`` items, ``if``/``then``/``else``) of the same value, which all
        read one text-keyed dict ``d``. ``fused``: also answer False unless every number in
        the value is usable (a FrozenDict with text keys; else ``_value_ok`` and the plain check)."""
        name = f"_o{len(self.names)}"
        self.names[name] = None
        if fused:
            plain = f"return _value_ok(v) and {self.object_function(schema, False, deferred)}(v)"
            body = [
                "    if v.__class__ is not _FrozenDict:", f"        {plain}", "    d = v._data",
                "    for k in d:", "        if k.__class__ is not str:", f"            {plain}",
            ]
        else:
            body = [
                "    if v.__class__ is _FrozenDict:", "        d = v._data", "        for k in d:",
                "            if k.__class__ is not str:", "                d = _data(v)", "                break",
                "    else:", "        d = _data(v)", "        if d is None:", "            return True",
            ]
        body += self.object_checks(schema, fused, "    ")
        for sub in deferred:
            body += self.object_checks(sub, False, "    ", nested=True)
        self.lines += [f"def {name}(v):", *body, "    return True", ""]
        return name

    def object_checks(self, schema: Any, fused: bool, at: str, nested: bool = False) -> list[str]:
        """Statements (indented by ``at``) returning False when dict ``d`` fails the object
        keywords of ``schema`` and, ``nested`` (an object-only schema), its ``allOf`` and ``if``."""
        if schema is True or schema == {}:
            return []
        if schema is False:
            return [f"{at}return False"]
        body: list[str] = []
        for k in schema.get("required", ()):
            body += [f"{at}if {self.const(k)} not in d:", f"{at}    return False"]
        if "minProperties" in schema:
            body += [f"{at}if len(d) < {self.const(schema['minProperties'])}:", f"{at}    return False"]
        if "maxProperties" in schema:
            body += [f"{at}if len(d) > {self.const(schema['maxProperties'])}:", f"{at}    return False"]
        props = schema.get("properties") if "properties" in schema else None
        extra = schema.get("additionalProperties")
        if "additionalProperties" in schema and "patternProperties" in schema:
            raise UnknownSchemaKeyword("patternProperties")
        known = self.const(frozenset(props or {}))
        if "additionalProperties" in schema:
            if extra is False:
                body += [f"{at}if not d.keys() <= {known}:", f"{at}    return False"]
            else:
                body += [f"{at}for k in d.keys() - {known}:", f"{at}    x = d[k]",
                         f"{at}    if not {self.usable(extra, self.expr(extra, 'x', strict=fused), fused)}:",
                         f"{at}        return False"]
        elif fused:
            body += [f"{at}for k in d.keys() - {known}:", f"{at}    if not _value_ok(d[k]):", f"{at}        return False"]
        for k, sub in (props or {}).items():
            check = self.usable(sub, self.expr(sub, "x", strict=fused), fused)
            if check != "True":
                body += [f"{at}x = d.get({self.const(k)}, _absent)",
                         f"{at}if x is not _absent and not {check}:", f"{at}    return False"]
        if "propertyNames" in schema:
            check = self.expr(schema["propertyNames"], "k")
            body += [f"{at}for k in d:", f"{at}    if not {check}:", f"{at}        return False"]
        if "dependentSchemas" in schema:
            for k, sub in schema["dependentSchemas"].items():
                body += [f"{at}if {self.const(k)} in d and not {self.function(sub)}(v):", f"{at}    return False"]
        for sub in schema.get("allOf", ()) if nested else ():
            body += self.object_checks(sub, False, at, nested=True)
        if nested and "if" in schema:
            cond = f"_p{len(self.names)}"
            self.names[cond] = None
            lines = self.object_checks(schema["if"], False, "    ", nested=True)
            self.lines += [f"def {cond}(d):", *lines, "    return True", ""]
            then = self.object_checks(schema.get("then", True), False, at + "    ", nested=True)
            other = self.object_checks(schema.get("else", True), False, at + "    ", nested=True)
            body += [f"{at}if {cond}(d):", *(then or [f"{at}    pass"]), f"{at}else:", *(other or [f"{at}    pass"])]
        return body

    def usable(self, schema: Any, check: str, fused: bool) -> str:
        """``check`` of ``x``, and when ``fused`` also that every number in ``x`` is usable."""
        if not fused:
            return check
        types = schema.get("type") if isinstance(schema, Mapping) else None
        types = set([types] if isinstance(types, str) else types if isinstance(types, list) else ["?"])
        if types <= {"string", "boolean", "null"} or types == {"number"}:
            return check  # the check passed: text, a boolean, null, or (strict) a usable number
        usable = (
            "(x.__class__ is float and x - x == 0.0 or x.__class__ is int and _int_floor < x < _int_limit "
            "or x.__class__ is str or x.__class__ is bool or x is None)"
            if types <= {"string", "boolean", "null", "number", "integer"} else "_value_ok(x)"
        )
        return usable if check == "True" else f"({check} and {usable})"

    def compile(self, schema: Any, numbers: Any = None) -> Check:
        if numbers is not None:  # (_value_ok, int_limit): the fused check of the arguments
            if not isinstance(schema, Mapping) or schema.get("type") != "object":
                raise UnknownSchemaKeyword(schema)
            self.fused = schema
            self.names.update(_value_ok=numbers[0], _int_limit=numbers[1], _int_floor=-numbers[1])
        top = self.function(schema)
        if numbers is not None and self.fused is not None:
            raise UnknownSchemaKeyword(schema)  # no object keyword at the top
        namespace = dict(self.names)
        exec(compile("\n".join(self.lines + self.post), "<schema check>", "exec"), namespace)  # noqa: S102
        return namespace[top]  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=512)
def _compiled(key: int, schema_ref: Any, numbers: Any = None) -> Check | None:
    schema = schema_ref[0]
    try:
        return _Compiler(schema).compile(schema, numbers)
    except (UnknownSchemaKeyword, KeyError, TypeError, AttributeError):
        return None


class _Ref(tuple):  # type: ignore[type-arg]
    """Holds a schema for the cache key without hashing it (schemas are dicts)."""

    def __hash__(self) -> int:
        return id(self[0])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Ref) and self[0] is other[0]


def compiled_check(schema: Mapping[str, Any], numbers: tuple[Check, int] | None = None) -> Check | None:
    """A function answering whether a loaded value is valid for ``schema`` (as
    ``fast_is_valid`` would on its JSON form), or None when the schema holds a keyword the
    pre-check does not know. Compiled once per schema object.

    ``numbers``: ``(value_ok, limit)``, where ``value_ok(x)`` tells whether every number in
    ``x`` is usable and ints are usable strictly between ``-limit`` and ``limit``; the
    function then answers True only for a valid object whose numbers are all usable (False
    may still be either), checking both in one pass."""
    return _compiled(id(schema), _Ref((schema,)), numbers)
