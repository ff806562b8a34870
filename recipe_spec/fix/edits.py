"""Fixes as text edits: what a fix changes, and the few edits every fix is made of.

A :class:`Fix` is a set of :class:`Edit` s, each replacing the text between two positions
(1-based line and column, as the reader reports them) of the recipe file. Nothing is ever
re-dumped: a fix rewrites the characters of one key, value or entry, so every other byte of
the file (comments, key order, quoting, indentation, blank lines, Markdown around front
matter) stays as it was. The positions come from the reader's record of where each key and
value stands (:class:`recipe_spec.text.nodes.Document`); an edit whose text at those positions
is not what the fix expects is not made.

>>> from recipe_spec.text.reader import read_yaml
>>> text = "a:\\n  # keep\\n  percdamp: 0.01  # why\\n  b: 2\\n"
>>> doc = read_yaml(text)
>>> t = Text(text)
>>> print(t.apply([rename_key(t, doc, ("a", "percdamp"), "dampening_frac")]), end="")
a:
  # keep
  dampening_frac: 0.01  # why
  b: 2
>>> print(t.apply([delete_entry(t, doc, ("a", "percdamp"))]), end="")
a:
  # keep
  b: 2
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..text.nodes import Document

__all__ = ["Edit", "Fix", "Text", "FixNotPossible", "rename_key", "delete_entry",
           "replace_value", "entry_lines"]

Path = tuple[Any, ...]


class FixNotPossible(Exception):
    """The layout around a finding is one no edit here can rewrite exactly (the finding is
    then left for a hand edit)."""


@dataclass(frozen=True)
class Edit:
    """Replace the text from ``start`` up to ``end`` (``(line, column)``, 1-based, end
    exclusive) with ``text``."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str


@dataclass(frozen=True)
class Fix:
    """One finding's fix: ``code`` (the diagnostic it answers) at ``line``:``column``,
    ``title`` (what it does, e.g. ``rename percdamp to dampening_frac``), ``safe`` (exact:
    the recipe means the same, or what the target release requires) and its edits."""

    code: str
    line: int
    column: int
    title: str
    safe: bool
    edits: tuple[Edit, ...]


