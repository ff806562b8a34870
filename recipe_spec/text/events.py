"""A recipe's values built from libyaml's events (:mod:`recipe_spec.text.stream`), with no
node graph.

:class:`EventBuilder` builds the same values, locations and diagnostics as the node-graph
builder of :mod:`recipe_spec.text.reader`: an alias is built again from its anchor's events,
at the alias's own position, exactly as a node reached twice is built twice there.
"""

from __future__ import annotations

from typing import Any

from yaml import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic, RecipeError, Span
from .frozen import FrozenDict
from .locs import LazyLocs, fast_span
from .nodes import ALLOWED_STD, MAX_VALUES, STD_TAGS, Resolver12, Tagged, merged, scalar_value

__all__ = ["EventBuilder"]

_MERGE = STD_TAGS + "merge"
_SEQ = STD_TAGS + "seq"
_MAP = STD_TAGS + "map"
_RESOLVERS: dict[Any, list[tuple[str, Any]]] = Resolver12.yaml_implicit_resolvers
_STARTS = (MappingStartEvent, SequenceStartEvent)
_ENDS = (MappingEndEvent, SequenceEndEvent)

_new = object.__new__
_span = fast_span


_set_tag, _set_value, _set_span = (
    Tagged.tag.__set__, Tagged.value.__set__, Tagged.span.__set__  # type: ignore[attr-defined]
)


def _tagged(tag: str, value: Any, span: Span) -> Tagged:
    t = _new(Tagged)
    _set_tag(t, tag)
    _set_value(t, value)
    _set_span(t, span)
    return t


def _frozen(data: dict[Any, Any]) -> FrozenDict:
    out = _new(FrozenDict)
    out._data = data
    out._hash = None
    return out


