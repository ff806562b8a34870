"""``recipe-spec lint RECIPE --model DIR``: a stage/group recipe's ``targets`` and ``ignore``
against a Hugging Face checkpoint, matched as each tool matches them.

Names come from the checkpoint's safetensors headers (:mod:`recipe_spec.params.checkpoint`); no
weight is read. With ``--compat`` the patterns are matched by that release's rules; without
it by SparseML 1.9's and llm-compressor's newest: a pattern no tool matches is an error
(P001), one that only some match is a warning naming the others (a parameter name such as
``re:.*q_proj.weight`` matches in SparseML, not in llm-compressor 0.11+). Class-name targets
are checked where the architecture could be built on the meta device; otherwise an info says
so. An ``ignore`` that removes every targeted module is P007.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic, Severity
from ..params.checkpoint import ModelNames
from ..recipe.model import Modifier, Recipe
from .matching import MatchResult, PatternReport, kind_for_modifier, match
from .pattern_checks import SEARCHED
from .versions import Compat, newest

__all__ = ["lint_stage_model"]


_PATTERN_ARGS = ("targets", "ignore")


def _tools(compat: Compat | None) -> list[tuple[str, tuple[int, ...], str]]:
    chosen = [compat] if compat is not None else [Compat("sparseml", newest("sparseml")),
                                                    Compat("llmcompressor", newest("llmcompressor"))]
    return [(c.tool, c.version.parts, c.label) for c in chosen]


def _patterns(value: Any) -> list[tuple[tuple[Any, ...], str]]:
    if isinstance(value, str):
        return [((), value)]
    if isinstance(value, tuple):
        return [((i,), v) for i, v in enumerate(value) if isinstance(v, str)]
    return []


def _one(m: Modifier, key: str, where: tuple[Any, ...], reports: list[tuple[str, PatternReport]],
         recipe: Recipe) -> Diagnostic | None:
    if any(r.error for _, r in reports):
        return None  # a pattern no tool can match: validation's P005 says why
    missing = [label for label, r in reports if r.matched_nothing]
    if not missing:
        if any(r.class_unchecked for _, r in reports):
            r = reports[0][1]
            return codes.P001(f"class-name pattern '{r.pattern}' of {m.type}.{key} could not be checked",
                              "Install transformers (with torch) so the architecture can be built "
                              "on the meta device.", m.value_span(key, *where), Severity.INFO).in_file(recipe.path)
        return None
    r = next(r for label, r in reports if r.matched_nothing)
    everywhere = len(missing) == len(reports)
    what = "no module of the model" if key == "targets" else "nothing to ignore"
    message = f"{m.type}.{key} '{r.pattern}' matches {what}" + ("" if everywhere else f" under {', '.join(missing)}")
    hints = []  # the notes of a parameter-name pattern say what to write instead
    if r.closest:
        hints.append("Closest names: " + ", ".join(r.closest) + ".")
    hints += [n if n.endswith(".") else n + "." for n in r.notes]
    severity = Severity.ERROR if everywhere and key == "targets" else Severity.WARNING
    return codes.P001(message, " ".join(hints), m.value_span(key, *where), severity).in_file(recipe.path)


def lint_stage_model(recipe: Recipe, names: ModelNames, compat: Compat | None = None) -> list[Diagnostic]:
    """The P001/P007 findings of a stage/group ``recipe`` against a checkpoint's ``names``."""
    out: list[Diagnostic] = []
    tools = _tools(compat)
    for m in recipe.modifiers:
        if not any(k in m.args for k in _PATTERN_ARGS) or m.type in SEARCHED:  # REAP's: P015's
            continue
        kind = kind_for_modifier(m.type)
        targets = m.args.get("targets", ("Linear",) if kind == "quantization" else None)
        ignore = m.args.get("ignore", ())
        ignore_list: Sequence[str] = (ignore,) if isinstance(ignore, str) else tuple(i for i in ignore if isinstance(i, str))
        results: list[tuple[str, MatchResult]] = [
            (label, match(tool, version, targets, ignore_list, names, kind=kind)) for tool, version, label in tools
        ]
        for key in _PATTERN_ARGS:
            if key not in m.args:
                continue
            for i, (where, _pattern) in enumerate(_patterns(m.args[key])):
                reports = [(label, (res.targets if key == "targets" else res.ignore)[i]) for label, res in results
                           if i < len(res.targets if key == "targets" else res.ignore)]
                found = _one(m, key, where, reports, recipe) if reports else None
                if found is not None:
                    out.append(found)
        emptied = [label for label, res in results if res.ignores_everything]
        if emptied:
            out.append(codes.P007(
                f"{m.type}: its ignore patterns remove every module its targets select"
                + ("" if len(emptied) == len(results) else f" under {', '.join(emptied)}"),
                "Narrow the ignore patterns, or remove the modifier.", m.value_span("ignore"),
            ).in_file(recipe.path))
    return out
