"""Converting one recipe: choose the direction, write, and check the result.

- a ``!Modifier`` recipe to the stage/group dialect (:mod:`.to_stage`; ``--to stage`` or a
  release such as ``--to sparseml==1.8``);
- a stage/group recipe to the ``!Modifier`` dialect (:mod:`.to_modifier`; ``--to
  modifier``), read as ``source`` (``--from``, None: as the backends read it) says;
- a stage/group recipe to another release (:mod:`.releases`; ``--to llmcompressor==0.13``).

A dialect conversion is written in the first of three ways (:data:`.text.MODES`) that the
validator finds least to say about: *written* (variables, ``eval(...)``, anchors and the text
of every value kept), *values* (expressions replaced by their values: llm-compressor passes
``eval(...)`` through as text), *dumped* (every value written anew). Before anything is
returned it is loaded again and checked: the same modifiers with the same evaluated
arguments as planned, every one run by the backends as the same ``!Modifier`` twin as the
source (the twins compared argument by argument), and no error from ``recipe-spec validate``
for the target. A conversion that fails this is refused, never emitted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..diagnostics.base import Diagnostic, RecipeError, Severity
from ..loader import check
from ..modifiers import spec as modifier_spec
from ..recipe.model import Recipe
from ..stage_dialect import Compat, stage_spec
from ..stage_dialect.to_modifiers import refusals
from ..text.frozen import freeze
from ..text.source import from_text
from ..validation import validate, validate_recipe
from .releases import across_releases, source_of
from .result import Conversion, Note, Refusal, Target
from .text import MODES, Lines, Text
from .to_modifier import ModifierPlan, plan_modifiers, write_modifiers
from .to_stage import StagePlan, plan_stage, write_stage
from .twins import differing_args

__all__ = ["convert_text", "convert_file"]


def convert_text(text: str, path: str, target: Target, *, source: Compat | None = None,
                 drop_epoch_range: bool = False,
                 variables: dict[str, Any] | None = None) -> Conversion:
    """Convert ``text`` (the contents of ``path``, ``\\n`` line ends) to ``target``."""
    recipe, found = check(source_of(text, path), variables)
    dialect = recipe.dialect if recipe is not None else "unknown"
    result = Conversion(path, dialect, target)
    errors = [d for d in found if d.severity is Severity.ERROR]
    across = recipe is not None and recipe.dialect == "stage" and target.dialect == "stage"
    if recipe is not None and not errors and not across:  # a release move fixes what it can
        errors = [d.in_file(path) for d in validate_recipe(recipe, compat=source)
                  if d.severity is Severity.ERROR]
    if recipe is None or errors:
        result.refusals = [Refusal(d.line or 1, d.column or 1, d.message,
                                   d.hint or "Fix the recipe first (recipe-spec validate).")
                           for d in errors] or [Refusal(1, 1, "no recipe", "Check the file.")]
        return result
    if dialect == "modifier":
        if target.dialect != "stage":
            result.refusals = [Refusal(1, 1, "the recipe is in the !Modifier dialect already",
                                       "Give --to stage or a release (--to sparseml==1.8).")]
            return result
        plan = plan_stage(recipe, target.compat, drop_epoch_range)
        _dialect(result, recipe, text, plan, overridden=bool(variables))
    elif target.dialect == "modifier":
        mplan = plan_modifiers(recipe, source)
        _dialect(result, recipe, text, mplan, source, bool(variables))
    elif target.compat is None:
        result.refusals = [Refusal(1, 1, "the recipe is in the stage/group dialect already",
                                   "Give --to modifier, or a release (--to llmcompressor==0.13).")]
    else:
        out, result.notes, result.refusals = across_releases(text, path, target.compat)
        if not result.refusals:
            result.text = out
            result.findings = validate(source_of(out, path), compat=target.compat)
    return result


def _dialect(result: Conversion, recipe: Recipe, text: str,
             plan: StagePlan | ModifierPlan | list[Refusal], source: Compat | None = None,
             overridden: bool = False) -> None:
    """Write ``plan`` (as written, else evaluated), check it, fill ``result``."""
    if isinstance(plan, list):
        result.refusals = plan
        return
    to_stage = isinstance(plan, StagePlan)
    if isinstance(plan, StagePlan):
        result.notes = list(plan.notes)
    compat = result.target.compat
    t = Text(text)
    best: tuple[int, bool, Lines, list[Diagnostic]] | None = None
    failures: list[Refusal] = []
    for mode in MODES:
        lines = (write_stage(recipe, t, plan, mode) if isinstance(plan, StagePlan)
                 else write_modifiers(recipe, t, plan, mode))
        out = lines.text()
        refused = _checked(out, result.path, plan, compat if to_stage else source, lines)
        if refused:
            failures = refused
            continue
        findings = validate(from_text(out, _yaml_name(result.path)), compat=compat if to_stage else None)
        errors = [d for d in findings if d.severity is Severity.ERROR]
        if errors:
            failures = [Refusal(*lines.origin_of(d.line or 1), d.message,
                                d.hint or f"It has no equivalent in {result.target.label}.")
                        for d in errors]
            continue
        if best is None or len(findings) < best[0]:
            best = (len(findings), mode != "written", lines, findings)
        if not findings:
            break
    if best is None:
        result.refusals = failures
        return
    _, result.evaluated, lines, result.findings = best
    result.text = lines.text()
    if result.evaluated and recipe.raw_variables:
        names = ", ".join(map(str, recipe.raw_variables))
        why = ("--var changed them" if overridden else
               f"{result.target.label} would not read them the same way")
        result.notes.append(Note(1, f"variables written as their values ({names}): {why}"))


def _yaml_name(path: str) -> str:
    return str(Path(path).with_suffix(".yaml")) if path.lower().endswith(".md") else path


def _checked(out: str, path: str, plan: StagePlan | ModifierPlan, compat: Compat | None,
             lines: Lines) -> list[Refusal]:
    """What is wrong with the written text ``out``: it must load to the planned modifiers
    and arguments, and (stage/group output) the backends must run each as its source."""
    try:
        converted, found = check(from_text(out, _yaml_name(path)))
    except RecipeError as exc:
        found, converted = list(exc.diagnostics), None
    if converted is None:
        return [Refusal(*lines.origin_of(d.line or 1), f"the converted text does not load: "
                        f"{d.message}", "Report this; convert with a simpler layout.")
                for d in found if d.severity is Severity.ERROR][:1] or [
            Refusal(1, 1, "the converted text does not load", "Report this.")]
    if not _as_planned(converted, plan):
        return [Refusal(1, 1, "the converted text does not read back as planned", "Report this.")]
    if isinstance(plan, ModifierPlan):
        return []
    refused = [Refusal(tw.source.span.line, tw.source.span.column, what, how)
               for (m, what, how) in refusals(converted, None, compat)
               for tw in [plan.twins[_index(converted, m)]]]
    if refused:
        return refused
    for m, tw in zip(converted.modifiers, plan.twins, strict=True):
        declared = stage_spec(m.type, compat)
        assert declared is not None and declared.translate is not None
        forward = declared.translate(m.args, compat)
        twin_spec = modifier_spec(forward.twin)
        source = {k: v for k, v in tw.source.args.items() if k not in tw.dropped}
        if twin_spec is None or differing_args(twin_spec, dict(forward.args), source):
            return [Refusal(tw.source.span.line, tw.source.span.column,
                            f"{m.type} would not run as {tw.source.type} as written",
                            "Report this.")]
    return []


def _as_planned(converted: Recipe, plan: StagePlan | ModifierPlan) -> bool:
    """Whether ``converted`` holds the planned modifiers with the planned arguments (a
    ``!Modifier`` recipe's with their defaults filled in)."""
    if len(converted.modifiers) != len(plan.expected):
        return False
    for m, (name, args) in zip(converted.modifiers, plan.expected, strict=True):
        if m.type != name:
            return False
        declared = modifier_spec(name) if isinstance(plan, ModifierPlan) else None
        if declared is not None and differing_args(declared, dict(m.args), args):
            return False
        if declared is None and freeze(dict(m.args)) != freeze(args):
            return False
    return True


def _index(recipe: Recipe, m: object) -> int:
    return next(i for i, x in enumerate(recipe.modifiers) if x is m)


def convert_file(path: str | Path, target: Target, **options: Any) -> Conversion:
    """:func:`convert_text` of a file (UTF-8; a byte-order mark and ``\\r\\n`` line ends
    are read as the loader reads them)."""
    raw = Path(path).read_bytes().decode("utf-8").removeprefix("\ufeff")
    return convert_text(raw.replace("\r\n", "\n"), str(path), target, **options)