class EventBuilder:
    """Values, a path -> Loc table and diagnostics from the events of one document."""

    def __init__(self, events: list[Any], anchors: dict[str, int], line_offset: int):
        self.ev = events
        self.anchors = anchors
        self.i = 2  # after StreamStart and DocumentStart: the root node
        self.offset = line_offset
        self.locs: LazyLocs = LazyLocs(events, anchors, line_offset)
        self.diagnostics: list[Diagnostic] = []

    def span(self, start: Any, end: Any) -> Span:
        s, t, off = start.start_mark, end.end_mark, self.offset
        return _span(s.line + 1 + off, s.column + 1, t.line + 1 + off, t.column + 1)

    def skip(self) -> int:
        """Move past the node at the cursor; returns the index of its last event."""
        ev = self.ev
        if ev[self.i].__class__ in _STARTS:
            depth = 0
            while True:
                cls = ev[self.i].__class__
                if cls in _STARTS:
                    depth += 1
                elif cls in _ENDS:
                    depth -= 1
                    if depth == 0:
                        break
                self.i += 1
        self.i += 1
        return self.i - 1

    # -- the document's size, aliases counted at each use ----------------------------------
    def check_size(self) -> None:
        """Y004 for a recursive alias or a document expanding past MAX_VALUES, decided
        before anything is expanded (a memoised count, as for the node graph)."""
        ev = self.ev
        sizes: dict[str, int] = {}
        stack: list[list[Any]] = [[0, None]]
        for e in ev[2:]:
            cls = e.__class__
            if cls is ScalarEvent:
                stack[-1][0] += 1
                if e.anchor is not None:
                    sizes[e.anchor] = 1
            elif cls is MappingStartEvent or cls is SequenceStartEvent:
                stack.append([1, e.anchor])
            elif cls is MappingEndEvent or cls is SequenceEndEvent:
                total, anchor = stack.pop()
                if anchor is not None:
                    sizes[anchor] = total
                stack[-1][0] += total
            elif cls is AliasEvent:
                if e.anchor not in sizes:
                    raise RecipeError(
                        [
                            codes.Y004(
                                f"alias '*{e.anchor}' refers to the anchor that contains it "
                                "(a recursive structure)",
                                "Recipes cannot contain themselves: write the value out.",
                                self.span(e, e),
                            )
                        ]
                    )
                stack[-1][0] += sizes[e.anchor]
        n = stack[0][0]
        if n > MAX_VALUES:
            root, last = ev[2], ev[-3]  # ..., the root's last event, DocumentEnd, StreamEnd
            raise RecipeError(
                [
                    codes.Y004(
                        f"the document expands to {n:,} values (the limit is {MAX_VALUES:,})",
                        "A recipe this large is almost certainly an alias bomb or the wrong file.",
                        self.span(root, last),
                    )
                ]
            )

    # -- building ----------------------------------------------------------------------------
    # ``keyed`` is 1 when the event just before the value is its key (see yaml_locs).
    def build(self, path: tuple[Any, ...], keyed: int) -> Any:
        i = self.i
        e = self.ev[i]
        cls = e.__class__
        if cls is ScalarEvent and e.tag is None:  # most values: built here, inline
            self.i = i + 1
            self.locs[path] = i + i + keyed
            value = e.value
            if e.style or not e.implicit[0]:
                return value
            found = _PLAIN.get(value, _MISS)
            if found is _MISS:
                return self.plain(value, e)
            return value if found is _TEXT else found
        if cls is AliasEvent:
            self.i = self.anchors[e.anchor]
            value = self.node(self.ev[self.i], path, i + i + keyed, self.span(e, e))
            self.i = i + 1
            return value
        return self.node(e, path, i + i + keyed, None)

    def node(self, e: Any, path: tuple[Any, ...], record: int, alias: Span | None) -> Any:
        cls = e.__class__
        tag = e.tag
        locs = self.locs
        if cls is ScalarEvent:
            self.i += 1
            locs[path] = record
            if tag is None or tag == "!":
                tag = _resolve(e.value, e.implicit[0])
            local = tag[:1] == "!" and tag[:2] != "!!" and tag != "!"
            if local or not _builds(tag):
                span = alias or self.span(e, e)
                if local:
                    value = e.value
                    return _tagged(tag[1:], value if value != "" or e.style else None, span)
                self.diagnostics.append(_tag_error(tag, span))
                return None
            return self.scalar(tag, e.value, alias or e)
        locs[path] = None  # type: ignore[assignment]  # keeps the parent first
        if tag is None or tag == "!":  # a plain list or mapping: most of them
            self.i += 1
            value = self.sequence(path) if cls is SequenceStartEvent else self.mapping(path)
            locs[path] = (record, self.i)
            self.i += 1
            return value
        if not _builds(tag):
            end = self.skip()
            locs[path] = (record, end)
            self.diagnostics.append(_tag_error(tag, alias or self.span(e, self.ev[end])))
            return None
        self.i += 1
        if cls is SequenceStartEvent:
            value: Any = self.sequence(path)
        else:
            value = self.mapping(path)
        end = self.i
        self.i += 1
        locs[path] = (record, end)
        if tag[:1] == "!" and tag[:2] != "!!" and tag != "!":
            return _tagged(tag[1:], value, alias or self.span(e, self.ev[end]))
        return value

    def sequence(self, path: tuple[Any, ...]) -> tuple[Any, ...]:
        ev = self.ev
        items: list[Any] = []
        append = items.append
        indices: list[int] = []  # the plain scalar items' indices and numbers (LazyLocs.defer)
        records: list[int] = []
        add_index, add_record = indices.append, records.append
        n = 0
        i = self.i  # the cursor, kept local; self.i is set around every call that moves it
        while True:
            e = ev[i]
            cls = e.__class__
            if cls is SequenceEndEvent:
                self.i = i
                if indices:
                    self.locs.defer(path, indices, records)
                return tuple(items)
            if cls is ScalarEvent and e.tag is None:  # as build() does, without the call
                add_index(n)
                add_record(i + i)
                i += 1
                value = e.value
                if not e.style and e.implicit[0]:
                    found = _PLAIN.get(value, _MISS)
                    if found is _MISS:
                        value = self.plain(value, e)
                    elif found is not _TEXT:
                        value = found
                append(value)
            else:
                self.i = i
                append(self.build(path + (n,), 0))
                i = self.i
            n += 1

    def plain(self, text: str, e: Any) -> Any:
        """The value of the plain scalar ``text`` (event ``e``) under the YAML 1.2 core schema,
        remembered in :data:`_PLAIN` when it is short and valid."""
        value: Any = text
        for tag, regexp in _RESOLVERS.get(text[:1], ()):
            if regexp.match(text):
                count = len(self.diagnostics)
                value = self.scalar(tag, text, e)
                if len(self.diagnostics) != count:
                    return value
                break
        if len(text) <= _PLAIN_LENGTH and len(_PLAIN) < _PLAIN_SIZE:
            _PLAIN[text] = _TEXT if value is text else value
        return value

    def scalar(self, tag: str, text: str, where: Any) -> Any:
        """The value of a scalar; ``where`` (a Span, or the event) is for a diagnostic."""
        if tag == _STR:
            return text
        short = tag[len(STD_TAGS):] if tag.startswith(STD_TAGS) else "str"
        try:
            return scalar_value(short, text)
        except ValueError:
            span = where if isinstance(where, Span) else self.span(where, where)
            self.diagnostics.append(
                codes.Y001(f"'{text}' is not a valid !!{short}", "Fix the value or its tag.", span)
            )
            return None

    def mapping(self, path: tuple[Any, ...]) -> FrozenDict:
        ev = self.ev
        result: dict[Any, Any] = {}
        first_seen: dict[Any, Any] = {}  # key -> its event (a span only for a duplicate)
        merged: dict[Any, Any] = {}
        build = self.build
        keys: list[Any] = []  # the plain scalar values' keys and numbers (LazyLocs.defer)
        records: list[int] = []
        add_key, add_record = keys.append, records.append
        i = self.i  # the cursor, kept local; self.i is set around every call that moves it
        while True:
            k = ev[i]
            cls = k.__class__
            if cls is ScalarEvent and k.tag is None and not k.style:  # a plain key: inline
                i += 1
                key = k.value
                if key == "<<":
                    self.i = i
                    merged.update(self.merge_values(path))
                    i = self.i
                    continue
                found = _PLAIN.get(key, _MISS)
                if found is _MISS:
                    key = self.plain(key, k)
                elif found is not _TEXT:
                    key = found
                if key in first_seen:
                    self.i = i
                    self.duplicate(key, first_seen[key], k)
                    i = self.i
                    continue
                first_seen[key] = k
                e = ev[i]
                if e.__class__ is ScalarEvent and e.tag is None:  # as build() does, without the call
                    add_key(key)
                    add_record(i + i + 1)
                    i += 1
                    value = e.value
                    if not e.style and e.implicit[0]:
                        found = _PLAIN.get(value, _MISS)
                        if found is _MISS:
                            value = self.plain(value, e)
                        elif found is not _TEXT:
                            value = found
                    result[key] = value
                else:
                    self.i = i
                    result[key] = build(path + (key,), 1)
                    i = self.i
                continue
            self.i = i
            if cls is MappingEndEvent:
                break
            self.other_key(k, path, result, first_seen, merged)
            i = self.i
        if keys:
            self.locs.defer(path, keys, records)
        for key, value in merged.items():
            result.setdefault(key, value)
        return _frozen(result)

    def other_key(self, k: Any, path: tuple[Any, ...], result: dict[Any, Any],
                  first_seen: dict[Any, Any], merged: dict[Any, Any]) -> None:
        """The entry at the cursor whose key (event ``k``) is not a plain untagged scalar: an
        alias, a tagged or quoted key, a merge, or a list or mapping (refused)."""
        ev = self.ev
        cls = k.__class__
        written = k
        if cls is AliasEvent:
            self.i += 1
            k = ev[self.anchors[k.anchor]]
            cls = k.__class__
        elif cls is ScalarEvent:
            self.i += 1
        else:
            key_span = self.span(k, ev[self.skip()])
        if cls is ScalarEvent:
            key_tag = k.tag
            if key_tag is None or key_tag == "!":
                key_tag = _resolve(k.value, k.implicit[0])
            if key_tag == _MERGE or (k.value == "<<" and not k.style):
                merged.update(self.merge_values(path))
                return
        else:
            if k.tag == _MERGE:
                merged.update(self.merge_values(path))
                return
            if written is not k:  # an alias of a list or mapping
                key_span = self.span(written, written)
            self.diagnostics.append(
                codes.Y005(
                    "a mapping key must be a plain value, not a list or mapping",
                    "Write the key as text.",
                    key_span,
                )
            )
            self.skip()
            return
        if key_tag.startswith(STD_TAGS):
            key = self.scalar(key_tag, k.value, written)
        else:
            key = k.value
        if key in first_seen:
            self.duplicate(key, first_seen[key], written)
            return
        first_seen[key] = written
        result[key] = self.build(path + (key,), 1)

    def duplicate(self, key: Any, first: Any, written: Any) -> None:
        first_line = self.span(first, first).line
        key_span = self.span(written, written)
        self.diagnostics.append(
            codes.Y002(
                f"key '{key}' is given twice in this mapping (first on line {first_line})",
                f"Delete one of them; PyYAML would silently have used this one, "
                f"line {key_span.line}.",
                key_span,
            )
        )
        self.skip()  # its value is not read

    def merge_values(self, path: tuple[Any, ...]) -> dict[Any, Any]:
        value = self.build(path + ("<<",), 0)
        return merged(value, lambda: self.locs[path + ("<<",)].span, self.diagnostics)


