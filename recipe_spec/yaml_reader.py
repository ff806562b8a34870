"""A private, safe YAML reader that remembers where every value came from.

Why not ``yaml.safe_load``: it forgets positions, keeps the last of two duplicate keys without
a word, reads ``8e-5`` as a string (YAML 1.1), expands alias bombs until memory runs out, and
modifier tags would have to be registered on PyYAML's global loader. This reader composes the
node graph with PyYAML's pure-Python scanner and parser, then builds plain immutable values
itself, recording a :class:`Loc` (value span and key span) for every path.

Scalars follow the YAML 1.2 core schema: ``8e-5`` and ``1.e-6`` are floats; ``true``/``false``
(any case) are booleans; ``null``, ``~`` and the empty value are None; ``010`` is ten;
``yes``/``no``/``on``/``off`` and ``1:30`` stay strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from . import codes
from .diagnostics import Diagnostic, RecipeError, Span
from .frozen import FrozenDict
from .source import check_size

__all__ = ["Tagged", "Loc", "Document", "read_yaml", "MAX_VALUES", "MAX_DEPTH", "Resolver12"]

#: A document may expand (aliases included) to at most this many values.
MAX_VALUES = 200_000
#: Mappings and lists may nest at most this deep.
MAX_DEPTH = 64

_STD = "tag:yaml.org,2002:"
_ALLOWED_STD = {"str", "int", "float", "bool", "null", "map", "seq"}

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
    Resolver12.add_implicit_resolver(_STD + _tag, re.compile(_regexp), list(_first))


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
        if tag.startswith(_STD):
            short = tag[len(_STD):]
            if short not in _ALLOWED_STD:
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
        short = node.tag[len(_STD):] if node.tag.startswith(_STD) else "str"
        text = node.value
        try:
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
        except ValueError:
            self.diagnostics.append(
                codes.Y001(f"'{text}' is not a valid !!{short}", "Fix the value or its tag.", span)
            )
            return None
        return text

    def mapping(self, node: MappingNode, path: Path) -> FrozenDict:
        result: dict[Any, Any] = {}
        first_seen: dict[Any, Span] = {}
        merged: dict[Any, Any] = {}
        for key_item, value_item in node.value:
            key_node = key_item.node if isinstance(key_item, _Alias) else key_item
            key_span = self.node_span(key_item) if not isinstance(key_item, _Alias) else self.span(
                key_item.start_mark, key_item.end_mark
            )
            if key_node.tag == _STD + "merge" or (
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
            key = self.scalar(key_node, key_span) if key_node.tag.startswith(_STD) else key_node.value
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
        sources = value if isinstance(value, tuple) else (value,)
        out: dict[Any, Any] = {}
        for source in sources:
            if not isinstance(source, FrozenDict):
                self.diagnostics.append(
                    codes.Y001(
                        "a merge key '<<' needs a mapping or a list of mappings",
                        "Merge an anchored mapping: `<<: *defaults`.",
                        self.locs[path + ("<<",)].span,
                    )
                )
                continue
            for key, val in source.items():
                out.setdefault(key, val)
        return out


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
    elif context:
        hint = f"{context[:1].upper()}{context[1:]}{where}: check the indentation and punctuation."
    return codes.Y001(message, hint, span)


try:  # libyaml's C parser, when PyYAML was built with it: 5-10x faster
    from yaml._yaml import CParser as _CParser

    class _CLoader(_CParser, Resolver12):  # type: ignore[misc, valid-type]
        def __init__(self, text: str):
            _CParser.__init__(self, text)
            Resolver12.__init__(self)

except ImportError:  # pragma: no cover - pure-Python PyYAML
    _CLoader = None  # type: ignore[assignment, misc]

_ANCHOR_OR_ALIAS = re.compile(r"[&*][^\s,\[\]{}]")
#: What may precede, on its line, a token that starts a block collection: spaces and the
#: indicators '- ', '? ', ': ' (``- - a``, ``- key: v``, ``? - a``).
_BLOCK_LEAD = re.compile(r"^(?:[ ]|[-?:](?=[ \n]|$))*", re.M)


def _depth_bound(text: str) -> int:
    """A cheap, sound upper bound on the node depth of ``text`` (often far above it).

    Flow collections: no more than twice the number of '[' and '{' in the text (a flow
    list and the single-pair mapping ``[a: b]`` inside it), whatever quotes, comments or
    plain scalars hide. Block collections: along any chain of nested block
    collections the starting column never decreases and stays the same for at most two
    levels (a mapping and its indentless sequence), so the chain is at most twice the
    largest column at which a block collection can start, plus one; the scalar at the
    bottom adds one more.
    """
    flow = 2 * (text.count("[") + text.count("{"))  # '[a: b]' is a list and a mapping
    column = max((m.end() - m.start() for m in _BLOCK_LEAD.finditer(text)), default=0)
    return flow + 2 * (column + 1) + 1


class _DepthScanner(Reader, Scanner):
    """PyYAML's tokenizer alone (iterative, no parser, no composer)."""

    def __init__(self, text: str):
        Reader.__init__(self, text)
        Scanner.__init__(self)


