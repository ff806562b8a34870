"""``validate`` for stage/group recipes: the checks of :mod:`.checks` and, with ``--backend``,
which modifiers a backend can run (B001).

One-shot modifiers (GPTQ, SparseGPT, Wanda, QuantizationModifier, SmoothQuant, AWQ, ...) are
validated here and run by llm-compressor; no backend of recipe-spec runs them, and none
approximates them with another algorithm. The training-time ones of one training stage run
through their ``!Modifier`` twins where every argument has an exact twin
(:mod:`.to_modifiers`, which also says how stages map to time).
"""

from __future__ import annotations

from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic
from ..recipe.model import Recipe
from .checks import core_diagnostics
from .to_modifiers import refusals
from .versions import Compat

__all__ = ["validate_core", "refusals", "refuse_to_run"]


def _compat(compat: Any) -> Compat | None:
    if compat is None or isinstance(compat, Compat):
        return compat
    return Compat.parse(str(compat))


def validate_core(recipe: Recipe, backend: str | None = None, compat: Any = None) -> list[Diagnostic]:
    """Every diagnostic of a stage/group ``recipe``, in file order (see the module docstring)."""
    out = core_diagnostics(recipe, _compat(compat))
    if backend is not None:
        for m, message, hint in refusals(recipe, backend, compat):
            out.append(codes.B001(message, hint, m.span).in_file(recipe.path))
    return sorted(out, key=lambda d: (d.line, d.column, d.code))


def refuse_to_run(recipe: Recipe, backend: str) -> list[Diagnostic]:
    """Why ``backend`` does not run this stage/group recipe at ``modify()``: one B001 per
    modifier :func:`refusals` names (one-shot modifiers belong to llm-compressor; a
    training-time one whose arguments have no exact twin, that never starts, or that sits in a
    second training stage). [] when the recipe runs (as its ``!Modifier`` twins)."""
    return [codes.B001(message, hint, m.span).in_file(recipe.path)
            for m, message, hint in refusals(recipe, backend)]
