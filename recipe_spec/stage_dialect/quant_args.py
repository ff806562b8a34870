"""The nested quantization arguments of the stage/group dialect (compressed-tensors structures).

``config_groups`` maps group names to a ``QuantizationScheme`` (``targets``, ``weights``,
``input_activations``, ``output_activations``, ``format``); each of the three argument slots
and ``kv_cache_scheme`` hold a ``QuantizationArgs`` mapping (``num_bits``, ``type``,
``strategy``...). ``scheme`` is a preset name (``"W4A16"``) or ``{PRESET: [targets]}``.
SparseML 1.8's ``config_groups`` has the same shape as llm-compressor's.

Which fields, enum values and presets exist depends on the compressed-tensors release a tool
release used: :data:`CT_OF` gives the one pinned by llm-compressor's ``setup.py``
(``compressed-tensors==X``) or, where it was unpinned (llm-compressor 0.1-0.3, SparseML
1.8/1.9), the one current at the tool's release date. SparseML 1.6/1.7 have none.

>>> [p for p in preset_names(("llmcompressor", Version.parse("0.13"))) if p.startswith("MX")]
['MXFP4', 'MXFP4A16', 'MXFP8', 'MXFP8A16']
>>> "FP8_BLOCK" in preset_names(("llmcompressor", Version.parse("0.6")))
False
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..compressed_tensors.fields import ARGS_FIELDS, SCHEME_FIELDS, QuantField
from ..compressed_tensors.presets import PRESET_RANGES as PRESETS
from ..text.frozen import thaw
from .versions import ToolVersion, Version, in_range

__all__ = [
    "CT_OF", "QuantField", "ARGS_FIELDS", "SCHEME_FIELDS", "PRESETS",
    "ct_version", "fields_in", "field_schema", "preset_names", "all_preset_names",
    "canonical_preset", "Rec", "type_problems", "check_quant",
]

_V = Version.parse

#: compressed-tensors release used by each tool release.
CT_OF: dict[ToolVersion, Version] = {
    ("sparseml", _V("1.8")): _V("0.4"), ("sparseml", _V("1.9")): _V("0.9"),
    ("llmcompressor", _V("0.1")): _V("0.5"), ("llmcompressor", _V("0.2")): _V("0.6"),
    ("llmcompressor", _V("0.3")): _V("0.8"), ("llmcompressor", _V("0.4")): _V("0.9"),
    ("llmcompressor", _V("0.5")): _V("0.9"), ("llmcompressor", _V("0.6")): _V("0.10"),
    ("llmcompressor", _V("0.7")): _V("0.11"), ("llmcompressor", _V("0.8")): _V("0.12"),
    ("llmcompressor", _V("0.9")): _V("0.13"), ("llmcompressor", _V("0.10")): _V("0.14"),
    ("llmcompressor", _V("0.11")): _V("0.16"), ("llmcompressor", _V("0.12")): _V("0.17"),
    ("llmcompressor", _V("0.13")): _V("0.18"), ("llmcompressor", _V("0.14")): _V("0.19"),
}


def ct_version(pair: ToolVersion) -> Version | None:
    """The compressed-tensors release of a tool release (None: it has none)."""
    return CT_OF.get(pair)


def fields_in(fields: tuple[QuantField, ...], pair: ToolVersion) -> dict[str, QuantField]:
    """The fields that exist in a tool release, by name (none without compressed-tensors)."""
    ct = ct_version(pair)
    if ct is None:
        return {}
    return {f.name: f for f in fields if in_range(f.ct, ct)}


def field_schema(field: QuantField, pair: ToolVersion) -> Mapping[str, Any]:
    """The schema of ``field`` in a tool release."""
    ct = ct_version(pair) or Version((0,))
    for rng, schema in field.schemas:
        if in_range(rng, ct):
            return schema
    return field.schemas[-1][1]


def preset_names(pair: ToolVersion) -> list[str]:
    """The preset scheme names a tool release accepts, sorted."""
    ct = ct_version(pair)
    if ct is None:
        return []
    return sorted(n for n, rng in PRESETS.items() if in_range(rng, ct))


def all_preset_names() -> list[str]:
    """Every preset name of any compressed-tensors release, sorted."""
    return sorted(PRESETS)


def canonical_preset(name: str) -> str | None:
    """The preset spelled as declared (``"w4a16"`` -> ``"W4A16"``), or None."""
    upper = name.upper()
    return upper if upper in PRESETS else None


# -- checking values ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Rec:
    """One problem found in one release (before releases are merged into a Problem);
    ``subject`` tells apart problems at the same path (the missing argument's name)."""

    path: tuple[Any, ...]
    kind: str
    message: str
    hint: str = ""
    subject: str = ""


_PY_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,), "number": (int, float), "boolean": (bool,), "string": (str,),
    "array": (list, tuple), "object": (Mapping,), "null": (type(None),),
}


