"""Recipe variables and ``eval(...)`` values.

Rules (SPEC, "Variables and expressions"):

- Top-level keys that are neither modifier groups, stages nor metadata are global variables;
  a stage's own non-group keys are stage variables.
- A value that is exactly ``eval(EXPR)`` is evaluated with :mod:`recipe_spec.text.expressions`.
  Order does not matter (forward references work); a cycle is reported with its members.
- ``eval(name)`` where ``name`` holds text, a list or a mapping substitutes that value.
- Inside modifiers, stage variables shadow globals. Inside a stage's own variable definitions a
  name that the top level also defines resolves to the top-level value, as in SparseML (a
  warning says so when the stage defines the name too).
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Iterable, Mapping
from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic, Span
from .expressions import (
    ExpressionError,
    NotANumberError,
    UnknownNameError,
    eval_body,
    evaluate,
    referenced_names,
    short_repr,
)
from .frozen import FrozenDict
from .nodes import Document
from .similar import close_matches

__all__ = ["Invalid", "INVALID", "VariableEvaluator", "did_you_mean"]

Path = tuple[Any, ...]


#: Values no evaluation changes.
_LEAVES = frozenset({int, float, bool, type(None)})


class Invalid:
    """The value of something that could not be evaluated (its error is already reported)."""

    _instance: Invalid | None = None

    def __new__(cls) -> Invalid:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<invalid>"


INVALID = Invalid()


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` for the closest candidate, or an empty string.

    >>> did_you_mean("num_epoch", ["num_epochs", "lr"])
    "Did you mean 'num_epochs'?"
    """
    close = close_matches(name, candidates, n=1, cutoff=0.6)
    return f"Did you mean '{close[0]}'?" if close else ""


def _shown_cycle(names: list[str], keep: int = 8) -> list[str]:
    """A cycle's members for a message: all of a short one, the ends of a long one."""
    if len(names) <= 2 * keep:
        return names
    return [*names[:keep], f"... ({len(names) - 2 * keep} more)", *names[-keep:]]


def _is_identifier(text: str) -> bool:
    return text.strip().isidentifier()


