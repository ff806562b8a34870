"""libyaml's event stream of a recipe text, read in one pass.

:func:`read_events` pulls every event of the text from the C parser, settling the nesting
limit on the way (every node counts, aliases included, as the composer counts them). The
composer's own errors (an undefined alias, a duplicate anchor) are raised from the events
once the rest of the text has parsed; what only the pure-Python reader explains well (syntax
errors, a second document) raises :class:`Fallback`. :mod:`recipe_spec.text.events` builds
the recipe's values from the events.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml import (
    AliasEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)

from .nodes import MAX_DEPTH

try:
    from yaml._yaml import CParser
except ImportError:  # pragma: no cover - pure-Python PyYAML
    CParser = None

__all__ = ["Fallback", "read_events", "CParser"]


class Fallback(Exception):
    """The text is for the pure-Python reader (an error it reports with clearer words)."""


def read_events(text: str) -> tuple[list[Any], dict[str, int], bool]:
    """Every event of ``text``, the index of each anchored node's event, and whether the
    text has aliases. Raises the composer's "nesting deeper" error at the first node past
    MAX_DEPTH (before reading further); the composer's error for the first undefined alias or
    duplicate anchor when the rest of the text parses; :class:`Fallback` for anything else
    wrong (the pure-Python reader explains it)."""
    parser = CParser(text)
    events: list[Any] = []
    append = events.append
    get = parser.get_event
    anchors: dict[str, int] = {}
    depth = 0
    documents = 0
    has_alias = False
    deep = None
    problem = None  # the composer's first error: raised once the whole text has parsed
    try:
        while True:
            e = get()
            append(e)
            cls = e.__class__
            if cls is ScalarEvent:
                if depth >= MAX_DEPTH:
                    deep = e
                    break
                if e.anchor is not None:
                    problem = _anchor(e, events, anchors, problem)
            elif cls is MappingStartEvent or cls is SequenceStartEvent:
                depth += 1
                if depth > MAX_DEPTH:
                    deep = e
                    break
                if e.anchor is not None:
                    problem = _anchor(e, events, anchors, problem)
            elif cls is MappingEndEvent or cls is SequenceEndEvent:
                depth -= 1
            elif cls is AliasEvent:
                if depth >= MAX_DEPTH:
                    deep = e
                    break
                if e.anchor not in anchors:
                    problem = problem or yaml.composer.ComposerError(
                        None, None, f"found undefined alias {e.anchor!r}", e.start_mark
                    )
                has_alias = True
            elif cls is DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise Fallback
            elif cls is StreamEndEvent:
                break
    except yaml.YAMLError:
        raise Fallback from None
    if problem is not None:
        raise problem
    if deep is not None:
        raise yaml.composer.ComposerError(
            None, None, f"nesting deeper than {MAX_DEPTH} levels", deep.start_mark
        )
    if text and text[-1] not in _BREAKS:
        _pin_to_end(events, text)
    return events, anchors, has_alias


def _anchor(e: Any, events: list[Any], anchors: dict[str, int], problem: Any) -> Any:
    """Register the anchor of the last event ``e``; the composer's error for a second one of
    the same name, unless an earlier ``problem`` stands."""
    first = anchors.get(e.anchor)
    if first is None:
        anchors[e.anchor] = len(events) - 1
        return problem
    return problem or yaml.composer.ComposerError(
        f"found duplicate anchor {e.anchor!r}; first occurrence", events[first].start_mark,
        "second occurrence", e.start_mark,
    )


_BREAKS = "\n\r\x85\u2028\u2029"


class _Mark:
    __slots__ = ("line", "column")

    def __init__(self, line: int, column: int):
        self.line, self.column = line, column


def _pin_to_end(events: list[Any], text: str) -> None:
    """libyaml closes a text that lacks a final line break on a line past its end (the
    collections ending there end at "line N+1, column 1"); pin those marks to the end of the
    last line, where the pure-Python reader puts them."""
    past = events[-1].end_mark.line  # StreamEnd
    lines = (text.count("\n") + text.count("\r") - text.count("\r\n") + text.count("\x85")
             + text.count("\u2028") + text.count("\u2029"))
    if past <= lines:
        return
    last_break = max(text.rfind(c) for c in _BREAKS)
    end = _Mark(past - 1, len(text) - last_break - 1)
    for e in reversed(events):
        if e.start_mark.line < past and e.end_mark.line < past:
            break
        if e.start_mark.line >= past:
            e.start_mark = end
        if e.end_mark.line >= past:
            e.end_mark = end