def _is(value: Any, type_name: str) -> bool:
    if isinstance(value, bool) and type_name in ("integer", "number"):
        return False
    return isinstance(value, _PY_TYPES[type_name])


def _same(a: Any, b: Any, ci: bool) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower() if ci else a == b
    return type(a) is type(b) and a == b


#: id(schema) -> (schema, its parts as :func:`type_problems` reads them); the schema is kept
#: so that its id stays its own. Schemas are the catalogue's constants, so this stays small.
_SHAPES: dict[int, tuple[Mapping[str, Any], tuple[Any, ...]]] = {}


def _shape(schema: Mapping[str, Any]) -> tuple[Any, ...]:
    """``(enum, ci, type names, Python types, whether a bool passes, a bound?, pattern or
    N:M?, items)`` of a schema fragment; the type parts are None without ``type``."""
    found = _SHAPES.get(id(schema))
    if found is not None and found[0] is schema:
        return found[1]
    types = schema.get("type")
    names = py = ok_bool = None
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        py = tuple(t for n in names for t in _PY_TYPES[n]) if all(n in _PY_TYPES for n in names) else None
        ok_bool = "boolean" in names
    enum = schema.get("enum")
    bounded = any(k in schema for k in ("minimum", "maximum", "exclusiveMaximum"))
    shape = (None if enum is None else tuple(enum), bool(schema.get("ci")), names, py, ok_bool,
             bounded, "pattern" in schema or "nm" in schema, schema.get("items"))
    if len(_SHAPES) > 4096:
        _SHAPES.clear()
    _SHAPES[id(schema)] = (schema, shape)
    return shape


def type_problems(value: Any, schema: Mapping[str, Any], path: tuple[Any, ...]) -> list[Rec]:
    """Problems of ``value`` against a schema fragment (``type``, ``enum`` with ``ci`` for
    case-insensitive strings, ``items``, ``minimum``/``maximum``, ``pattern``). Values may be
    frozen (tuples, FrozenDict): messages show them as the plain list/dict they stand for."""
    is_str = isinstance(value, str)
    if is_str and "eval(" in value and value.strip().startswith("eval("):
        return []
    enum, ci, names, py, ok_bool, bounded, has_pattern, items = _shape(schema)
    if enum is not None:
        for e in enum:
            if _same(value, e, ci):
                return []
        shown = ", ".join(repr(e) for e in enum if e is not None)
        if is_str:
            words = [e for e in enum if isinstance(e, str)]
            close = difflib.get_close_matches(value.lower(), words, n=1, cutoff=0.5)
            return [Rec(path, "enum", f"{value!r} is not one of {shown}",
                        f"did you mean {close[0]!r}?" if close else f"write one of {shown}")]
        return [Rec(path, "type", f"{thaw(value)!r} is not one of {shown}", f"write one of {shown}")]
    if names is not None:
        if py is None:
            ok = any(_is(value, t) for t in names)
        elif isinstance(value, bool):
            ok = ok_bool
        else:
            ok = isinstance(value, py)
        if not ok:
            return [_type_rec(path, names, value)]
    out: list[Rec] = []
    if isinstance(value, float) and not math.isfinite(value):
        return [Rec(path, "range", f"{_shown(value)} is not a finite number", "write a finite number")]
    if bounded and isinstance(value, (int, float)) and not isinstance(value, bool):
        out += bound_problems(value, schema, path)
    if is_str and has_pattern:
        if "pattern" in schema and not re.search(schema["pattern"], value):
            out.append(Rec(path, "type", f"{value!r} does not match {schema['pattern']}"))
        elif schema.get("nm"):
            out += nm_problems(value, path)
    if items is not None and isinstance(value, (list, tuple)):
        i_enum, _, i_names, i_py, i_bool, i_bounded, i_pattern, i_items = _shape(items)
        if i_enum is None and i_py is not None and not (i_bounded or i_pattern or i_items is not None) \
                and not any(isinstance(x, float) and not math.isfinite(x) for x in value):
            for i, item in enumerate(value):  # the common case: items of one plain type
                if isinstance(item, bool):
                    if i_bool:
                        continue
                elif isinstance(item, i_py) or (isinstance(item, str) and "eval(" in item
                                                and item.strip().startswith("eval(")):
                    continue
                out.append(_type_rec((*path, i), i_names, item))
        else:
            for i, item in enumerate(value):
                out += type_problems(item, items, (*path, i))
    return out


