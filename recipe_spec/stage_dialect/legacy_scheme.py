"""SparseML's quantization-aware-training schemes (``LegacyQuantizationModifier``, and
``QuantizationModifier`` before SparseML 1.8): ``scheme`` and the values of
``scheme_overrides`` are an alias (``default``, ``deepsparse``, ``tensorrt``) or a mapping of
``input_activations`` / ``weights`` / ``output_activations`` (each null or a QuantizationArgs
mapping: ``num_bits``, ``symmetric``, ``strategy``, ``kwargs``) and ``target_hardware``.

The fields and their ranges are the ``!Modifier`` QuantizationModifier's (the same SparseML
code underneath), read from its declaration.

>>> [r.message for r in check_legacy("scheme", {"weights": {"num_bits": "abc"}}, ("scheme",))]
["expected integer, got str 'abc'"]
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping
from typing import Any

from ..modifiers import spec
from ..text.frozen import thaw
from .quant_args import PRESETS, Rec, type_problems

__all__ = ["ALIASES", "check_legacy"]

#: The scheme aliases SparseML's QAT accepts.
ALIASES = ("default", "deepsparse", "tensorrt")
_SLOTS = ("input_activations", "weights", "output_activations")


@functools.lru_cache(maxsize=1)
def _defs() -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(QuantizationArgs field -> schema, scheme field -> schema) of the twin."""
    defs = spec("QuantizationModifier").schema_extra["$defs"]
    scheme = next(a for a in defs["quantization_scheme"]["anyOf"] if a.get("type") == "object")
    return defs["quantization_args"]["properties"], scheme["properties"]


def check_legacy(shape: str, value: Any, path: tuple[Any, ...]) -> list[Rec]:
    """Problems of a QAT ``scheme`` (``shape`` ``"scheme"``) or ``scheme_overrides``
    (``"overrides"``: a mapping of module types or names to schemes)."""
    if value is None or (isinstance(value, str) and value.strip().startswith("eval(")):
        return []
    if shape == "scheme":
        return _scheme(value, path)
    if not isinstance(value, Mapping):
        return []  # the argument's own type check reports it
    out: list[Rec] = []
    for name, scheme in value.items():
        out += _scheme(scheme, (*path, name))
    return out


def _scheme(value: Any, path: tuple[Any, ...]) -> list[Rec]:
    if value is None:
        return []
    if isinstance(value, str):
        if value in ALIASES:
            return []
        preset = value.upper() in PRESETS
        close = difflib.get_close_matches(value.lower(), ALIASES, n=1, cutoff=0.6)
        hint = (f"did you mean {close[0]!r}?" if close else
                "write default, deepsparse or tensorrt, or a mapping of weights: / "
                "input_activations: with num_bits and symmetric")
        what = (f"{value!r} is a compressed-tensors preset, which SparseML's QAT does not know"
                if preset else f"no QAT scheme alias {value!r}")
        return [Rec(path, "preset", what, hint)]
    if not isinstance(value, Mapping):
        return [Rec(path, "type", f"a QAT scheme is an alias or a mapping, got "
                    f"{type(thaw(value)).__name__} {thaw(value)!r}",
                    "write default, deepsparse or tensorrt, or a mapping of weights: / "
                    "input_activations:")]
    args_fields, scheme_fields = _defs()
    out: list[Rec] = []
    for key, item in value.items():
        sub = (*path, key)
        if key in _SLOTS:
            out += _args(item, sub, args_fields)
        elif key in scheme_fields:
            out += type_problems(item, scheme_fields[key], sub)
        else:
            out.append(_unknown(sub, key, scheme_fields, "QAT scheme"))
    return out


def _args(value: Any, path: tuple[Any, ...], fields: Mapping[str, Any]) -> list[Rec]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [Rec(path, "type", f"QuantizationArgs must be a mapping or null, got "
                    f"{type(thaw(value)).__name__} {thaw(value)!r}",
                    "write e.g. {num_bits: 8, symmetric: true}")]
    out: list[Rec] = []
    for key, item in value.items():
        sub = (*path, key)
        if key in fields:
            out += type_problems(item, fields[key], sub)
        else:
            out.append(_unknown(sub, key, fields, "QuantizationArgs"))
    return out


def _unknown(path: tuple[Any, ...], key: Any, fields: Mapping[str, Any], what: str) -> Rec:
    close = difflib.get_close_matches(str(key), sorted(fields), n=1, cutoff=0.6)
    return Rec(path, "unknown_arg", f"{what} has no field {key}",
               f"did you mean {close[0]}?" if close else f"fields: {', '.join(sorted(fields))}")
