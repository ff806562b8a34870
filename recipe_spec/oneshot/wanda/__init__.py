"""Wanda (``WandaPruningModifier``): each target's input norms per column, then pruning by
``|weight| x norm`` row by row or N:M (:func:`~recipe_spec.oneshot.wanda.solve.wanda_prune`),
as llm-compressor 0.14."""

from __future__ import annotations

from typing import Any

from ...diagnostics.base import Diagnostic
from ...recipe.model import Modifier, Recipe
from ..algorithm import Algorithm, OneShotModifier, Solved, register
from ..shared.hessian import WandaStats
from ..shared.obs import SolverError
from ..shared.pruning import read_pruning
from .solve import wanda_prune

__all__ = ["Wanda", "WANDA"]


class Wanda(Algorithm):
    name = "wanda"
    modifiers = ("WandaPruningModifier",)
    statistic = ("row scalars", "in_features x 4 B")

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        return read_pruning(self.name, recipe, m, errors)

    def needs_data(self, mod: OneShotModifier) -> bool:
        return True

    def new_stats(self, ops: Any, mod: OneShotModifier, group: Any, columns: int, like: Any) -> Any:
        return WandaStats(ops, columns, like)

    def solve(self, host: Any, mod: OneShotModifier, name: str, stats: Any, group: Any) -> Solved:
        try:
            result = wanda_prune(host.ops, host.weight(name), stats.row_scalars,
                                 sparsity=mod.levels.get(name, mod.sparsity), prune_n=mod.prune_n,
                                 prune_m=mod.prune_m)
        except (SolverError, ValueError) as exc:
            raise type(exc)(f"{mod.type} ({mod.where}) on {name}: {exc}; no later layer was "
                            "compressed") from None
        host.set_weight(name, result.weight)
        return Solved(result.weight, result.loss, result.report or "")

    def stats_bytes(self, columns: int) -> int:
        return columns * 4

    def flops(self, rows: int, columns: int, tokens: int) -> tuple[float, float]:
        return 2.0 * tokens * columns, 2.0 * rows * columns


WANDA = register(Wanda())