def _shown(value: float) -> str:
    return {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}.get(str(value), f"{value:g}")


def bound_problems(value: float, schema: Mapping[str, Any], path: tuple[Any, ...]) -> list[Rec]:
    """``value`` against ``minimum``, ``maximum`` and ``exclusiveMaximum``; a ``fraction``
    (a sparsity) is reported as kind ``"sparsity"`` and, written as a percentage, with the
    fraction as the hint."""
    low, high, below = schema.get("minimum"), schema.get("maximum"), schema.get("exclusiveMaximum")
    fraction = bool(schema.get("fraction"))
    kind = "sparsity" if fraction else "range"
    if low is not None and value < low:
        if fraction:
            hint = "write a fraction from 0 (nothing pruned) to below 1 (0.9 prunes 90%)"
        elif low == -1:
            hint = "write -1 (the default: from the start, to the end) or a number from 0 up"
        else:
            hint = f"write a number from {low:g}" + (f" to {high:g}" if high is not None else " up")
        return [Rec(path, kind, f"{_shown(value)} is below the minimum {low:g}", hint)]
    if high is not None and value > high:
        return [Rec(path, kind, f"{_shown(value)} is above the maximum {high:g}",
                    f"write a number up to {high:g}")]
    if below is None or value < below:
        return []
    if fraction:
        hint = (f"did you mean {value / 100:g}? A sparsity is a fraction, not a percentage"
                if 5 <= value <= 100 else "write a fraction below 1 (0.9 prunes 90%)")
        return [Rec(path, kind, f"{_shown(value)} is not a fraction below 1 (a sparsity is in [0, 1))",
                    hint)]
    return [Rec(path, kind, f"{_shown(value)} is not below {below:g}", f"write a number below {below:g}")]


_NM_TEXT = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


def nm_problems(value: str, path: tuple[Any, ...]) -> list[Rec]:
    """An ``'N:M'`` mask structure keeps N of every M weights: N <= M, and M > 0 unless it
    is ``'0:0'`` (unstructured)."""
    match = _NM_TEXT.match(value)
    if match is None:
        return []
    n, m = int(match.group(1)), int(match.group(2))
    if n <= m and (m > 0 or n == 0):
        return []
    return [Rec(path, "nm", f"mask structure {value!r} prunes {n} of every {m} weights: "
                "N:M needs N <= M", "write N:M with N at most M, such as '2:4' (2 of every 4 "
                "weights pruned), or '0:0' for unstructured pruning")]


