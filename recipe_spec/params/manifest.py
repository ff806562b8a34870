"""Parameter manifests (``params.json``): written by :func:`write_manifest`, read by
:func:`read_manifest`, whose JSON is read in bounded stack and checked entry
by entry, so that every problem is reported as ``path:line:column: what is wrong``.

- Nesting is measured before parsing (one regular-expression pass that skips strings): more
  than :data:`MAX_DEPTH` levels is refused where it happens, so the JSON parser never
  recurses deeply (a manifest written by ``recipe-spec params`` is 3 levels deep).
- Each entry of ``params`` must be an object with a text ``name``; ``shape`` a list of
  non-negative integers, ``layer_type`` text, ``prunable`` true or false and ``alias`` text
  or null when present. A wrong one is reported at the entry (or at its key).

>>> doc, entries = parse('{"version": 1, "params": [{"name": "fc.weight"}]}', "p.json")
>>> [e["name"] for e in entries]
['fc.weight']
>>> parse('{"version": 1, "params": [{"name": "a", "alias": [1, 2]}]}', "p.json")
Traceback (most recent call last):
...
ValueError: p.json:1:50: params[0].alias must be text or null, not [1, 2]
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any

from ..atomic import write_text
from ..text.expressions import short_repr
from .records import MANIFEST_VERSION, ParamRecord

__all__ = ["MAX_DEPTH", "parse", "write_manifest", "read_manifest"]

#: Deepest nesting of lists and objects accepted in a manifest.
MAX_DEPTH = 64

# A JSON string (escapes included; possessive, so no backtracking) or a bracket.
_TOKENS = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[\]{}]')
_WS = re.compile(r"[ \t\r\n]*")


def _position(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"{line}:{column}"


def _too_deep(text: str) -> int | None:
    """The offset where nesting first goes beyond :data:`MAX_DEPTH`, or None."""
    depth = 0
    for match in _TOKENS.finditer(text):
        ch = match.group()
        if ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return match.start()
        elif ch in "]}":
            depth -= 1
    return None


def _entry_offsets(text: str) -> list[int]:
    """Where each element of the top-level ``params`` list starts ([] when it cannot tell)."""
    decoder = json.JSONDecoder()
    try:
        i = _WS.match(text, 0).end()  # type: ignore[union-attr]
        if text[i] != "{":
            return []
        i += 1
        while True:
            i = _WS.match(text, i).end()  # type: ignore[union-attr]
            if text[i] == "}":
                return []
            key, i = decoder.raw_decode(text, i)
            i = _WS.match(text, i).end()  # type: ignore[union-attr]
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]  # past ':'
            if key != "params":
                _, i = decoder.raw_decode(text, i)
            elif text[i] == "[":
                starts = []
                i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
                while text[i] != "]":
                    starts.append(i)
                    _, i = decoder.raw_decode(text, i)
                    i = _WS.match(text, i).end()  # type: ignore[union-attr]
                    if text[i] == ",":
                        i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
                return starts
            i = _WS.match(text, i).end()  # type: ignore[union-attr]
            if text[i] == ",":
                i += 1
    except (ValueError, IndexError, RecursionError):
        return []


_FIELDS: dict[str, tuple[str, Any]] = {
    "name": ("text", lambda v: isinstance(v, str)),
    "shape": (
        "a list of non-negative integers",
        lambda v: isinstance(v, list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in v),
    ),
    "layer_type": ("text", lambda v: isinstance(v, str)),
    "prunable": ("true or false", lambda v: isinstance(v, bool)),
    "alias": ("text or null", lambda v: v is None or isinstance(v, str)),
}


def _shown(value: Any) -> str:
    """A short JSON rendering of ``value`` (its type's name when it is long)."""
    short = short_repr(value)
    return json.dumps(value) if short != type(value).__name__ else short


def _check_entry(entry: Any, index: int) -> tuple[str | None, str] | None:
    """``(key or None, message)`` for the first problem of entry ``index``, or None."""
    where = f"params[{index}]"
    if not isinstance(entry, dict):
        return None, f"{where} must be an object with a name, not {_shown(entry)}"
    if "name" not in entry:
        return None, f"{where} has no 'name'"
    for key, (wanted, ok) in _FIELDS.items():
        if key in entry and not ok(entry[key]):
            return key, f"{where}.{key} must be {wanted}, not {_shown(entry[key])}"
    return None


def parse(text: str, where: str) -> tuple[dict[str, Any], list[Any]]:
    """``(document, params entries)`` of a manifest's text; ValueError ``where:line:col: ...``
    for anything that is not a manifest :func:`~recipe_spec.params.read_manifest` can use."""
    deep = _too_deep(text)
    if deep is not None:
        raise ValueError(
            f"{where}:{_position(text, deep)}: not a readable parameter manifest (nested more "
            f"than {MAX_DEPTH} levels deep)"
        )
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{where}:{exc.lineno}:{exc.colno}: not a readable parameter manifest ({exc.msg})"
        ) from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise ValueError(f"{where}:1:1: not a readable parameter manifest (nested too deeply)") from None
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION or not isinstance(doc.get("params"), list):
        raise ValueError(
            f"{where}:1:1: not a parameter manifest of version {MANIFEST_VERSION} "
            "(write one with `recipe-spec params --model ... -o params.json`)"
        )
    entries = doc["params"]
    for index, entry in enumerate(entries):
        problem = _check_entry(entry, index)
        if problem is None:
            continue
        key, message = problem
        starts = _entry_offsets(text)
        offset = starts[index] if index < len(starts) else 0
        if key is not None and index < len(starts):
            end = starts[index + 1] if index + 1 < len(starts) else len(text)
            found = re.compile(rf'"{re.escape(key)}"\s*:\s*').search(text, offset, end)
            if found:
                offset = found.end()
        raise ValueError(f"{where}:{_position(text, offset)}: {message}")
    return doc, entries


def manifest_text(records: Sequence[ParamRecord], framework: str, source: str = "") -> str:
    """The text of a parameter manifest (``params.json``): enough to lint without a framework."""
    doc = {
        "version": MANIFEST_VERSION,
        "framework": framework,
        "source": source,
        "params": [r.to_json() for r in records],
    }
    return json.dumps(doc, indent=1) + "\n"


def write_manifest(path: str | os.PathLike[str], records: Sequence[ParamRecord], framework: str, source: str = "") -> None:
    """Write a parameter manifest (:func:`manifest_text`) to ``path``."""
    write_text(path, manifest_text(records, framework, source))


def read_manifest(path: str | os.PathLike[str]) -> tuple[str, list[ParamRecord]]:
    """(framework, records) of a manifest written by :func:`write_manifest`.

    Raises ValueError ``path:line:column: what is wrong`` (see :func:`parse`).
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{os.fspath(path)}: not a readable parameter manifest ({exc})") from None
    doc, entries = parse(text, os.fspath(path))
    try:
        return str(doc.get("framework", "")), [ParamRecord.from_json(p) for p in entries]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{os.fspath(path)}: a parameter entry is malformed ({exc})") from None
