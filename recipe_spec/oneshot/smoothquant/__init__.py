"""SmoothQuant (``SmoothQuantModifier``, ``LogarithmicEqualizationModifier``): per-channel
scales that move activation outliers into the next layers' weights, for each mapping
(``[[balance layers], smooth layer]``; default: the architecture's), from the smooth layer's
output ranges (:mod:`.solve`), as llm-compressor 0.14. Settings: ``smoothing_strength``
(alpha), ``mappings``, ``ignore``, ``algorithm`` (``smoothquant`` or ``log_equalization``, the
latter LogarithmicEqualizationModifier's default); each default is the catalogue's. It runs
in the smoothing pass (:mod:`recipe_spec.oneshot.shared.smoothing`)."""

from __future__ import annotations

from typing import Any

from ...diagnostics.base import Diagnostic
from ...recipe.model import Modifier, Recipe
from ..algorithm import Algorithm, OneShotModifier, register
from ..settings import b001, refuse_unrun, strings, value
from ..shared.smoothing_args import SmoothingPlan, read_mappings
from .solve import ALGORITHMS

__all__ = ["SmoothQuant", "SMOOTHQUANT", "smoothquant_plan"]

#: The ``algorithm`` each modifier runs when the recipe names none.
_DEFAULT = {"SmoothQuantModifier": "smoothquant", "LogarithmicEqualizationModifier": "log_equalization"}


def smoothquant_plan(recipe: Recipe, m: Modifier, errors: list[Diagnostic]) -> SmoothingPlan | None:
    """The plan of entry ``m``; None with a located B001 in ``errors`` for each argument value
    it cannot run."""
    before = len(errors)
    refuse_unrun(recipe, m, errors)
    ok, mappings = read_mappings(recipe, m, "smoothquant", errors)
    if not ok:
        return None
    algorithm = str(m.args.get("algorithm") or _DEFAULT[m.type])
    alpha = value(m, "smoothing_strength")
    if algorithm not in ALGORITHMS:
        errors.append(b001(recipe, m, f"{m.type} algorithm {algorithm!r} is not run by recipe_spec.oneshot",
                           f"Write one of {', '.join(ALGORITHMS)}.", "algorithm"))
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        errors.append(b001(recipe, m, f"{m.type} smoothing_strength {alpha!r} is not a number",
                           "Write a number from 0 to 1, e.g. 0.5.", "smoothing_strength"))
    if len(errors) > before:
        return None
    return SmoothingPlan(algorithm, mappings, strings(m.args.get("ignore")), float(alpha))


class SmoothQuant(Algorithm):
    name = "smoothquant"
    modifiers = tuple(_DEFAULT)
    role = "transform"
    describe = "smoothing: each mapping's per-channel scales moved from the activations into the weights"

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        plan = smoothquant_plan(recipe, m, errors)
        return [] if plan is None else [OneShotModifier(m.type, self.name, m, (), transform=plan)]

    def needs_data(self, mod: OneShotModifier) -> bool:
        return True


SMOOTHQUANT = register(SmoothQuant())
