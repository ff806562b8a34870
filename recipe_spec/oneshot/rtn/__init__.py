"""Round to nearest (``QuantizationModifier``): each target's weight onto its config group's
grid, scale and zero point from the memoryless min-max observer on the weight; static input
activations calibrated per tensor (:mod:`recipe_spec.oneshot.shared.quantize`), as
llm-compressor 0.14. The float weight stays in the model (the grid applies when it runs
quantized or is saved), as there."""

from __future__ import annotations

from typing import Any

from ...diagnostics.base import Diagnostic
from ...quantization.grid import minmax_qparams
from ...recipe.model import Modifier, Recipe
from ..algorithm import Algorithm, OneShotModifier, Prepared, Solved, register
from ..shared.global_scales import fused_global_scale
from ..shared.quant_plan import resolve_quant
from ..shared.quantize import grid_text, new_quant_statistics, record_quantized

__all__ = ["RoundToNearest", "ROUND_TO_NEAREST", "read_quantizer"]


def read_quantizer(kind: str, recipe: Recipe, m: Modifier, errors: list[Diagnostic], args: Any = None,
                   name: str | None = None, note: str = "", gptq: bool = False) -> list[OneShotModifier]:
    """Entry ``m`` as quantizer ``kind`` runs it (``args``: quantization arguments of modifier
    ``name`` that are not ``m``'s own: AWQ's combined form; ``gptq``: GPTQ's reading of
    ``actorder``); [] with located errors."""
    resolved = resolve_quant(recipe, m, errors, args, name or m.type, gptq)
    if resolved is None:
        return []
    plan, settings = resolved
    targets = tuple(dict.fromkeys(t for g in plan.groups for t in g.targets))
    return [OneShotModifier(m.type, kind, m, targets, plan.ignore, quant=plan, note=note, **settings)]


class RoundToNearest(Algorithm):
    name = "quantization"
    modifiers = ("QuantizationModifier",)
    role = "quantize"

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        return read_quantizer(self.name, recipe, m, errors)

    def needs_data(self, mod: OneShotModifier) -> bool:
        return bool(mod.quant and mod.quant.static_inputs)

    def new_stats(self, ops: Any, mod: OneShotModifier, group: Any, columns: int, like: Any) -> Any:
        return new_quant_statistics(ops, group, columns, like, hessian=False)

    def solve(self, host: Any, mod: OneShotModifier, name: str, stats: Any, group: Any,
              prepared: Prepared | None = None) -> Solved:
        ops = host.ops
        weight = host.weight(name)
        scale = zero = None
        fused = fused_global_scale(host, mod, name, group)
        if group.weights is not None:  # extremes and elementwise steps: the same bits on one thread
            with ops.serial(weight):  # the observer reads the weight in the model's dtype
                scale, zero = minmax_qparams(ops, host.observed(name), group.weights, fused)
        after = record_quantized(host, name, weight, None, scale, zero, stats, fused)
        return Solved(after, grid=grid_text(group))


ROUND_TO_NEAREST = register(RoundToNearest())
