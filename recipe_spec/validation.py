"""Validation of a loaded recipe: modifier schemas and the rules beyond them (:mod:`.checks`).

Rules are small generators that yield :class:`Finding` values (a code, a message, a hint and
*which argument* of *which modifier* is wrong); they never know lines or columns. One
dispatcher, :func:`validate_recipe`, turns findings into positioned diagnostics.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .checks.arguments import args_ok, plain_numbers_ok
from .checks.rules import RULES, WithoutModifiers
from .checks.support import CORE_DIALECT_MODIFIERS, backend_findings, known_names, modifier_findings
from .diagnostics import codes
from .diagnostics.base import Diagnostic
from .loader import RecipeInput, check
from .recipe.findings import Finding, positioned
from .recipe.model import Recipe
from .stage_dialect.validate import refusals, validate_stage
from .text.locs import gc_paused

__all__ = [
    "Finding", "validate", "validate_recipe", "backend_findings", "positioned", "apply_noqa", "RULES",
    "CORE_DIALECT_MODIFIERS", "once_per_file", "Findings",
]


class Findings(list[Diagnostic]):
    """One file's diagnostics (a list), with ``checked_against``: the releases a stage/group
    recipe was checked against when ``--compat`` chose none and the recipe says which tool
    it was written for (:func:`recipe_spec.stage_dialect.written_for.written_for`); ``""``
    when every release of both tools was."""

    checked_against: str = ""


def validate_recipe(recipe: Recipe, backend: str | None = None, compat: Any = None) -> list[Diagnostic]:
    """Every finding about ``recipe`` (schemas and rules), positioned, in file order.

    ``compat``: for a stage/group recipe (``recipe.dialect == "stage"``), the tool release
    whose rules apply (a :class:`recipe_spec.stage_dialect.Compat` or its text, e.g.
    ``"llmcompressor==0.8"``); None checks every release."""
    if recipe.dialect == "stage":
        if backend is None or not _one_shot(recipe):
            return once_per_file(validate_stage(recipe, backend, compat))
        compat = run_reading(recipe, backend, compat)
        found = _with_oneshot_reading(recipe, validate_stage(recipe, None, compat), backend, compat)
        # a modifier refused as a whole is said as modify() says it (the same place, one wording)
        whole = {(m.span.line, m.span.column): codes.B001(message, hint, m.span).in_file(recipe.path)
                 for m, message, hint in refusals(recipe, backend, compat, training=False)}
        return once_per_file([whole.get((d.line, d.column), d) if d.code == "B001" else d for d in found])
    known = known_names()
    checked = {id(m) for m in recipe.modifiers if m.type in known and args_ok(m)}  # the usual case
    numbers_ok = {id(m): id(m) in checked or plain_numbers_ok(m.args) for m in recipe.modifiers}
    findings = list(modifier_findings(recipe, backend, numbers_ok, checked))
    bad = {id(f.modifier) for f in findings if f.code.id in ("M001", "S007")}
    bad |= {key for key, ok in numbers_ok.items() if not ok}
    view = WithoutModifiers(recipe, bad)  # rules never see bad arguments
    for rule in RULES:
        found = rule(view)  # type: ignore[arg-type]
        findings.extend([f for f in found if id(f.modifier) not in bad] if bad else found)
    out = [positioned(f, recipe) for f in findings]
    return once_per_file(sorted(out, key=lambda d: (d.line, d.column, d.code)))


#: Codes said once per file and message (a deprecated argument written in every modifier).
_ONCE = frozenset({"M007"})


def run_reading(recipe: Recipe, backend: str | None, compat: Any) -> Any:
    """The release a stage/group ``recipe`` is checked against: ``compat``; or, checked for a
    ``backend`` without one, ``"llmcompressor"`` for a one-shot recipe (its newest release,
    which :func:`recipe_spec.oneshot` reads recipes as), so that ``validate --backend`` says
    what the run refuses."""
    if compat is not None or backend is None or not _one_shot(recipe):
        return compat
    return "llmcompressor"


def _one_shot(recipe: Recipe) -> bool:
    """Whether a stage/group recipe holds a one-shot modifier (``oneshot()`` runs it, not
    ``modify()``)."""
    from .stage_dialect import stage_spec

    return any((s := stage_spec(m.type)) is not None and not s.training for m in recipe.modifiers)


def _with_oneshot_reading(recipe: Recipe, out: list[Diagnostic], backend: str, compat: Any) -> list[Diagnostic]:
    """``out`` (a one-shot recipe's findings) and, when it holds no error, what
    :func:`recipe_spec.oneshot` on ``backend`` would refuse before any weight changes: the
    same reading of each modifier (:func:`recipe_spec.oneshot.modifiers.resolve`: a modifier
    it does not run, one the backend lacks the capabilities for, an argument it does not
    honour), so ``validate --backend`` and ``oneshot`` cannot disagree about a recipe."""
    from .diagnostics.base import RecipeError, Severity
    from .oneshot.modifiers import resolve
    from .oneshot.settings import release_of
    from .registry import backend_capabilities

    if any(d.severity is Severity.ERROR for d in out):
        return out
    try:
        version = release_of(compat)
    except ValueError:
        version = None  # a release a run does not follow: read as the newest
    try:
        resolve(recipe, backend_capabilities().get(backend, frozenset()), backend, version)
    except RecipeError as exc:
        return sorted([*out, *exc.diagnostics], key=lambda d: (d.line, d.column, d.code))
    return out


def once_per_file(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """``diagnostics`` with each repeated deprecation (the same code and message) said once,
    at its first place, naming the lines of the others.

    >>> from recipe_spec.diagnostics.base import Severity
    >>> d = [Diagnostic("M007", Severity.WARNING, "'x' is deprecated", line=n) for n in (3, 9, 12)]
    >>> [(x.line, x.message) for x in once_per_file(d)]
    [(3, "'x' is deprecated (also on lines 9, 12)")]
    """
    if not any(d.code in _ONCE for d in diagnostics):
        return diagnostics
    lines: dict[tuple[str, str], list[int]] = {}
    for d in diagnostics:
        if d.code in _ONCE:
            lines.setdefault((d.code, d.message), []).append(d.line)
    out, said = [], set()
    for d in diagnostics:
        key = (d.code, d.message)
        if d.code not in _ONCE or len(lines[key]) == 1:
            out.append(d)
        elif key not in said:
            said.add(key)
            rest = lines[key][1:]
            shown = ", ".join(map(str, rest[:6])) + (f" and {len(rest) - 6} more" if len(rest) > 6 else "")
            out.append(replace(d, message=f"{d.message} (also on line{'s' if len(rest) > 1 else ''} {shown})"))
    return out


_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]\d{3}(?:\s*,\s*[A-Z]\d{3})*))?", re.I)


def apply_noqa(diagnostics: Sequence[Diagnostic], text: str) -> list[Diagnostic]:
    """``diagnostics`` without those silenced by ``# noqa`` / ``# noqa: CODE`` on their line."""
    if not diagnostics or "noqa" not in text.lower():  # most files have none (lower(): 7x a re.I search)
        return list(diagnostics)
    lines = text.splitlines()
    kept = []
    for d in diagnostics:
        line = lines[d.line - 1] if 0 < d.line <= len(lines) else ""
        match = _NOQA.search(line)
        if match:
            listed = match.group("codes")
            if listed is None or d.code in {c.strip().upper() for c in listed.split(",")}:
                continue
        kept.append(d)
    return kept


def validate(
    recipe: RecipeInput,
    variables: Mapping[str, Any] | None = None,
    backend: str | None = None,
    compat: Any = None,
) -> list[Diagnostic]:
    """Load and validate ``recipe`` (a path or text): every diagnostic, in file order.
    ``compat`` as in :func:`validate_recipe`.

    >>> [d.code for d in validate("modifiers:\\n  - !EpochRangeModifier {start_epoch: 5, end_epoch: 2}")]
    ['E001']
    """
    with gc_paused():  # what one file makes dies with it: no collection need look at it
        loaded, diagnostics = check(recipe, variables)
        if loaded is not None:
            diagnostics = diagnostics + validate_recipe(loaded, backend, compat)
        text = loaded.source.text if loaded is not None and loaded.source is not None else _text_of(recipe)
        found = Findings(apply_noqa(diagnostics, text) if text else diagnostics)
        if loaded is not None and loaded.dialect == "stage" and compat is None:
            from .stage_dialect.written_for import checked_against, written_for

            tools = written_for(loaded)
            if run_reading(loaded, backend, None) is not None:
                found.checked_against = (f"{checked_against(('llmcompressor',), newest_only=True)}, the release "
                                         "recipe_spec.oneshot reads one-shot recipes as (--compat chooses another)")
            elif len(tools) == 1:
                found.checked_against = (f"{checked_against(tools)} only: they use what only llm-compressor "
                                         "reads (--compat chooses a release)")
        del loaded
        return found


def _text_of(recipe: RecipeInput) -> str:
    import os

    try:
        if isinstance(recipe, str) and ("\n" in recipe or not os.path.exists(recipe)):
            return recipe
        with open(os.fspath(recipe), encoding="utf-8", errors="replace") as f:  # type: ignore[arg-type]
            return f.read(4 * 1024 * 1024)
    except (OSError, TypeError):
        return ""
