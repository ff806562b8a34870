"""Writing converted recipes line by line, keeping what the source file wrote.

A converted recipe is written, not re-dumped: an argument that keeps its meaning keeps its
text (its value as written, with variables, ``eval(...)``, anchors and quotes, and every
comment on and inside it), re-indented under its new parent and, where the dialect names it
otherwise, under its new key; comment lines directly above a modifier or an argument travel
with it. Where a value has to change, it is written with the project's YAML writer
(:func:`recipe_spec.recipe.serialize.dump_value`), which quotes what YAML 1.1 or 1.2 would
misread.

:class:`Lines` collects the output; :func:`entry_lines_of` copies one mapping entry;
:func:`comments_above` finds the comment lines that belong to a position.

>>> from recipe_spec.text.reader import read_yaml
>>> src = "a:\\n  # why\\n  percdamp: [1,  # one\\n     2]\\n"
>>> t, doc = Text(src), read_yaml(src)
>>> out = Lines()
>>> out.extend(comments_above(t, 3, 4))
>>> out.extend(entry_lines_of(t, doc, ("a", "percdamp"), "dampening_frac", 4) or [])
>>> print(out.text(), end="")
    # why
    dampening_frac: [1,  # one
       2]
"""

from __future__ import annotations

import re
from typing import Any

from ..fix.edits import FixNotPossible, Text, entry_lines
from ..recipe.model import Recipe
from ..recipe.serialize import dump_value
from ..text.frozen import freeze, thaw
from ..text.nodes import Document

__all__ = ["Lines", "entry_lines_of", "comments_above", "trailing_comment", "value_lines",
           "copy_variables", "header_lines", "argument_lines", "MODES", "Text"]

Path = tuple[Any, ...]


class Lines:
    """The lines of the recipe being written, each with the source position it came from
    (to locate what the validator says of the output in the source)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.origins: list[tuple[int, int] | None] = []

    def add(self, line: str, origin: tuple[int, int] | None = None) -> None:
        self.lines.append(line.rstrip())
        self.origins.append(origin)

    def extend(self, lines: list[str], origin: tuple[int, int] | None = None) -> None:
        for line in lines:
            self.add(line, origin)

    def origin_of(self, line: int) -> tuple[int, int]:
        """The source position of output line ``line`` (1-based): its own, or the closest
        one above it; (1, 1) when none."""
        for n in range(min(line, len(self.lines)) - 1, -1, -1):
            found = self.origins[n]
            if found is not None:
                return found
        return (1, 1)

    def text(self) -> str:
        return "".join(f"{line}\n" for line in self.lines)


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def comments_above(t: Text, line: int, indent: int, stop: int = 0) -> list[str]:
    """The comment lines directly above ``line`` (no blank line between, none at or before
    ``stop``), re-indented to ``indent``."""
    out: list[str] = []
    n = line - 1
    while n > stop and _is_comment(t.line(n)):
        out.insert(0, " " * indent + t.line(n).strip())
        n -= 1
    return out


def trailing_comment(t: Text, line: int, after_column: int) -> str:
    """The comment that ends ``line`` after ``after_column`` (with two spaces before it), or
    ""."""
    rest = t.line(line)[after_column - 1:]
    at = rest.find("#")
    if at < 0 or rest[:at].strip():
        return ""
    return "  " + rest[at:].rstrip()


def entry_lines_of(t: Text, doc: Document, path: Path, key: str, indent: int) -> list[str] | None:
    """The mapping entry at ``path`` as written (its value's text, comments on and inside it),
    under the key ``key`` at ``indent``; None where the entry does not stand on lines of its
    own (a flow mapping's entry)."""
    loc = doc.locs.get(tuple(path))
    if loc is None or loc.key_span is None:
        return None
    try:
        first, last = entry_lines(t, doc, path)
    except FixNotPossible:
        return None
    k = loc.key_span
    if k.end_line != k.line or k.line != first:
        return None
    head = t.line(first)
    out = [" " * indent + key + head[k.end_column - 1:].rstrip()]
    old = k.column - 1
    for n in range(first + 1, last + 1):
        line = t.line(n)
        if not line.strip():
            out.append("")
            continue
        lead = len(line) - len(line.lstrip(" "))
        out.append(" " * (indent + max(lead - old, 1)) + line.lstrip(" "))
    return out


def value_lines(key: str, value: Any, indent: int, comment: str = "") -> list[str]:
    """``key: value`` written anew at ``indent`` (a collection in block style below it)."""
    text = dump_value(value).rstrip("\n")
    if isinstance(value, (dict, list, tuple)) and value:
        pad = " " * (indent + 2)
        return [" " * indent + f"{key}:{comment}", *(pad + line for line in text.split("\n"))]
    text = text.removesuffix("\n...").split("\n")[0]
    return [" " * indent + f"{key}: {text}{comment}"]


def header_lines(t: Text, doc: Document | None) -> tuple[list[str], int]:
    """The comment lines at the top of the YAML, before its first key (blank lines between
    them kept), and the line before that first key."""
    if doc is None or () not in doc.locs:
        return [], 0
    first = doc.locs[()].span.line
    lines = [t.line(n).rstrip() for n in range(doc.line_offset + 1, first)]
    lines = [line if _is_comment(line) else "" for line in lines]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines, first - 1


def copy_variables(recipe: Recipe, t: Text, out: Lines, header_end: int) -> None:
    """The top-level variables as written, with the comments above them (below the
    header, which ends at line ``header_end``)."""
    doc = recipe.document
    if doc is None or not recipe.raw_variables:
        return
    for key in recipe.raw_variables:
        loc = doc.locs.get((key,))
        copied = entry_lines_of(t, doc, (key,), str(key), 0)
        if loc is None or loc.key_span is None or copied is None:
            out.extend(value_lines(str(key), thaw(recipe.raw_variables[key]), 0))
            continue
        out.extend(comments_above(t, loc.key_span.line, 0, header_end))
        out.extend(copied)
    out.add("")


#: How a converted recipe writes values: ``written`` (the text of every value kept, with
#: variables and expressions), ``values`` (the text of literal values kept, expressions
#: replaced by their values, no variables), ``dumped`` (every value written anew).
MODES = ("written", "values", "dumped")

_ALIAS = re.compile(r"(?:^|[\s,\[{:])[*&][\w-]")


def argument_lines(t: Text, doc: Document | None, path: Path, key: str, indent: int, *,
                   raw: Any, value: Any, mode: str) -> list[str]:
    """The argument at ``path`` as ``key: ...`` at ``indent``, with the comments above it:
    its text where ``mode`` keeps it (``raw`` is what it says, ``value`` what it means),
    else ``raw`` (``written``) or ``value`` written anew."""
    loc = doc.locs.get(tuple(path)) if doc is not None else None
    above = comments_above(t, loc.key_span.line, indent) if loc is not None and loc.key_span else []
    copied = None
    if doc is not None and mode != "dumped":
        copied = entry_lines_of(t, doc, path, key, indent)
        if copied is not None and mode == "values" and (
                freeze(raw) != freeze(value) or any(_ALIAS.search(line.split("#")[0]) for line in copied)):
            copied = None
    if copied is None:
        comment = ""
        if loc is not None and loc.span.line == loc.span.end_line:
            comment = trailing_comment(t, loc.span.line, loc.span.end_column)
        copied = value_lines(key, thaw(raw if mode == "written" else value), indent, comment)
    return above + copied
