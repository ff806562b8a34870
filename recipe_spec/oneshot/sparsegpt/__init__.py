"""SparseGPT (``SparseGPTModifier``): each target's Hessian of its inputs, then the block-wise
OBS solve that prunes and corrects the remaining weights
(:func:`~recipe_spec.oneshot.shared.obs.sparsegpt_prune`), as llm-compressor 0.14."""

from __future__ import annotations

from typing import Any

from ..algorithm import OneShotModifier, register
from ..shared.hessian import HessianStats
from ..shared.obs import PruneResult, factor_hessian, sparsegpt_prune
from ..shared.pruning import PruningAlgorithm
from ..shared.solver import Solver

__all__ = ["SparseGPT", "SPARSEGPT"]


class SparseGPT(PruningAlgorithm):
    name = "sparsegpt"
    modifiers = ("SparseGPTModifier",)
    statistic = ("Hessian", "in_features^2 x 4 B")

    def new_stats(self, ops: Any, mod: OneShotModifier, group: Any, columns: int, like: Any) -> Any:
        return HessianStats(ops, columns, like)

    def prepare(self, solver: Solver, mod: OneShotModifier, stats: Any, group: Any) -> Any:
        return None if stats is None else factor_hessian(solver.ops, solver.put(stats.hessian), mod.dampening_frac)

    def prune(self, solver: Solver, weight: Any, stats: Any, mod: OneShotModifier, sparsity: float,
              prepared: Any = None) -> PruneResult:
        hessian = solver.put(stats.hessian) if prepared is None else None
        return sparsegpt_prune(solver.ops, weight, hessian, sparsity=sparsity,
                               prune_n=mod.prune_n, prune_m=mod.prune_m, block_size=mod.block_size,
                               dampening_frac=mod.dampening_frac, preserve_mask=True if mod.preserve_mask else None,
                               factor=prepared)

    def stats_bytes(self, columns: int) -> int:
        return columns * columns * 4

    def flops(self, rows: int, columns: int, tokens: int) -> tuple[float, float]:
        # the Hessian; its factorisations (about 5/3 in^3) and the column updates (out x in^2)
        return 2.0 * tokens * columns * columns, 5 / 3 * columns ** 3 + 1.0 * rows * columns * columns

    def solve_parts(self, rows: int, columns: int) -> tuple[float, float, int]:
        # factor, inverse and upper factor of the Hessian; the block updates; the column loop
        return 5 / 3 * columns ** 3, 1.0 * rows * columns * columns, columns


SPARSEGPT = register(SparseGPT())