class VariableEvaluator:
    """Evaluates the variables of a recipe and the expressions of its modifiers.

    Problems are collected in ``diagnostics``; the values that could not be computed are
    :data:`INVALID`.
    """

    def __init__(self, document: Document):
        self.document = document
        self.diagnostics: list[Diagnostic] = []

    # -- positions -----------------------------------------------------------------------
    def span(self, path: Path) -> Span:
        loc = self.document.loc(path)
        return loc.span if loc is not None else Span.point(1 + self.document.line_offset)

    def expr_span(self, path: Path, offset: int, length: int = 1) -> Span:
        """The span of ``offset`` inside the ``eval(...)`` text at ``path``."""
        loc = self.document.loc(path)
        if loc is None:
            return self.span(path)
        span = loc.span
        if span.line != span.end_line or loc.style not in (None, "'", '"'):
            return span
        column = span.column + (1 if loc.style else 0) + len("eval(") + offset
        return Span(span.line, column, span.line, column + max(length, 1))

    # -- scopes --------------------------------------------------------------------------
    def resolve_scope(
        self,
        raw: Mapping[str, tuple[Any, Path]],
        outer: Mapping[str, Any] | None = None,
        scope_name: str = "recipe",
    ) -> dict[str, Any]:
        """Evaluate the variables ``raw`` (name -> (value as written, path)).

        With ``outer`` (the global variables, for a stage) names defined there resolve to the
        outer value, as SparseML did.
        """
        values: dict[str, Any] = {}

        def lookup(name: str, current: str, path: Path, offset: int) -> Any:
            if outer is not None and name in outer:
                if name in raw and name != current:
                    self.diagnostics.append(
                        codes.V006(
                            f"'{name}' here is the top-level value {short_repr(outer[name])}, "
                            f"not this stage's own {name} ({short_repr(raw[name][0])})",
                            "SparseML resolved it this way; rename one of the two variables "
                            "to make the recipe unambiguous.",
                            self.expr_span(path, offset, len(name)),
                        )
                    )
                return outer[name]
            if name in raw and name != current:
                # Dependencies are evaluated first (below); one that is not there is in a cycle.
                return values.get(name, INVALID)
            raise UnknownNameError(name, offset)

        def depends_on(name: str) -> list[str]:
            """The variables of this scope that ``name``'s expression uses."""
            body = eval_body(raw[name][0])
            if body is None:
                return []
            try:
                used = referenced_names(body)
            except ExpressionError:
                return []  # reported when the expression itself is evaluated
            return [n for n in used if n != name and n in raw and not (outer is not None and n in outer)]

        def evaluate(name: str) -> None:
            value, path = raw[name]
            values[name] = self.evaluate_value(
                value, path, lambda n, off, _p=path, _c=name: lookup(n, _c, _p, off)
            )

        # Depth-first over the dependencies with an explicit stack (no recursion, so a chain of
        # any length resolves); a variable is evaluated once everything it uses has been.
        for root in raw:
            if root in values:
                continue
            chain: list[str] = [root]
            on_chain = {root}
            pending = [iter(depends_on(root))]
            while chain:
                dep = next(pending[-1], None)
                if dep is None:
                    done = chain.pop()
                    on_chain.discard(done)
                    pending.pop()
                    if done not in values:
                        evaluate(done)
                    continue
                if dep in values:
                    continue
                if dep in on_chain:
                    cycle = chain[chain.index(dep):]
                    first = min(cycle, key=lambda n: (self.span(raw[n][1]).line, n))
                    self.diagnostics.append(
                        codes.V002(
                            "variables form a cycle: " + " -> ".join(_shown_cycle([*cycle, dep])),
                            "Give one of them a number instead of an expression.",
                            self.span(raw[first][1]),
                        )
                    )
                    for member in cycle:
                        values[member] = INVALID
                    continue
                chain.append(dep)
                on_chain.add(dep)
                pending.append(iter(depends_on(dep)))
        return values

    def evaluate_tree(self, value: Any, path: Path, visible: Mapping[str, Any]) -> Any:
        """``value`` with every ``eval(...)`` string inside it evaluated in ``visible``."""

        def lookup(name: str, offset: int) -> Any:
            if name in visible:
                return visible[name]
            raise UnknownNameError(name, offset)

        return self._walk(value, path, lookup, visible)

    def _walk(self, value: Any, path: Path, lookup: Any, visible: Mapping[str, Any]) -> Any:
        """``value`` evaluated; the very same object when nothing inside it changes."""
        cls = value.__class__
        if cls in _LEAVES or (cls is str and not value.startswith("eval(")):
            return value  # nothing to evaluate (``eval_body`` needs "eval(...)")
        if isinstance(value, str):
            return self.evaluate_value(value, path, lookup, visible)
        if isinstance(value, FrozenDict):
            changed: dict[Any, Any] = {}
            for k, v in value._data.items():
                c = v.__class__
                if c in _LEAVES or (c is str and not v.startswith("eval(")):
                    continue
                new = self._walk(v, path + (k,), lookup, visible)
                if new is not v:
                    changed[k] = new
            if not changed:
                return value
            return FrozenDict({k: changed[k] if k in changed else v for k, v in value._data.items()})
        if isinstance(value, tuple):
            items = [self._walk(v, path + (i,), lookup, visible) for i, v in enumerate(value)]
            if all(new is old for new, old in zip(items, value, strict=True)):
                return value
            return tuple(items)
        return value

    def evaluate_value(
        self, value: Any, path: Path, lookup: Any, visible: Mapping[str, Any] | None = None
    ) -> Any:
        """The value of one scalar: itself, or the result of its ``eval(...)``."""
        body = eval_body(value)
        if body is None:
            return value
        try:
            names = referenced_names(body)
        except ExpressionError as exc:
            self._report(exc, path, visible)
            return INVALID
        bound: dict[str, Any] = {}
        for name in names:
            offset = body.find(name)
            try:
                bound[name] = lookup(name, max(offset, 0))
            except UnknownNameError as exc:
                self._report(exc, path, visible)
                return INVALID
            if bound[name] is INVALID:
                return INVALID
        if _is_identifier(body):
            value = bound[body.strip()]
            if isinstance(value, float) and not math.isfinite(value):
                # SPEC: results must be finite, also when the expression is just a name.
                self._report(
                    ExpressionError(
                        f"'{body.strip()}' is {value}, not a finite number",
                        body.find(body.strip()),
                        "Give the variable a finite value.",
                        kind="value",
                    ),
                    path,
                    visible,
                )
                return INVALID
            return value
        try:
            return evaluate(body, bound)
        except ExpressionError as exc:
            self._report(exc, path, visible)
            return INVALID

    def _report(self, exc: ExpressionError, path: Path, visible: Mapping[str, Any] | None) -> None:
        if isinstance(exc, UnknownNameError):
            names: Iterable[str] = visible.keys() if visible is not None else []
            if visible is None:
                names = self._all_names
            hint = did_you_mean(exc.name, names) or "Define it as a top-level variable."
            self.diagnostics.append(
                codes.V001(
                    f"unknown variable '{exc.name}' in eval()",
                    hint,
                    self.expr_span(path, exc.offset, len(exc.name)),
                )
            )
            return
        make = codes.V004 if exc.kind == "value" or isinstance(exc, NotANumberError) else codes.V003
        self.diagnostics.append(make(exc.message, exc.hint, self.expr_span(path, exc.offset)))

    _all_names: tuple[str, ...] = ()

    def known_names(self, names: Iterable[str]) -> None:
        """Names offered as suggestions when a variable definition uses an unknown name."""
        self._all_names = tuple(names)


def visible_variables(stage_vars: Mapping[str, Any], global_vars: Mapping[str, Any]) -> ChainMap[str, Any]:
    """What a modifier in a stage sees: its stage's variables over the globals."""
    return ChainMap(dict(stage_vars), dict(global_vars))