def _type_rec(path: tuple[Any, ...], names: list[str], value: Any) -> Rec:
    value = thaw(value)
    wanted = " or ".join(n for n in names if n != "null")
    if isinstance(value, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", value) \
            and ("number" in names or "integer" in names):
        hint = "remove the quotes to make it a number"
    else:
        hint = f"write a value of type {wanted or 'null'}" + (" (or null)" if "null" in names and wanted else "")
    return Rec(path, "type", f"expected {' or '.join(names)}, got {type(value).__name__} {value!r}", hint)


#: (id of a field tuple, release) -> what :func:`_check_fields` needs of it there.
_FIELDS_OF: dict[tuple[int, ToolVersion], tuple[Any, ...]] = {}


def _fields_of(fields: tuple[QuantField, ...], pair: ToolVersion) -> tuple[Any, ...]:
    """``({name: (field, its schema)} in the release, every declared name, the names of the
    other structure's fields)`` for :data:`ARGS_FIELDS` or :data:`SCHEME_FIELDS`."""
    found = _FIELDS_OF.get((id(fields), pair))
    if found is None or found[0] is not fields:
        other = ARGS_FIELDS if fields is SCHEME_FIELDS else SCHEME_FIELDS
        found = _FIELDS_OF[(id(fields), pair)] = (fields, (
            {n: (f, field_schema(f, pair)) for n, f in fields_in(fields, pair).items()},
            frozenset(f.name for f in fields), frozenset(f.name for f in other)))
    return found[1]


def _check_fields(value: Any, fields: tuple[QuantField, ...], pair: ToolVersion,
                  path: tuple[Any, ...], what: str, *, need_targets: bool = False) -> list[Rec]:
    if not isinstance(value, Mapping):
        return [Rec(path, "type", f"{what} must be a mapping, got {type(thaw(value)).__name__}")]
    present, declared, other_names = _fields_of(fields, pair)
    out: list[Rec] = []
    for key, item in value.items():
        sub = (*path, key)
        if key in present:
            field, schema = present[key]
            out += type_problems(item, schema, sub)
            if field.nested == "args" and isinstance(item, Mapping):
                out += _check_fields(item, ARGS_FIELDS, pair, sub, "QuantizationArgs")
        elif key in declared:
            out.append(Rec(sub, "not_in_version", f"{what} has no field {key}"))
        elif key in other_names:
            where = ("weights: (or input_activations:/output_activations:)"
                     if fields is SCHEME_FIELDS else "the group, next to weights:")
            out.append(Rec(sub, "misplaced", f"{key} is not a field of {what}",
                           f"move it under {where}"))
        else:
            close = difflib.get_close_matches(str(key), sorted(present), n=1, cutoff=0.6)
            out.append(Rec(sub, "unknown_arg", f"{what} has no field {key}",
                           f"did you mean {close[0]}?" if close else
                           f"fields: {', '.join(sorted(present))}"))
    if need_targets and "targets" not in value:
        out.append(Rec(path, "missing_required", f"{what} requires targets", "give targets",
                       subject="targets"))
    return out


def _check_preset(name: Any, pair: ToolVersion, path: tuple[Any, ...]) -> list[Rec]:
    if not isinstance(name, str):
        return [Rec(path, "type", f"a preset name must be a string, got {name!r}")]
    canonical = canonical_preset(name)
    if canonical is None:
        close = difflib.get_close_matches(name.upper(), all_preset_names(), n=1, cutoff=0.6)
        return [Rec(path, "preset", f"no preset scheme {name!r}",
                    f"did you mean {close[0]}?" if close else
                    f"presets: {', '.join(preset_names(pair))}")]
    if canonical not in preset_names(pair):
        return [Rec(path, "preset", f"no preset {canonical}")]
    return []


_PRESET_TARGETS: Mapping[str, Any] = {"type": ["string", "array"], "items": {"type": "string"}}


def check_quant(shape: str, value: Any, pair: ToolVersion, path: tuple[Any, ...]) -> list[Rec]:
    """Problems of a quantization structure: ``shape`` is ``"groups"`` (config_groups),
    ``"scheme"`` (preset or ``{PRESET: targets}``) or ``"args"`` (QuantizationArgs)."""
    if isinstance(value, str) and value.strip().startswith("eval("):
        return []
    if shape == "args":
        return _check_fields(value, ARGS_FIELDS, pair, path, "QuantizationArgs")
    if shape == "scheme":
        if isinstance(value, str):
            return _check_preset(value, pair, path)
        if not isinstance(value, Mapping):
            return []  # the argument's own type check reports it
        out: list[Rec] = []
        for key, targets in value.items():
            sub = (*path, key)
            if isinstance(targets, Mapping):
                out += _check_fields(targets, SCHEME_FIELDS, pair, sub, "QuantizationScheme")
                continue
            out += _check_preset(key, pair, sub)
            out += type_problems(targets, _PRESET_TARGETS, sub)
        return out
    if not isinstance(value, Mapping):
        return []
    out = []
    for group, scheme in value.items():
        sub = (*path, group)
        if group in {f.name for f in SCHEME_FIELDS} | {f.name for f in ARGS_FIELDS}:
            out.append(Rec(sub, "misplaced", f"config_groups maps group names to schemes; "
                           f"{group} is a scheme field", f"write config_groups: → group_0: → "
                           f"{group}:"))
            continue
        out += _check_fields(scheme, SCHEME_FIELDS, pair, sub, "QuantizationScheme",
                             need_targets=True)
    return out
