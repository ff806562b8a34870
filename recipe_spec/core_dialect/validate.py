"""``validate`` for stage/group recipes: the checks of :mod:`.checks` and, with ``--backend``,
which modifiers a backend can run (B001).

One-shot modifiers (GPTQ, SparseGPT, Wanda, QuantizationModifier, SmoothQuant, AWQ, ...) are
validated here and run by llm-compressor; no backend of recipe-spec runs them, and none
approximates them with another algorithm. The training-time ones run through their
``!Modifier`` twins where every argument has an exact twin (:mod:`.catalogue`).
"""

from __future__ import annotations

from typing import Any

from .. import codes
from ..diagnostics import Diagnostic
from ..recipe import Modifier, Recipe
from .catalogue import core_spec
from .checks import core_diagnostics
from .versions import Compat

__all__ = ["validate_core", "refusals", "refuse_to_run"]


def _compat(compat: Any) -> Compat | None:
    if compat is None or isinstance(compat, Compat):
        return compat
    return Compat.parse(str(compat))


def refusals(recipe: Recipe, backend: str | None, compat: Any = None) -> list[tuple[Modifier, str, str]]:
    """``(modifier, what, how to fix)`` for every modifier of a stage/group recipe that a
    backend of recipe-spec does not run (``backend`` names it in the message)."""
    from ..modifiers import supported_by
    from ..validation import _backend_capabilities

    runs = supported_by(_backend_capabilities().get(backend, frozenset())) if backend else frozenset()
    where = f"the {backend} backend" if backend else "recipe-spec's backends"
    out: list[tuple[Modifier, str, str]] = []
    chosen = _compat(compat)
    for m in recipe.modifiers:
        declared = core_spec(m.type, chosen)
        if declared is None:
            continue  # M001 already
        if not declared.training:
            out.append((m, f"{m.type} is a one-shot modifier: {where} do not run it",
                        "llm-compressor runs it (`oneshot(model, recipe=...)`); recipe-spec "
                        "validates and lints it. Run training stages here and one-shot stages there."))
            continue
        translation = declared.translate(m.args, chosen) if declared.translate else None
        if translation is None or not translation.ok:
            reason = "; ".join(translation.refused) if translation is not None else "it has no twin"
            out.append((m, f"{m.type} cannot run on {where} as written: {reason}",
                        "Change the arguments named, or write the stage with its `!Modifier` twin."))
            continue
        if backend is not None and translation.twin not in runs:
            out.append((m, f"{m.type} runs as {translation.twin}, which {where} does not run",
                        "Choose a backend that runs it (docs/modifiers/index.md)."))
    return out


def validate_core(recipe: Recipe, backend: str | None = None, compat: Any = None) -> list[Diagnostic]:
    """Every diagnostic of a stage/group ``recipe``, in file order (see the module docstring)."""
    out = core_diagnostics(recipe, _compat(compat))
    if backend is not None:
        for m, message, hint in refusals(recipe, backend, compat):
            out.append(codes.B001(message, hint, m.span).in_file(recipe.path))
    return sorted(out, key=lambda d: (d.line, d.column, d.code))


def refuse_to_run(recipe: Recipe, backend: str) -> list[Diagnostic]:
    """Why ``backend`` does not run this stage/group recipe at ``modify()``, one B001 per
    modifier: one-shot modifiers belong to llm-compressor; training-time ones are not run
    from this dialect yet, and the message gives the ``!Modifier`` item that runs the same."""
    refused = {id(m): (message, hint) for m, message, hint in refusals(recipe, backend)}
    out = []
    for m in recipe.modifiers:
        if id(m) in refused:
            message, hint = refused[id(m)]
        else:
            declared = core_spec(m.type)
            translation = declared.translate(m.args, None) if declared and declared.translate else None
            twin = translation.twin if translation is not None else "its !Modifier twin"
            args = ", ".join(f"{k}: {v!r}" for k, v in (translation.args if translation else {}).items())
            message = (f"the {backend} backend does not run stage/group recipes yet: {m.type} "
                       f"runs as the !Modifier recipe item `- !{twin} {{{args}}}`")
            hint = f"Write this stage as a `modifiers:` list with `- !{twin}` and its arguments."
        out.append(codes.B001(message, hint, m.span).in_file(recipe.path))
    return out
