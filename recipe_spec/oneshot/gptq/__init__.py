"""GPTQ (``GPTQModifier``): each target's Hessian of its inputs, then the column-by-column
quantization with error correction (:func:`~recipe_spec.oneshot.gptq.solve.gptq_quantize`)
onto its config group's grid; the dequantized weight is written back, as llm-compressor 0.14.
Its settings (config groups, ``block_size``, ``dampening_frac``, ``actorder``) are read like
round to nearest's (:func:`~recipe_spec.oneshot.rtn.read_quantizer`)."""

from __future__ import annotations

from typing import Any

from ...diagnostics.base import Diagnostic
from ...recipe.model import Modifier, Recipe
from ..algorithm import Algorithm, OneShotModifier, Prepared, Solved, register
from ..rtn import read_quantizer
from ..shared.global_scales import fused_global_scale
from ..shared.obs import SolverError, factor_hessian
from ..shared.quantize import grid_text, new_quant_statistics, record_quantized
from ..shared.solver import Solver, solver_of
from .solve import gptq_quantize

__all__ = ["GPTQ", "GPTQ_ALGORITHM"]


class GPTQ(Algorithm):
    name = "gptq"
    modifiers = ("GPTQModifier",)
    role = "quantize"
    statistic = ("Hessian", "in_features^2 x 4 B")
    keeps_masks = True

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        return read_quantizer(self.name, recipe, m, errors, gptq=True)

    def needs_data(self, mod: OneShotModifier) -> bool:
        return True

    def new_stats(self, ops: Any, mod: OneShotModifier, group: Any, columns: int, like: Any) -> Any:
        return new_quant_statistics(ops, group, columns, like, hessian=True)

    def prepare(self, solver: Solver, mod: OneShotModifier, stats: Any, group: Any) -> Any:
        if group is None or group.weights is None or stats is None or stats.hessian_stats is None \
                or not stats.hessian_stats.samples:
            return None  # solve says why, in its turn
        ordered = group.actorder is not None and (group.actorder != "group" or group.weights.strategy in ("group", "tensor_group"))
        return factor_hessian(solver.ops, solver.put(stats.hessian), mod.dampening_frac, ordered=ordered)

    def solve(self, host: Any, mod: OneShotModifier, name: str, stats: Any, group: Any,
              prepared: Prepared | None = None) -> Solved:
        # in the model's dtype: a bfloat16 weight gets bfloat16 scales and returns bfloat16
        weight = host.observed(name) if group.weights is not None else host.weight(name)
        if group.weights is None:
            return Solved(record_quantized(host, name, weight, None, None, None, stats), grid=grid_text(group))
        if stats is None or stats.hessian_stats is None or not stats.hessian_stats.samples:
            raise ValueError(f"{mod.type} ({mod.where}) on {name}: no calibration input reached this "
                             "module, so GPTQ has no Hessian")
        solver = solver_of(host)
        fused = fused_global_scale(host, mod, name, group)
        try:
            factor = prepared() if prepared is not None else None
            start = solver.put(weight)
            mask = solver.ops.astype(start, "bool") if mod.preserve_mask else None
            result = gptq_quantize(solver.ops, start, solver.put(stats.hessian) if factor is None else None,
                                   args=group.weights, block_size=mod.block_size, dampening_frac=mod.dampening_frac,
                                   actorder=group.actorder, mask=mask, factor=factor, global_scale=solver.put(fused))
        except (SolverError, ValueError) as exc:
            raise type(exc)(f"{mod.type} ({mod.where}) on {name}: {exc}; no later layer was "
                            "compressed") from None
        after = record_quantized(host, name, weight, solver.get(result.weight), solver.get(result.scale),
                                 solver.get(result.zero_point), stats, fused)
        return Solved(after, result.loss, result.report or "", grid_text(group))

    def stats_bytes(self, columns: int) -> int:
        return columns * columns * 4

    def flops(self, rows: int, columns: int, tokens: int) -> tuple[float, float]:
        # the same Hessian, factorisation and column updates as SparseGPT's
        return 2.0 * tokens * columns * columns, 5 / 3 * columns ** 3 + 1.0 * rows * columns * columns

    def solve_parts(self, rows: int, columns: int) -> tuple[float, float, int]:
        # factor, inverse and upper factor of the Hessian; the block updates; the column loop
        return 5 / 3 * columns ** 3, 1.0 * rows * columns * columns, columns


GPTQ_ALGORITHM = register(GPTQ())
