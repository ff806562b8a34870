"""The values a read YAML document is made of, shared by every reader: plain scalars resolved
by the YAML 1.2 core schema (:func:`scalar_value`, :class:`Resolver12`), values with a local tag
(:class:`Tagged`), where each value stands (:class:`Loc`), the read :class:`Document`, merge keys
(:func:`merged`) and the limits a document must keep to."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from yaml.resolver import BaseResolver

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic, Span
from .frozen import FrozenDict

__all__ = [
    "MAX_VALUES", "MAX_DEPTH", "scalar_value", "Path", "Tagged", "Loc", "Document", "Resolver12", "merged",
]

#: A document may expand (aliases included) to at most this many values.
MAX_VALUES = 200_000
#: Mappings and lists may nest at most this deep.
MAX_DEPTH = 64

STD_TAGS = "tag:yaml.org,2002:"


def scalar_value(short: str, text: str) -> Any:
    """The value of a plain YAML 1.2 scalar resolved to ``!!short`` (``null``, ``bool``, ``int``,
    ``float``; anything else stays text). Raises ValueError when ``text`` is not one."""
    if short == "null":
        return None
    if short == "bool":
        return text.lower() == "true"
    if short == "int":
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        return int(text, 10)
    if short == "float":
        lowered = text.lower()
        if lowered.endswith(".inf"):
            return float("-inf") if lowered.startswith("-") else float("inf")
        if lowered == ".nan":
            return float("nan")
        return float(text)
    return text
ALLOWED_STD = {"str", "int", "float", "bool", "null", "map", "seq"}

Path = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Tagged:
    """A value written with a local tag: ``!GMPruningModifier {...}`` gives
    ``Tagged("GMPruningModifier", {...})``."""

    tag: str
    value: Any
    span: Span


@dataclass(frozen=True, slots=True)
class Loc:
    """Where one value of the document stands: its own span and, in a mapping, its key's."""

    span: Span
    key_span: Span | None = None
    style: str | None = None  # the scalar style: None (plain), "'", '"', "|", ">"


@dataclass(frozen=True)
class Document:
    """A read YAML document: the value tree and the location of every path in it."""

    value: Any
    locs: dict[Path, Loc]
    line_offset: int = 0

    def loc(self, path: Path) -> Loc | None:
        """The location of ``path``, or of its closest ancestor that has one."""
        path = tuple(path)
        while True:
            found = self.locs.get(path)
            if found is not None or not path:
                return found
            path = path[:-1]


class Resolver12(BaseResolver):
    """Implicit scalar types of the YAML 1.2 core schema."""

    yaml_implicit_resolvers: dict[str | None, list[tuple[str, re.Pattern[str]]]] = {}


for _tag, _regexp, _first in [
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        "float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+.0123456789",
    ),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
]:
    Resolver12.add_implicit_resolver(STD_TAGS + _tag, re.compile(_regexp), list(_first))



def merged(value: Any, span: Any, diagnostics: list[Diagnostic]) -> dict[Any, Any]:
    """The entries a merge key ``<<`` brings in from ``value`` (a mapping or a list of
    mappings; the first one giving a key wins); Y001 at ``span()`` for anything else."""
    sources = value if isinstance(value, tuple) else (value,)
    out: dict[Any, Any] = {}
    for source in sources:
        if not isinstance(source, FrozenDict):
            diagnostics.append(
                codes.Y001(
                    "a merge key '<<' needs a mapping or a list of mappings",
                    "Merge an anchored mapping: `<<: *defaults`.",
                    span(),
                )
            )
            continue
        for key, val in source.items():
            out.setdefault(key, val)
    return out
