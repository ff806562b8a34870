"""Modifier arguments against their schema, and the numbers no schedule can use.

:func:`schema_findings` answers "valid" from the compiled pre-check
(:mod:`recipe_spec.checks.schema_fast`) for almost every modifier and runs jsonschema only for the
exact messages when something is off; :func:`plain_numbers_ok` decides without building paths
whether :func:`_bad_numbers` would find anything; :func:`pattern_verdict` whether a ``re:``
selector compiles; :func:`fact_of` and :func:`exact_params` what the rules read of the
arguments. Used by :mod:`recipe_spec.validation`.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..diagnostics import codes
from ..modifiers import rule_keys as modifier_rule_keys
from ..recipe.findings import Finding
from ..schedule.events import FLOAT_INT_LIMIT as _FLOAT_INT_LIMIT
from ..text.frozen import FrozenDict
from ..text.variables import did_you_mean
from .schema_check import fast_is_valid
from .schema_fast import compiled_check
from .schemas import modifier_schema

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

    from ..recipe.model import Modifier

__all__ = ["FLOAT_INT_LIMIT"]


# -- schema --------------------------------------------------------------------------------
@functools.cache
def _validator(name: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator  # imported only when a modifier is invalid

    return Draft202012Validator(modifier_schema(name))


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    return value


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "null" if value is None else type(value).__name__


_JSON_TYPES = {
    "string": "text", "number": "a number", "integer": "an integer", "boolean": "true or false",
    "array": "a list", "object": "a mapping", "null": "null",
}


def _leaf_error(error: ValidationError) -> ValidationError:
    """The most telling sub-error of an anyOf/oneOf failure."""
    while error.context:
        candidates = sorted(error.context, key=lambda e: (e.validator == "type", -len(e.path)))
        error = candidates[0]
    return error


@functools.cache
def _check_of(name: str) -> Callable[[Any], bool] | None:
    return compiled_check(modifier_schema(name))


@functools.cache
def _deprecated(name: str) -> dict[Any, str]:
    """The deprecated arguments of modifier ``name`` and their descriptions."""
    props: Mapping[str, Any] = modifier_schema(name).get("properties", {})
    return {k: s.get("description", "") for k, s in props.items() if s and s.get("deprecated")}


@functools.cache
def _fused_of(name: str) -> Callable[[Any], bool] | None:
    """The compiled pre-check of modifier ``name`` that also requires every number to be
    usable (see :func:`args_ok`); the plain one (:func:`_check_of`) is compiled only for
    arguments this one does not pass."""
    return compiled_check(modifier_schema(name), (_value_ok, _INT_LIMIT))


def args_ok(m: Modifier) -> bool:
    """True when ``m``'s arguments pass the compiled pre-check and :func:`plain_numbers_ok`, in
    one pass (False: either may fail). ``m.type`` must name a known modifier."""
    fused = _fused_of(m.type)
    return fused is not None and fused(m.args)


def schema_ok(m: Modifier) -> bool:
    """True when :func:`schema_findings` would find nothing, decided by the compiled
    pre-check alone (False: it may find something)."""
    check, deprecated = _check_of(m.type), _deprecated(m.type)
    args = m.args
    return check is not None and (not deprecated or deprecated.keys().isdisjoint(args.keys())) and check(args)


def deprecated_findings(m: Modifier) -> Iterator[Finding]:
    """M007 for each deprecated argument of ``m``."""
    deprecated = _deprecated(m.type)
    if deprecated:
        for key in m.args:
            if key in deprecated:
                yield Finding(
                    codes.M007, f"'{key}' is deprecated in {m.type}", deprecated[key], m, (key,), on_key=True,
                )


def schema_findings(m: Modifier) -> Iterator[Finding]:
    schema = modifier_schema(m.type)
    yield from deprecated_findings(m)
    check = _check_of(m.type)
    if check is not None and check(m.args):
        return
    instance = _jsonable(m.args)
    if check is None and fast_is_valid(schema, instance) is True:
        return
    props: Mapping[str, Any] = schema.get("properties", {})
    rule_keys: set[Any] | None = None
    # a misspelt required argument is reported once, as the unknown key with its hint
    typos = {difflib.get_close_matches(k, list(props), n=1, cutoff=0.6)[0]
             for k in m.args if isinstance(k, str) and k not in props
             and difflib.get_close_matches(k, list(props), n=1, cutoff=0.6)}
    for error in _validator(m.type).iter_errors(instance):
        path = tuple(error.absolute_path)
        top = path[0] if path else None
        if error.validator == "additionalProperties":
            extra = [k for k in error.instance if k not in props]
            for key in extra:
                hint = did_you_mean(key, props) or f"{m.type} takes: {', '.join(props)}."
                yield Finding(codes.M002, f"{m.type} has no argument '{key}'", hint, m, (key,), on_key=True)
            continue
        if error.validator == "required":
            missing = error.message.split("'")[1] if "'" in error.message else str(error.message)
            if missing in typos:
                continue
            desc = props.get(missing, {}).get("description", "")
            yield Finding(codes.M003, f"{m.type} needs '{missing}'", desc, m)
            continue
        if rule_keys is None:
            rule_keys = modifier_rule_keys(m)
        if top in rule_keys:
            continue  # the modifier's own rule says it better (E003 for QAT's end_epoch)
        leaf = _leaf_error(error)
        value = leaf.instance
        where = "'" + ".".join(str(p) for p in path) + "'" if path else m.type
        desc = props.get(top, {}).get("description", "") if isinstance(top, str) else ""
        if leaf.validator == "type":
            expected = leaf.validator_value
            expected = expected if isinstance(expected, list) else [expected]
            wanted = " or ".join(_JSON_TYPES.get(t, t) for t in expected)
            hint = desc
            if isinstance(value, str) and value.lower() in ("yes", "no", "on", "off") and "boolean" in expected:
                hint = f"YAML 1.2 reads {value} as text: write true or false."
            elif isinstance(value, str) and value.startswith("eval(") is False and re.fullmatch(r"[-+.\deE]+", value):
                hint = "Remove the quotes to make it a number."
            yield Finding(
                codes.M004, f"{where} must be {wanted}, not {_type_name(value)} ({value!r})", hint, m, path
            )
        elif leaf.validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "not"):
            code = codes.M011 if isinstance(top, str) and "sparsity" in top else codes.M005
            bound = {
                "minimum": f"at least {leaf.validator_value}",
                "maximum": f"at most {leaf.validator_value}",
                "exclusiveMinimum": f"greater than {leaf.validator_value}",
                "exclusiveMaximum": f"less than {leaf.validator_value}",
                "not": _excluded(leaf.validator_value),
            }[leaf.validator]
            hint = desc
            if code is codes.M011 and leaf.validator in ("maximum", "exclusiveMaximum") \
                    and isinstance(value, (int, float)) and 5 <= value <= 100:
                hint = f"Did you mean {value / 100:g}? A sparsity is a fraction, not a percentage."
            yield Finding(code, f"{where} must be {bound}, not {value!r}", hint, m, path)
        elif leaf.validator in ("enum", "const"):
            allowed = leaf.validator_value if leaf.validator == "enum" else [leaf.validator_value]
            hint = did_you_mean(str(value), [str(a) for a in allowed]) if isinstance(value, str) else ""
            choices = ", ".join(repr(a) for a in allowed)
            yield Finding(
                codes.M006, f"{where} is {value!r}; allowed: {choices}", hint or desc, m, path
            )
        else:
            yield Finding(codes.M008, f"{where}: {leaf.message}", desc, m, path)


def _excluded(schema: Any) -> str:
    """What a ``not`` schema leaves allowed, in words: ``not {exclusiveMinimum: -1,
    maximum: 0}`` is "-1 or above 0"."""
    if not isinstance(schema, Mapping):
        return "a different value"
    low = schema.get("exclusiveMinimum", schema.get("minimum"))
    high = schema.get("exclusiveMaximum", schema.get("maximum"))
    if low is None or high is None:
        return "a different value"
    below = f"{low:g}" if "exclusiveMinimum" in schema else f"below {low:g}"
    above = f"above {high:g}" if "maximum" in schema else f"at least {high:g}"
    return f"{below} or {above}"


# -- numbers -------------------------------------------------------------------------------
#: Largest int accepted where a number is expected: the largest float (about 1.8e308),
#: which is what schedules compute with.
FLOAT_INT_LIMIT = _FLOAT_INT_LIMIT


def _bad_numbers(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    """``(path, what is wrong)`` for each number inside ``value`` that no schedule can use:
    ``.inf``, ``.nan``, or an integer beyond the range of a float."""
    if isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        yield path, f"must be a finite number, not {value}"
    elif isinstance(value, int) and not -FLOAT_INT_LIMIT <= value <= FLOAT_INT_LIMIT:
        digits = len(str(abs(value))) if value.bit_length() < 14_000 else int(value.bit_length() * math.log10(2))
        yield path, f"is too large ({digits} digits; numbers must be below 1.8e308)"
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _bad_numbers(k, path + (k,))
            yield from _bad_numbers(v, path + (k,))
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from _bad_numbers(v, path + (i,))


_INT_LIMIT = FLOAT_INT_LIMIT + 1  # a usable int: _INT_FLOOR < it < _INT_LIMIT
_INT_FLOOR = -_INT_LIMIT


def as_number(value: Any) -> float | None:
    """``value`` as a float when it is a number a schedule can use (finite, not a boolean)."""
    c = value.__class__
    if c is float:
        return value if value - value == 0.0 else None  # inf - inf and nan - nan are nan
    if c is int:
        return float(value) if _INT_FLOOR < value < _INT_LIMIT else None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or (
        isinstance(value, int) and not _INT_FLOOR < value < _INT_LIMIT  # reported by number_findings
    ):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def plain_numbers_ok(value: Any) -> bool:
    """Whether ``_bad_numbers(value)`` finds nothing (decided without building paths)."""
    if value.__class__ is not FrozenDict:
        return _value_ok(value)
    data = value._data
    try:
        "".join(data)  # every key is text (the usual case)
    except TypeError:
        for k in data:
            if k.__class__ is not str and not _value_ok(k):
                return False
    for v in data.values():  # the arguments of a modifier: mostly text, numbers and lists
        c = v.__class__
        if c is str or c is bool or v is None:
            continue
        if c is float:
            if v - v != 0.0:  # inf - inf and nan - nan are nan
                return False
        elif c is int:
            if not _INT_FLOOR < v < _INT_LIMIT:
                return False
        elif c is tuple:
            if v and v[0].__class__ is str:
                try:
                    "".join(v)  # only text: no number
                    continue
                except TypeError:
                    pass
            for x in v:
                c = x.__class__
                if c is str:
                    continue
                if c is int:
                    if not _INT_FLOOR < x < _INT_LIMIT:
                        return False
                elif not _value_ok(x):
                    return False
        elif not _value_ok(v):
            return False
    return True


def _value_ok(value: Any) -> bool:
    """Whether ``_bad_numbers(value)`` finds nothing, for any value."""
    c = value.__class__
    if c is float:
        return bool(value - value == 0.0)
    if c is str:
        return True
    if c is tuple:  # a list of text and plain numbers without a walk; anything else: the walk
        for x in value:
            c = x.__class__
            if c is str or c is bool:
                continue
            if c is float and x - x == 0.0 or c is int and _INT_FLOOR < x < _INT_LIMIT:
                continue
            break
        else:
            return True
    isfinite = math.isfinite
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        v = pop()
        c = v.__class__
        if c is str or c is bool or v is None:
            continue
        if c is float:
            if not isfinite(v):
                return False
        elif c is int:
            if not _INT_FLOOR < v < _INT_LIMIT:
                return False
        elif c is FrozenDict:
            extend(v._data)
            extend(v._data.values())
        elif c is tuple:
            extend(v)
        elif next(_bad_numbers(v), None) is not None:
            return False
    return True


def number_findings(m: Modifier) -> list[Finding]:
    """M005 for each non-finite or out-of-range number in ``m``'s arguments."""
    out = []
    for path, what in _bad_numbers(m.args):
        where = "'" + ".".join(str(p) for p in path) + "'"
        out.append(Finding(codes.M005, f"{where} {what}", "Write a finite number, or -1 for 'never'."
                           if path and path[-1] == "end_epoch" else "Write a finite number.", m, path))
    return out