_STR = STD_TAGS + "str"

#: Plain scalar text -> its value (``_TEXT``: the text itself). Recipes write the same keys
#: and numbers again and again; the resolvers' regular expressions and the number parsing run
#: once per text. Only short texts, and a bounded number of them, are kept.
_PLAIN: dict[str, Any] = {}
_PLAIN_SIZE = 8192
_PLAIN_LENGTH = 64
_TEXT = object()
_MISS = object()


def _resolve(value: str, plain: bool) -> str:
    """The tag of an untagged scalar under the YAML 1.2 core schema (as Resolver12)."""
    if plain:
        for tag, regexp in _RESOLVERS.get(value[0] if value else "", ()):
            if regexp.match(value):
                return tag
    return _STR


def _builds(tag: str) -> bool:
    """Whether a node with (resolved) ``tag`` is built: local tags, '!' and allowed '!!' ones."""
    if tag.startswith(STD_TAGS):
        return tag[len(STD_TAGS):] in ALLOWED_STD
    return tag == "!" or (tag[:1] == "!" and tag[:2] != "!!")


def _tag_error(tag: str, span: Span) -> Diagnostic:
    if tag.startswith(STD_TAGS):
        short = tag[len(STD_TAGS):]
        return codes.Y005(
            f"tag '!!{short}' is not allowed in a recipe",
            "Recipes are plain data: use a number, text, list or mapping.",
            span,
        )
    return codes.Y005(f"tag '{tag}' is not allowed in a recipe", "Remove the tag.", span)
