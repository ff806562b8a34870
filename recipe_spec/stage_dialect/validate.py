"""``validate`` for stage/group recipes: the checks of :mod:`.checks` and, with ``--backend``,
which modifiers a backend can run (B001).

One-shot modifiers (GPTQ, SparseGPT, Wanda, QuantizationModifier, SmoothQuant, AWQ, ...) are
validated here and run by llm-compressor; no backend of recipe-spec runs them, and none
approximates them with another algorithm. The training-time ones of one training stage run
through their ``!Modifier`` twins where every argument has an exact twin
(:mod:`.to_modifiers`, which also says how stages map to time).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..checks.rules import RULES, WithoutModifiers
from ..checks.support import modifier_findings
from ..diagnostics import codes
from ..diagnostics.base import Diagnostic
from ..recipe.findings import positioned
from ..recipe.model import Recipe
from .checks import stage_diagnostics
from .to_modifiers import refusals, twins_of
from .versions import Compat

__all__ = ["validate_stage", "refusals", "refuse_to_run"]


def _compat(compat: Any) -> Compat | None:
    if compat is None or isinstance(compat, Compat):
        return compat
    return Compat.parse(str(compat))


def validate_stage(recipe: Recipe, backend: str | None = None, compat: Any = None) -> list[Diagnostic]:
    """Every diagnostic of a stage/group ``recipe``, in file order (see the module docstring)."""
    out = stage_diagnostics(recipe, _compat(compat))
    said = {(d.line, d.column, d.code) for d in out}  # a value the core checks already refuse: once
    out += [d for d in _schedule_diagnostics(recipe) if (d.line, d.column, d.code) not in said]
    if backend is not None:
        for m, message, hint in refusals(recipe, backend, compat, training=False):
            out.append(codes.B001(message, hint, m.span).in_file(recipe.path))
    return sorted(out, key=lambda d: (d.line, d.column, d.code))


#: The twin's arguments that time a training-time modifier (``start``, ``end``, ``update``).
_SCHEDULE_KEYS = frozenset({"start_epoch", "end_epoch", "update_frequency"})


def _schedule_diagnostics(recipe: Recipe) -> list[Diagnostic]:
    """M005 where a training-time modifier's timing makes no schedule, judged as its
    ``!Modifier`` twin's: an ``update`` between -1 and 0 (an update grid that never advances),
    or more updates between ``start`` and ``end`` than any run makes (``end: 1e308`` with
    ``update: 1e-9``). Each at the core argument it is about."""
    twins = twins_of(recipe)
    if not twins.modifiers:
        return []
    findings = [f for f in modifier_findings(twins, None)
                if f.code is codes.M005 and f.keys and f.keys[0] in _SCHEDULE_KEYS]
    bad = {id(f.modifier) for f in findings}
    view = WithoutModifiers(twins, bad)
    for rule in RULES:
        findings += [f for f in rule(view) if f.code is codes.M005 and f.keys  # type: ignore[arg-type]
                     and f.keys[0] in _SCHEDULE_KEYS and id(f.modifier) not in bad]
    return [_stage_words(positioned(f, recipe)) for f in findings]


def _stage_words(d: Diagnostic) -> Diagnostic:
    """``d`` with the twin's argument names written as the stage/group recipe has them."""
    message, hint = d.message, d.hint
    for twin, core in (("update_frequency", "update"), ("start_epoch", "start"), ("end_epoch", "end")):
        message, hint = message.replace(twin, core), hint.replace(twin, core)
    return dataclasses.replace(d, message=message, hint=hint)


def refuse_to_run(recipe: Recipe, backend: str) -> list[Diagnostic]:
    """Why ``backend`` does not run this stage/group recipe at ``modify()``: one B001 per
    modifier :func:`refusals` names (one-shot modifiers belong to llm-compressor; a
    training-time one whose arguments have no exact twin, that never starts, or that sits in a
    second training stage). [] when the recipe runs (as its ``!Modifier`` twins)."""
    return [codes.B001(message, hint, m.span).in_file(recipe.path)
            for m, message, hint in refusals(recipe, backend)]