# -- selector patterns ---------------------------------------------------------------------
#: ``re:`` selector -> None when it compiles, else (message, hint); selectors repeat across
#: files, and compiling one for the linear-time matcher costs far more than a lookup.
_PATTERN_VERDICTS: dict[str, tuple[str, str] | None] = {}
_PATTERN_CACHE_SIZE = 4096
_PATTERN_CACHE_LENGTH = 1024


def pattern_verdict(selector: str) -> tuple[str, str] | None:
    verdict = _PATTERN_VERDICTS.get(selector, False)
    if verdict is not False:
        return verdict  # type: ignore[return-value]
    from ..params.selectors import compile_selectors
    from ..text.patterns import PatternError

    try:
        compile_selectors([selector])
        verdict = None
    except PatternError as exc:
        verdict = (exc.message, exc.hint)
    if len(selector) <= _PATTERN_CACHE_LENGTH:
        if len(_PATTERN_VERDICTS) >= _PATTERN_CACHE_SIZE:
            _PATTERN_VERDICTS.clear()
        _PATTERN_VERDICTS[selector] = verdict
    return verdict


# -- what the rules of recipe_spec.validation read of the arguments ------------------------
#: What the rules read of one modifier, computed once per modifier and validation:
#: (start_epoch, end_epoch as numbers or None, start_epoch with -1 when absent, the epoch
#: window (from max(start, 0) to end, inf for -1; None when either is unreadable), the modifier's declaration).
Fact = tuple[float | None, float | None, float | None, tuple[float, float] | None, Any]


