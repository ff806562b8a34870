"""A private, safe YAML reader that remembers where every value came from.

Why not ``yaml.safe_load``: it forgets positions, keeps the last of two duplicate keys without
a word, reads ``8e-5`` as a string (YAML 1.1), expands alias bombs until memory runs out, and
modifier tags would have to be registered on PyYAML's global loader. This reader builds plain
immutable values itself from libyaml's event stream (:mod:`recipe_spec.text.stream`,
:mod:`recipe_spec.text.events`), recording a :class:`Loc` (value span and key span) for every
path; texts with a syntax error are read again with PyYAML's pure-Python scanner and parser,
for their clearer messages.

Scalars follow the YAML 1.2 core schema: ``8e-5`` and ``1.e-6`` are floats; ``true``/``false``
(any case) are booleans; ``null``, ``~`` and the empty value are None; ``010`` is ten;
``yes``/``no``/``on``/``off`` and ``1:30`` stay strings.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.scanner import Scanner

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic, RecipeError, Span
from .events import EventBuilder
from .frozen import FrozenDict
from .locs import gc_paused
from .nodes import (
    ALLOWED_STD,
    MAX_DEPTH,
    MAX_VALUES,
    STD_TAGS,
    Document,
    Loc,
    Path,
    Resolver12,
    Tagged,
    merged,
    scalar_value,
)
from .source import check_size
from .stream import CParser, Fallback, read_events

__all__ = ["Tagged", "Loc", "Document", "read_yaml", "MAX_VALUES", "MAX_DEPTH", "Resolver12"]

class _Alias:
    """An alias occurrence: the anchored node and where the ``*name`` was written."""

    __slots__ = ("node", "start_mark", "end_mark", "name")

    def __init__(self, node: Node, start_mark: Any, end_mark: Any, name: str):
        self.node, self.start_mark, self.end_mark, self.name = node, start_mark, end_mark, name


class _Loader(Reader, Scanner, Parser, Composer, Resolver12):
    """PyYAML's pure-Python front end with a nesting limit and visible aliases."""

    def __init__(self, text: str):
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        Resolver12.__init__(self)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Any:  # type: ignore[override]
        # Every node counts, aliases included, exactly as _scan_depth counts them.
        if self._depth + 1 > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(
                None, None, f"nesting deeper than {MAX_DEPTH} levels", mark
            )
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            return _Alias(node, event.start_mark, event.end_mark, event.anchor)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Builder:
    """Turns a node graph into immutable values and a path -> Loc table."""

    def __init__(self, line_offset: int):
        self.offset = line_offset
        self.locs: dict[Path, Loc] = {}
        self.diagnostics: list[Diagnostic] = []

    def span(self, start: Any, end: Any) -> Span:
        return Span(
            start.line + 1 + self.offset, start.column + 1, end.line + 1 + self.offset, end.column + 1
        )

    def node_span(self, node: Any) -> Span:
        return self.span(node.start_mark, node.end_mark)

    # The expanded size of every node (aliases counted at each use) in one memoised pass,
    # so an alias bomb is rejected before anything is expanded.
    def check_size(self, root: Any) -> None:
        sizes: dict[int, int] = {}
        active: set[int] = set()

        def size(item: Any) -> int:
            node = item.node if isinstance(item, _Alias) else item
            key = id(node)
            if key in sizes:
                return sizes[key]
            if key in active:
                raise RecipeError(
                    [
                        codes.Y004(
                            f"alias '*{item.name}' refers to the anchor that contains it "
                            "(a recursive structure)",
                            "Recipes cannot contain themselves: write the value out.",
                            self.node_span(item),
                        )
                    ]
                )
            active.add(key)
            total = 1
            if isinstance(node, SequenceNode):
                for child in node.value:
                    total += size(child)
            elif isinstance(node, MappingNode):
                for k, v in node.value:
                    total += size(k) + size(v)
            active.discard(key)
            sizes[key] = total
            return total

        n = size(root)
        if n > MAX_VALUES:
            raise RecipeError(
                [
                    codes.Y004(
                        f"the document expands to {n:,} values (the limit is {MAX_VALUES:,})",
                        "A recipe this large is almost certainly an alias bomb or the wrong file.",
                        self.node_span(root if not isinstance(root, _Alias) else root.node),
                    )
                ]
            )

    def build(self, item: Any, path: Path, key_span: Span | None) -> Any:
        if isinstance(item, _Alias):
            span = self.span(item.start_mark, item.end_mark)
            node = item.node
        else:
            node = item
            span = self.node_span(node)
        style = (getattr(node, "style", None) or None) if isinstance(node, ScalarNode) else None
        self.locs[path] = Loc(span, key_span, style)
        tag: str = node.tag
        local = tag.startswith("!") and not tag.startswith("!!") and tag != "!"
        if local:
            inner = self.build_untagged(node, path, span, default_tag=True)
            return Tagged(tag[1:], inner, span)
        if tag.startswith(STD_TAGS):
            short = tag[len(STD_TAGS):]
            if short not in ALLOWED_STD:
                self.diagnostics.append(
                    codes.Y005(
                        f"tag '!!{short}' is not allowed in a recipe",
                        "Recipes are plain data: use a number, text, list or mapping.",
                        span,
                    )
                )
                return None
        elif tag != "!":
            self.diagnostics.append(
                codes.Y005(f"tag '{tag}' is not allowed in a recipe", "Remove the tag.", span)
            )
            return None
        return self.build_untagged(node, path, span, default_tag=False)

    def build_untagged(self, node: Node, path: Path, span: Span, default_tag: bool) -> Any:
        if isinstance(node, ScalarNode):
            if default_tag:
                return node.value if node.value != "" or node.style else None
            return self.scalar(node, span)
        if isinstance(node, SequenceNode):
            return tuple(
                self.build(child, path + (i,), None) for i, child in enumerate(node.value)
            )
        if isinstance(node, MappingNode):
            return self.mapping(node, path)
        raise TypeError(f"unexpected YAML node {node!r}")  # pragma: no cover

    def scalar(self, node: ScalarNode, span: Span) -> Any:
        short = node.tag[len(STD_TAGS):] if node.tag.startswith(STD_TAGS) else "str"
        try:
            return scalar_value(short, node.value)
        except ValueError:
            self.diagnostics.append(
                codes.Y001(f"'{node.value}' is not a valid !!{short}", "Fix the value or its tag.", span)
            )
            return None

    def mapping(self, node: MappingNode, path: Path) -> FrozenDict:
        result: dict[Any, Any] = {}
        first_seen: dict[Any, Span] = {}
        merged: dict[Any, Any] = {}
        for key_item, value_item in node.value:
            key_node = key_item.node if isinstance(key_item, _Alias) else key_item
            key_span = self.node_span(key_item) if not isinstance(key_item, _Alias) else self.span(
                key_item.start_mark, key_item.end_mark
            )
            if key_node.tag == STD_TAGS + "merge" or (
                isinstance(key_node, ScalarNode) and key_node.value == "<<" and not key_node.style
            ):
                merged.update(self.merge_values(value_item, path))
                continue
            if not isinstance(key_node, ScalarNode):
                self.diagnostics.append(
                    codes.Y005(
                        "a mapping key must be a plain value, not a list or mapping",
                        "Write the key as text.",
                        key_span,
                    )
                )
                continue
            key = self.scalar(key_node, key_span) if key_node.tag.startswith(STD_TAGS) else key_node.value
            if isinstance(key, float) and key.is_integer():
                key = key  # 0.5 and 0.50 stay equal keys; kept as written
            if key in first_seen:
                first = first_seen[key]
                self.diagnostics.append(
                    codes.Y002(
                        f"key '{key}' is given twice in this mapping (first on line {first.line})",
                        f"Delete one of them; PyYAML would silently have used this one, "
                        f"line {key_span.line}.",
                        key_span,
                    )
                )
                continue
            first_seen[key] = key_span
            result[key] = self.build(value_item, path + (key,), key_span)
        for key, value in merged.items():
            result.setdefault(key, value)
        return FrozenDict(result)

    def merge_values(self, item: Any, path: Path) -> dict[Any, Any]:
        value = self.build(item, path + ("<<",), None)
        return merged(value, lambda: self.locs[path + ("<<",)].span, self.diagnostics)


