"""REAP (``REAPPruningModifier``): whole experts removed from each mixture-of-experts layer, the
``int(experts x sparsity)`` of lowest saliency (router-weighted mean output norm,
:mod:`.saliency`), as llm-compressor 0.14 runs it: the sequential pipeline calibrates a block,
the layer is pruned at the block's end (its experts' modules, the router's rows, its expert
count) and the block runs again, pruned, to feed the next one; the model's config then says
the new count. ``ignore``: layers left alone, each a regular expression searched in the
layer's name (``re:`` in front is read as the same pattern; llm-compressor 0.14 searches the
text as written, so there ``re:...`` never matches). ``report_path``: a JSON file written at
the end with the experts each layer kept (``{layer: [indices]}``).

Every MoE layer a config describes must end with the same count (the config holds one):
``ignore`` that leaves some of them whole is refused before anything changes, where
llm-compressor saves a checkpoint transformers cannot load.

>>> skipped("model.layers.1.mlp", ("layers\\\\.1\\\\.mlp$",)), skipped("model.layers.1.mlp", ("re:.*layers\\\\.0",))
(True, False)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...diagnostics.base import Diagnostic
from ...recipe.model import Modifier, Recipe
from ...text.targets import regex_match, search_problem, searched
from ..algorithm import Algorithm, OneShotModifier, register
from ..settings import b001, refuse_unrun, strings, value

__all__ = ["Reap", "REAP", "ExpertPruning", "skipped"]


@dataclass(frozen=True)
class ExpertPruning:
    """What one ``REAPPruningModifier`` entry asks: the fraction of experts removed per layer,
    the ``ignore`` patterns and the ``report_path`` (None: no report)."""

    sparsity: float
    ignore: tuple[str, ...] = ()
    report_path: str | None = None


def skipped(name: str, ignore: Sequence[str]) -> bool:
    """Whether layer ``name`` is left alone by ``ignore`` (see the module docstring)."""
    return any(regex_match(searched(p), name) for p in ignore)


class Reap(Algorithm):
    name = "reap"
    modifiers = ("REAPPruningModifier",)
    role = "experts"
    statistic = ("per expert: a saliency sum and a token count", "experts x 16 B per layer")
    describe = "expert pruning: each MoE layer's experts of lowest router-weighted output norm removed"

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        before = len(errors)
        refuse_unrun(recipe, m, errors)
        sparsity = value(m, "sparsity")
        if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not 0 < sparsity < 1:
            errors.append(b001(recipe, m, f"{m.type} sparsity {sparsity!r} is not a fraction of the experts in (0, 1)",
                               "Write sparsity: 0.25 (a quarter of each layer's experts removed).", "sparsity"))
        given = value(m, "ignore")
        if not (isinstance(given, (list, tuple)) and all(isinstance(p, str) for p in given)):
            errors.append(b001(recipe, m, f"{m.type} ignore {given!r} is not a list of patterns",
                               "Write ignore: ['layers\\.3\\.mlp$'] (regular expressions searched in each MoE "
                               "layer's name), or leave it out.", "ignore"))
            given = []
        ignore = tuple(strings(given))
        for pattern in ignore:
            problem = search_problem(pattern)
            if problem is not None:
                errors.append(b001(recipe, m, f"{m.type} ignore: {problem[0]}", problem[1], "ignore"))
        report = value(m, "report_path")
        if report is not None and not (isinstance(report, str) and report.endswith(".json")):
            errors.append(b001(recipe, m, f"{m.type} report_path {report!r} is not a .json file",
                               "Write report_path: experts.json, or leave it out.", "report_path"))
        if len(errors) > before:
            return []
        plan = ExpertPruning(float(sparsity), ignore, report)
        return [OneShotModifier(m.type, self.name, m, (), sparsity=float(sparsity), experts=plan)]

    def needs_data(self, mod: OneShotModifier) -> bool:
        return True


REAP = register(Reap())
