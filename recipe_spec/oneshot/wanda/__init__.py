"""Wanda (``WandaPruningModifier``): each target's input norms per column, then pruning by
``|weight| x norm`` row by row or N:M (:func:`~recipe_spec.oneshot.wanda.solve.wanda_prune`),
as llm-compressor 0.14."""

from __future__ import annotations

from typing import Any

from ..algorithm import OneShotModifier, register
from ..shared.hessian import WandaStats
from ..shared.obs import PruneResult
from ..shared.pruning import PruningAlgorithm
from ..shared.solver import Solver
from .solve import wanda_prune

__all__ = ["Wanda", "WANDA"]


class Wanda(PruningAlgorithm):
    name = "wanda"
    modifiers = ("WandaPruningModifier",)
    statistic = ("row scalars", "in_features x 4 B")

    def new_stats(self, ops: Any, mod: OneShotModifier, group: Any, columns: int, like: Any) -> Any:
        return WandaStats(ops, columns, like)

    def prune(self, solver: Solver, weight: Any, stats: Any, mod: OneShotModifier, sparsity: float,
              prepared: Any = None) -> PruneResult:  # Wanda prepares nothing: always None
        return wanda_prune(solver.ops, weight, solver.put(stats.row_scalars), sparsity=sparsity, prune_n=mod.prune_n,
                           prune_m=mod.prune_m)

    def stats_bytes(self, columns: int) -> int:
        return columns * 4

    def flops(self, rows: int, columns: int, tokens: int) -> tuple[float, float]:
        return 2.0 * tokens * columns, 2.0 * rows * columns


WANDA = register(Wanda())