def _yaml_error(exc: yaml.YAMLError, line_offset: int, text: str) -> Diagnostic:
    if isinstance(exc, yaml.reader.ReaderError):
        before = text[: exc.position]
        line = before.count("\n") + 1 + line_offset
        column = exc.position - (before.rfind("\n") + 1) + 1
        char = exc.character
        shown = f"{char:#04x}" if isinstance(char, int) else repr(char)
        return codes.Y007(
            f"the text contains a character YAML does not allow ({shown})",
            "Is this a binary file? Recipes are UTF-8 text.",
            Span.point(line, column),
        )
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    span = Span.point(mark.line + 1 + line_offset, mark.column + 1) if mark else Span.point(1)
    if problem.startswith("found undefined alias"):
        return codes.Y003(
            problem, "Define the anchor (`&name value`) before using `*name`, or write the value.", span
        )
    if problem.startswith("nesting deeper than"):
        return codes.Y004(problem, "Recipes need only a few levels of nesting.", span)
    if context and "expected a single document" in context:
        return codes.Y008(
            "the file holds more than one YAML document",
            "A recipe is a single document: remove the second '---' or split the file.",
            span,
        )
    message = problem
    hint = "Check the indentation and punctuation here."
    ctx_mark = getattr(exc, "context_mark", None)
    ctx_line = ctx_mark.line + 1 + line_offset if ctx_mark else None
    where = f" (line {ctx_line})" if ctx_mark else ""
    if context and context.startswith("found duplicate anchor"):
        name = context.split("'")[1] if "'" in context else ""
        message = f"anchor '&{name}' is defined a second time here (first on line {ctx_line})"
        hint = "Give the second anchor another name, or refer to the first with an alias."
    elif "but found '-'" in problem:
        message = "a list item '-' stands where a key was expected"
        hint = (
            "It is probably indented differently from the items above it (the block starts "
            f"on line {ctx_line}); align the '-' with the other items of the list."
        )
    elif context and problem.startswith("found unknown escape character"):
        hint = (
            f"{context[:1].upper()}{context[1:]}{where}: in double quotes a backslash starts a "
            "YAML escape (\\n, \\t); write a regular expression in single quotes, where it is "
            "kept as typed ('re:.*layers\\.\\d+'), or double each backslash."
        )
    elif context:
        hint = f"{context[:1].upper()}{context[1:]}{where}: check the indentation and punctuation."
    return codes.Y001(message, hint, span)


