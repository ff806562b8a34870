"""A stage/group recipe's training stage written as a ``!Modifier`` recipe.

What the backends run (:func:`recipe_spec.stage_dialect.to_modifiers.refusals` and the
catalogue's translations): every training-time modifier with an exact ``!Modifier`` twin,
in one training stage. Anything else is refused where the backends refuse it, with their
reason (a one-shot modifier, an argument without an exact twin, a modifier that never
starts, a second training stage, a stage that runs one-shot or not at all).

Each group becomes a ``!Modifier`` list of the same name (``pruning_modifiers:``). An
argument the translation keeps as it is keeps its text and comments under its ``!Modifier``
name (``targets`` -> ``params``, ``start`` -> ``start_epoch``); a value the translation
writes otherwise (a default that differs between the dialects, such as ``leave_enabled``
in llm-compressor 0.5+) is written anew.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..modifiers import spec as modifier_spec
from ..recipe.model import Modifier, Recipe
from ..stage_dialect import Compat, Translation, stage_spec
from ..stage_dialect.to_modifiers import refusals
from ..text.frozen import freeze, thaw
from .result import Refusal
from .text import (
    Lines,
    Text,
    argument_lines,
    comments_above,
    copy_variables,
    header_lines,
    trailing_comment,
    value_lines,
)
from .twins import CORE_KEYS, differing_args

__all__ = ["ModifierPlan", "plan_modifiers", "write_modifiers"]


@dataclass
class ModifierPlan:
    """Every stage/group modifier with the translation into its twin."""

    pairs: list[tuple[Modifier, Translation]]

    @property
    def expected(self) -> list[tuple[str, dict[str, Any]]]:
        return [(tr.twin, dict(tr.args)) for _, tr in self.pairs]


def plan_modifiers(recipe: Recipe, compat: Compat | None) -> ModifierPlan | list[Refusal]:
    """The twins of a stage/group recipe's modifiers (read as ``compat``'s release does),
    or every refusal."""
    refused = [Refusal(m.span.line, m.span.column, what, how)
               for m, what, how in refusals(recipe, None, compat)]
    if refused:
        return refused
    pairs = []
    for m in recipe.modifiers:
        declared = stage_spec(m.type, compat)
        assert declared is not None and declared.translate is not None
        pairs.append((m, declared.translate(m.args, compat)))
    return ModifierPlan(pairs)


def _same(twin: str, key: str, a: Any, b: Any) -> bool:
    declared = modifier_spec(twin)
    if declared is None:
        return freeze(a) == freeze(b)
    return not differing_args(declared, {key: a}, {key: b})


def write_modifiers(recipe: Recipe, t: Text, plan: ModifierPlan, mode: str) -> Lines:
    """The ``!Modifier`` text of ``plan``, its values written as ``mode`` says
    (:data:`.text.MODES`)."""
    out = Lines()
    header, header_end = header_lines(t, recipe.document)
    out.extend(header)
    if mode == "written":
        copy_variables(recipe, t, out, header_end)
    group = None
    for m, tr in plan.pairs:
        at = (m.span.line, m.span.column)
        if m.group != group:
            group = m.group
            loc = m.document.locs.get(m.path[:-1]) if m.document is not None else None
            if loc is not None and loc.key_span is not None:
                out.extend(comments_above(t, loc.key_span.line, 0, header_end), at)
            out.add(f"{group}:", at)
        out.extend(comments_above(t, m.span.line, 2, header_end), at)
        out.add(f"  - !{tr.twin}" + trailing_comment(t, m.span.line, m.span.end_column + 1), at)
        _arguments(t, m, tr, out, mode)
    return out


def _arguments(t: Text, m: Modifier, tr: Translation, out: Lines, mode: str) -> None:
    written: set[str] = set()
    for key in m.raw_args:
        twin_key = CORE_KEYS.get(key, key)
        if twin_key not in tr.args:
            continue  # index, group, and what the translation reads into other arguments
        written.add(twin_key)
        span = m.key_span(key)
        value = tr.args[twin_key]
        kept = _same(tr.twin, twin_key, value, m.args[key])
        out.extend(argument_lines(t, m.document, (*m.args_path, key), twin_key, 4,
                                  raw=m.raw_args[key] if kept else value, value=value,
                                  mode=mode if kept else "dumped"), (span.line, span.column))
    declared = modifier_spec(tr.twin)
    for twin_key, value in tr.args.items():
        if twin_key in written:
            continue
        arg = declared.arg(twin_key) if declared is not None else None
        if arg is not None and "default" in arg.schema and _same(tr.twin, twin_key, value, arg.default):
            continue
        out.extend(value_lines(twin_key, thaw(value), 4), (m.span.line, m.span.column))