def fact_of(m: Modifier, declaration: Callable[[str], Any]) -> Fact:
    args: Mapping[Any, Any] = m.args._data if m.args.__class__ is FrozenDict else m.args
    start, end = args.get("start_epoch"), args.get("end_epoch")
    start = start if start.__class__ is float and start - start == 0.0 else as_number(start)
    end = end if end.__class__ is float and end - end == 0.0 else as_number(end)
    s = start if start is not None else -1.0 if "start_epoch" not in args else None  # absent: -1
    e = end if end is not None else -1.0 if "end_epoch" not in args else None
    window = None if s is None or e is None else (max(s, 0.0) if s != -1 else 0.0, math.inf if e == -1 else e)
    return start, end, s, window, declaration(m.type)


_ALL_TOKENS = ("__ALL__", "__ALL_PRUNABLE__")


def exact_params(m: Modifier) -> list[tuple[int | None, str]]:
    params = m.args.get("params")
    items = enumerate(params) if isinstance(params, tuple) else ((None, params),)
    if plain_names(params):
        return list(items)  # the usual case: names only, no pattern nor token
    out = []
    for i, p in items:  # (only a text starting with "__" reads "__ALL__" once upper-cased)
        if isinstance(p, str) and not p.startswith("re:") and (not p.startswith("__") or p.upper() not in _ALL_TOKENS):
            out.append((i, p))
    return out


def plain_names(params: Any) -> bool:
    """True when ``params`` is a list of texts none of which holds ``re:`` or ``__``."""
    if params.__class__ is not tuple:
        return False
    try:
        text = "\n".join(params)
    except TypeError:
        return False
    return "re:" not in text and "__" not in text