class Text:
    """A recipe file's text with line/column to offset conversion (columns count
    characters, as the reader's do)."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)

    def offset(self, line: int, column: int) -> int:
        if line - 1 >= len(self.starts):
            return len(self.text)
        return min(self.starts[line - 1] + column - 1, len(self.text))

    def line(self, n: int) -> str:
        """Line ``n`` (1-based) without its newline."""
        if n - 1 >= len(self.starts):
            return ""
        start = self.starts[n - 1]
        end = self.text.find("\n", start)
        return self.text[start:] if end < 0 else self.text[start:end]

    def slice(self, start: tuple[int, int], end: tuple[int, int]) -> str:
        return self.text[self.offset(*start):self.offset(*end)]

    def apply(self, items: Iterable[Fix | Edit]) -> str:
        """The text with every edit (of every fix) of ``items`` made; they must not overlap
        (see :meth:`without_overlaps`)."""
        every = [e for x in items for e in (x.edits if isinstance(x, Fix) else (x,))]
        edits = sorted(((self.offset(*e.start), self.offset(*e.end), e.text) for e in every),
                       reverse=True)
        out = self.text
        for start, end, text in edits:
            out = out[:start] + text + out[end:]
        return out

    def without_overlaps(self, fixes: Sequence[Fix]) -> list[Fix]:
        """``fixes`` less those whose edits overlap an earlier one's (a later pass makes
        them)."""
        taken: list[tuple[int, int]] = []
        kept = []
        for f in fixes:
            spans = [(self.offset(*e.start), self.offset(*e.end)) for e in f.edits]
            if any(s < te and ts < e or (s == e == ts) for s, e in spans for ts, te in taken):
                continue
            taken += spans
            kept.append(f)
        return kept


def _key_text(t: Text, doc: Document, path: Path) -> tuple[tuple[int, int], tuple[int, int], str]:
    loc = doc.locs.get(tuple(path))
    if loc is None or loc.key_span is None:
        raise FixNotPossible(f"no key at {path!r}")
    k = loc.key_span
    start, end = (k.line, k.column), (k.end_line, k.end_column)
    return start, end, t.slice(start, end)


def rename_key(t: Text, doc: Document, path: Path, new: str) -> Edit:
    """Write the key of ``path`` as ``new`` (in the same quotes, if it had any)."""
    start, end, old = _key_text(t, doc, path)
    if old.strip("'\"") != str(path[-1]):
        raise FixNotPossible(f"the key at {start} reads {old!r}")
    quote = old[0] if old[:1] in ("'", '"') else ""
    return Edit(start, end, f"{quote}{new}{quote}")


def replace_value(t: Text, doc: Document, path: Path, text: str) -> Edit:
    """Write the (scalar) value of ``path`` as ``text``, YAML as it will stand in the file."""
    loc = doc.locs.get(tuple(path))
    if loc is None:
        raise FixNotPossible(f"no value at {path!r}")
    s = loc.span
    if s.end_line != s.line:
        raise FixNotPossible("the value spans several lines")
    return Edit((s.line, s.column), (s.end_line, s.end_column), text)


#: The last document indexed by :func:`_subtree`: (its locations, path -> paths under it).
_INDEX: list[Any] = [None, {}]


def _subtree(doc: Document, path: Path) -> list[Path]:
    """Every recorded path at or under ``path`` (an index of the document's paths is built
    once per document, so that finding an entry's end does not scan the whole file)."""
    if _INDEX[0] is not doc.locs:
        index: dict[Path, list[Path]] = {}
        for p in list(doc.locs):
            for i in range(len(p) + 1):
                index.setdefault(p[:i], []).append(p)
        _INDEX[0], _INDEX[1] = doc.locs, index
    return _INDEX[1].get(tuple(path), [])


def _last_content(t: Text, doc: Document, path: Path) -> tuple[int, int]:
    """Where the entry at ``path`` ends: the end of its last scalar or flow collection (a
    block collection's own end is where the next token starts, past comments)."""
    path = tuple(path)
    under = [(p, doc.locs[p]) for p in _subtree(doc, path)]
    ends = []
    for p, loc in under:
        s = loc.span
        opener = t.slice((s.line, s.column), (s.line, s.column + 1))
        leaf = not any(len(q) > len(p) and q[:len(p)] == p for q, _ in under)
        if leaf or opener in ("[", "{"):
            if s.end_column == 1 and s.end_line > s.line:  # a block scalar ends on the next line
                ends.append((s.end_line - 1, len(t.line(s.end_line - 1)) + 1))
            else:
                ends.append((s.end_line, s.end_column))
    return max(ends)


def _in_flow(t: Text, doc: Document, path: Path) -> bool:
    parent = doc.locs.get(tuple(path)[:-1])
    if parent is None:
        return False
    s = parent.span
    return t.slice((s.line, s.column), (s.line, s.column + 1)) == "{"


def entry_lines(t: Text, doc: Document, path: Path) -> tuple[int, int]:
    """The first and last line of a block mapping entry that stands on lines of its own (its
    key first on its line, nothing after its value but a comment)."""
    start, _, _ = _key_text(t, doc, path)
    if t.line(start[0])[:start[1] - 1].strip():
        raise FixNotPossible("the key shares its line with what comes before it")
    end = _last_content(t, doc, path)
    rest = t.line(end[0])[end[1] - 1:].strip()
    if rest and not rest.startswith("#"):
        raise FixNotPossible("the value shares its line with what comes after it")
    return start[0], end[0]


def delete_entry(t: Text, doc: Document, path: Path) -> Edit:
    """Delete the mapping entry at ``path`` (key and value): its whole lines in a block
    mapping, the entry and one comma beside it in a flow mapping."""
    if _in_flow(t, doc, path):
        return _delete_flow(t, doc, path)
    first, last = entry_lines(t, doc, path)
    return Edit((first, 1), (last + 1, 1), "")


def _delete_flow(t: Text, doc: Document, path: Path) -> Edit:
    start, _, _ = _key_text(t, doc, path)
    end = _last_content(t, doc, path)
    a, b = t.offset(*start), t.offset(*end)
    text = t.text
    j = b
    while j < len(text) and text[j] in " \t\r\n":
        j += 1
    if j < len(text) and text[j] == ",":
        j += 1
        while j < len(text) and text[j] in " \t":
            j += 1
        return _edit_between(t, a, j)
    i = a
    while i > 0 and text[i - 1] in " \t\r\n":
        i -= 1
    if i > 0 and text[i - 1] == ",":
        return _edit_between(t, i - 1, b)
    return _edit_between(t, a, b)  # the only entry: {} remains


def _edit_between(t: Text, a: int, b: int) -> Edit:
    """An edit deleting offsets ``[a, b)``; whole lines when nothing else is left on them."""
    text = t.text
    line_start = text.rfind("\n", 0, a) + 1
    line_end = text.find("\n", b)
    line_end = len(text) if line_end < 0 else line_end
    if not text[line_start:a].strip() and not text[b:line_end].strip():
        a, b = line_start, min(line_end + 1, len(text))
    return Edit(_pos(t, a), _pos(t, b), "")


def _pos(t: Text, offset: int) -> tuple[int, int]:
    import bisect

    line = bisect.bisect_right(t.starts, offset)
    return line, offset - t.starts[line - 1] + 1
