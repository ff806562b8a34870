"""SparseGPT (``SparseGPTModifier``): each target's Hessian of its inputs, then the block-wise
OBS solve that prunes and corrects the remaining weights
(:func:`~recipe_spec.oneshot.shared.obs.sparsegpt_prune`), as llm-compressor 0.14."""

from __future__ import annotations

from typing import Any

from ...diagnostics.base import Diagnostic
from ...recipe.model import Modifier, Recipe
from ..algorithm import Algorithm, OneShotModifier, Solved, register
from ..shared.hessian import HessianStats
from ..shared.obs import SolverError, sparsegpt_prune
from ..shared.pruning import read_pruning

__all__ = ["SparseGPT", "SPARSEGPT"]


class SparseGPT(Algorithm):
    name = "sparsegpt"
    modifiers = ("SparseGPTModifier",)
    statistic = ("Hessian", "in_features^2 x 4 B")

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        return read_pruning(self.name, recipe, m, errors)

    def needs_data(self, mod: OneShotModifier) -> bool:
        return True

    def new_stats(self, ops: Any, mod: OneShotModifier, group: Any, columns: int, like: Any) -> Any:
        return HessianStats(ops, columns, like)

    def solve(self, host: Any, mod: OneShotModifier, name: str, stats: Any, group: Any) -> Solved:
        try:
            result = sparsegpt_prune(
                host.ops, host.weight(name), stats.hessian, sparsity=mod.levels.get(name, mod.sparsity),
                prune_n=mod.prune_n, prune_m=mod.prune_m, block_size=mod.block_size,
                dampening_frac=mod.dampening_frac, preserve_mask=True if mod.preserve_mask else None)
        except (SolverError, ValueError) as exc:
            raise type(exc)(f"{mod.type} ({mod.where}) on {name}: {exc}; no later layer was "
                            "compressed") from None
        host.set_weight(name, result.weight)
        return Solved(result.weight, result.loss, result.report or "")

    def stats_bytes(self, columns: int) -> int:
        return columns * columns * 4

    def flops(self, rows: int, columns: int, tokens: int) -> tuple[float, float]:
        # the Hessian; its factorisations (about 5/3 in^3) and the column updates (out x in^2)
        return 2.0 * tokens * columns * columns, 5 / 3 * columns ** 3 + 1.0 * rows * columns * columns


SPARSEGPT = register(SparseGPT())