def _compose(text: str) -> Any:
    """The node graph of ``text`` from PyYAML's pure-Python reader, for the texts libyaml's
    reader refuses (its messages and positions are clearer) or when libyaml is missing. The
    reader checks every character as it is constructed (control characters raise
    ReaderError here), so the caller's try covers construction too."""
    loader = _Loader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def read_yaml(text: str, line_offset: int = 0) -> Document:
    """Read one YAML document of a recipe.

    ``line_offset`` is added to every line (the number of lines before the YAML in its file).
    Raises :class:`RecipeError` with every problem found.

    >>> doc = read_yaml("lr: 8e-5\\nflag: yes\\n")
    >>> doc.value["lr"], doc.value["flag"], doc.loc(("lr",)).span.line
    (8e-05, 'yes', 1)
    """
    check_size(text)  # every entry point: files, loads(), --var values
    if CParser is not None:
        with gc_paused():
            try:
                events, anchors, has_alias = read_events(text)
            except Fallback:
                pass
            except yaml.YAMLError as exc:  # nesting past MAX_DEPTH
                raise RecipeError([_yaml_error(exc, line_offset, text)]) from None
            else:
                if len(events) == 2:  # no document at all
                    return Document(None, {(): Loc(Span.point(1 + line_offset))}, line_offset)
                fast = EventBuilder(events, anchors, line_offset)
                if has_alias or len(events) > MAX_VALUES:
                    fast.check_size()
                value = fast.build((), 0)
                if fast.diagnostics:
                    raise RecipeError(fast.diagnostics)
                return Document(value, fast.locs, line_offset)
    return read_yaml_nodes(text, line_offset)


def read_yaml_nodes(text: str, line_offset: int = 0) -> Document:
    """:func:`read_yaml` through PyYAML's pure-Python composer and a node graph: the reference
    the event reader must equal, and the reader of texts it hands back (see
    :mod:`recipe_spec.text.stream`)."""
    try:
        root = _compose(text)
    except RecursionError:
        raise RecipeError(
            [codes.Y004(f"nesting deeper than {MAX_DEPTH} levels", "", Span.point(1 + line_offset))]
        ) from None
    except yaml.YAMLError as exc:
        raise RecipeError([_yaml_error(exc, line_offset, text)]) from None
    builder = _Builder(line_offset)
    if root is None:
        return Document(None, {(): Loc(Span.point(1 + line_offset))}, line_offset)
    builder.check_size(root)
    value = builder.build(root, (), None)
    if builder.diagnostics:
        raise RecipeError(builder.diagnostics)
    return Document(value, builder.locs, line_offset)


