"""The path -> :class:`~recipe_spec.text.reader.Loc` table of a document read from events,
with every location made only when it is looked up.

While reading, :class:`~recipe_spec.text.events.EventBuilder` records for each path a
number: ``2 * i + k``, where ``i`` is the index of the value's first event and ``k`` says
whether the event just before it is the value's key (a mapping entry). A mapping or list
records ``(number, index of its end event)``. Almost every location is never asked for (only
diagnostics need positions), so no :class:`Span` is built for them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from yaml import AliasEvent, ScalarEvent

from ..diagnostics.base import Span
from .nodes import Loc

__all__ = ["LazyLocs", "gc_paused", "fast_span"]

_MISSING = object()

# Spans and Locs are made without __init__: the slots are set directly (a frozen dataclass's
# __init__ goes through object.__setattr__ for every field).
_new = object.__new__
_set_line, _set_column = Span.line.__set__, Span.column.__set__  # type: ignore[attr-defined]
_set_end_line, _set_end_column = Span.end_line.__set__, Span.end_column.__set__  # type: ignore[attr-defined]
_set_loc_span, _set_key_span, _set_style = (
    Loc.span.__set__, Loc.key_span.__set__, Loc.style.__set__  # type: ignore[attr-defined]
)


def fast_span(line: int, column: int, end_line: int, end_column: int) -> Span:
    """``Span(line, column, end_line, end_column)``, made faster."""
    s = _new(Span)
    _set_line(s, line)
    _set_column(s, column)
    _set_end_line(s, end_line)
    _set_end_column(s, end_column)
    return s


def _loc(span: Span, key_span: Span | None, style: str | None) -> Loc:
    loc = _new(Loc)
    _set_loc_span(loc, span)
    _set_key_span(loc, key_span)
    _set_style(loc, style)
    return loc


class LazyLocs(dict):  # type: ignore[type-arg]
    """A ``dict`` of path -> :class:`Loc` whose entries are made on first access.

    Plain scalars inside a list or mapping are recorded per container (:meth:`defer`: the
    container's path, its keys or indices, their numbers) rather than as one entry per path:
    most are never looked up, and their paths are made only when one is (or when the table
    is read whole)."""

    __slots__ = ("ev", "anchors", "offset", "pending")

    def __init__(self, events: list[Any], anchors: dict[str, int], line_offset: int):
        super().__init__()
        self.ev = events
        self.anchors = anchors
        self.offset = line_offset
        self.pending: dict[Any, tuple[list[Any], list[int]]] = {}

    def defer(self, path: Any, keys: list[Any], records: list[int]) -> None:
        """Record the scalars ``keys`` (keys or indices) of the container at ``path``."""
        old = self.pending.get(path)
        if old is not None:  # the same path built again (two merges): the newer one wins
            for key, record in zip(*old, strict=True):
                if key not in keys:
                    dict.__setitem__(self, path + (key,), record)
        self.pending[path] = (keys, records)

    def _pending(self, key: Any) -> Any:
        """The record of path ``key`` among the deferred ones, or _MISSING."""
        if key.__class__ is tuple and key:
            found = self.pending.get(key[:-1])
            if found is not None:
                try:
                    return found[1][found[0].index(key[-1])]
                except ValueError:
                    pass
        return _MISSING

    def _flush(self) -> None:
        """Every deferred record as an entry of its own."""
        pending = self.pending
        if pending:
            self.pending = {}
            for path, (keys, records) in pending.items():
                for key, record in zip(keys, records, strict=True):
                    if not dict.__contains__(self, path + (key,)):
                        dict.__setitem__(self, path + (key,), record)

    def span(self, start: Any, end: Any) -> Span:
        s, t, off = start.start_mark, end.end_mark, self.offset
        return fast_span(s.line + 1 + off, s.column + 1, t.line + 1 + off, t.column + 1)

    def make(self, record: Any) -> Loc:
        """The :class:`Loc` a recorded number (or (number, end index) pair) stands for."""
        end = None
        if record.__class__ is tuple:
            record, end = record
        ev = self.ev
        i = record >> 1
        e = ev[i]
        if e.__class__ is AliasEvent:
            span = self.span(e, e)
            target = ev[self.anchors[e.anchor]]
            style = (target.style or None) if target.__class__ is ScalarEvent else None
        elif end is not None:
            span = self.span(e, ev[end])
            style = None
        else:
            span = self.span(e, e)
            style = e.style or None
        key_span = self.span(ev[i - 1], ev[i - 1]) if record & 1 else None
        return _loc(span, key_span, style)

    def _made(self, key: Any, record: Any) -> Any:
        if record is None or record.__class__ is Loc:
            return record
        loc = self.make(record)
        dict.__setitem__(self, key, loc)
        return loc

    def __getitem__(self, key: Any) -> Any:
        record = dict.get(self, key, _MISSING)
        if record is _MISSING:
            record = self._pending(key) if self.pending else _MISSING
            if record is _MISSING:
                raise KeyError(key)
        return self._made(key, record)

    def get(self, key: Any, default: Any = None) -> Any:
        record = dict.get(self, key, _MISSING)
        if record is _MISSING:
            record = self._pending(key) if self.pending else _MISSING
            if record is _MISSING:
                return default
        return self._made(key, record)

    def __contains__(self, key: Any) -> bool:
        return dict.__contains__(self, key) or (bool(self.pending) and self._pending(key) is not _MISSING)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self:
            return self[key]
        dict.__setitem__(self, key, default)
        return default

    def pop(self, key: Any, *default: Any) -> Any:
        self._flush()
        if key in self:
            value = self[key]
            dict.pop(self, key)
            return value
        return dict.pop(self, key, *default)

    def keys(self) -> Any:
        self._flush()
        return dict.keys(self)

    def __len__(self) -> int:
        self._flush()
        return dict.__len__(self)

    def values(self) -> list[Any]:  # type: ignore[override]
        return [self[k] for k in list(self)]

    def items(self) -> list[tuple[Any, Any]]:  # type: ignore[override]
        return [(k, self[k]) for k in list(self)]

    def copy(self) -> dict[Any, Any]:  # type: ignore[override]
        return dict(self.items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyLocs):
            return dict(self.items()) == dict(other.items())
        if isinstance(other, dict):
            return dict(self.items()) == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = None  # type: ignore[assignment]

    def __iter__(self) -> Iterator[Any]:
        self._flush()
        return dict.__iter__(self)

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def __reduce__(self) -> Any:
        return (dict, (dict(self.items()),))


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector held off while one text is read: reading makes several
    objects per event (the event, its marks, values, paths) and no reference cycles, so the
    collections it would trigger find nothing and cost about a tenth of the reading. The
    collector is left as it was found (a caller that turned it off keeps it off)."""
    enabled = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