_OPENS = {
    yaml.BlockMappingStartToken: "bm",
    yaml.BlockSequenceStartToken: "bs",
    yaml.FlowMappingStartToken: "fm",
    yaml.FlowSequenceStartToken: "fs",
}
_FLOW_ENDS = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken)
_NODE_TOKENS = (yaml.ScalarToken, yaml.AliasToken)


def _too_deep(mark: Any) -> yaml.composer.ComposerError:
    return yaml.composer.ComposerError(None, None, f"nesting deeper than {MAX_DEPTH} levels", mark)


def _scan_depth(text: str) -> bool:
    """Measure the node depth of ``text`` from YAML's own token stream, before any parser.

    Every node counts (the root is level 1; mappings, sequences, scalars, aliases and empty
    values), the same count the composer makes, including the nodes no token opens: a
    block mapping's indentless sequence (``key:`` then ``- item`` at the same column) and
    the single-pair mapping of a flow sequence (``[a: b]``). Raises the composer's
    "nesting deeper" error at the first token past MAX_DEPTH, so a hostile text is refused
    after scanning only its first MAX_DEPTH levels. Returns False when the text is not
    valid YAML (the caller then lets the pure-Python reader report it).
    """
    scanner = _DepthScanner(text)
    stack: list[str] = []

    def node(mark: Any, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise _too_deep(mark)

    try:
        while True:
            token = scanner.get_token()
            if token is None or isinstance(token, yaml.StreamEndToken):
                return True
            kind = type(token)
            top = stack[-1] if stack else None
            if top == "is" and kind in (yaml.KeyToken, yaml.ValueToken, yaml.BlockEndToken):
                stack.pop()  # anything but '-' ends an indentless sequence
                top = stack[-1] if stack else None
            if kind in _OPENS:
                stack.append(_OPENS[kind])
                node(token.start_mark, len(stack))
            elif kind is yaml.BlockEndToken:
                if stack:
                    stack.pop()
            elif kind in _FLOW_ENDS or kind is yaml.FlowEntryToken:
                if top == "pair":
                    stack.pop()
                if kind in _FLOW_ENDS and stack:
                    stack.pop()
            elif kind is yaml.BlockEntryToken:
                if top == "bm":
                    stack.append("is")
                    node(token.start_mark, len(stack))
                node(token.start_mark, len(stack) + 1)
            elif kind in (yaml.KeyToken, yaml.ValueToken):
                if top == "fs":
                    stack.append("pair")
                    node(token.start_mark, len(stack))
                node(token.start_mark, len(stack) + 1)
            elif kind in _NODE_TOKENS:
                node(token.start_mark, len(stack) + 1)
    except yaml.composer.ComposerError:
        raise
    except yaml.YAMLError:
        return False


def _compose(text: str) -> Any:
    # The depth is settled before any parser reads the text: the C composer recurses without
    # a limit (a crash at some 50,000 levels), and neither parser should work on a text
    # that will be refused anyway.
    valid = _scan_depth(text) if _depth_bound(text) > MAX_DEPTH else True
    if valid and _CLoader is not None and not _ANCHOR_OR_ALIAS.search(text):
        # No anchors or aliases: their use sites only the pure-Python reader records.
        try:
            fast = _CLoader(text)
        except yaml.YAMLError:
            fast = None
        if fast is not None:
            try:
                return fast.get_single_node()
            except yaml.YAMLError:
                pass  # read it again below, for PyYAML's clearer messages and positions
            finally:
                fast.dispose()
    # The pure-Python reader checks every character as it is constructed (control characters
    # raise ReaderError here), so the caller's try covers construction too.
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
