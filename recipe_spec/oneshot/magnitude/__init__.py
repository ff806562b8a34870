"""The training-time pruning modifiers read one-shot: ``MagnitudePruningModifier`` prunes each
target to ``final_sparsity`` by ``|w|`` now (:func:`recipe_spec.masks.algorithms.compute_mask`;
unstructured or N:M), ``ConstantPruningModifier`` keeps the zeros there are (nothing to do in
one pass). Their targets may also be parameter selectors and ``__ALL_PRUNABLE__``."""

from __future__ import annotations

import re
from typing import Any

from ...diagnostics import codes
from ...diagnostics.base import Diagnostic
from ...masks.algorithms import compute_mask
from ...recipe.model import Modifier, Recipe
from ..algorithm import Algorithm, OneShotModifier, Prepared, Solved, register
from ..settings import b001, refuse_unrun, strings, value

__all__ = ["Magnitude", "Constant", "MAGNITUDE", "CONSTANT"]

_NM = re.compile(r"^([0-9]+):([0-9]+)$")


class Magnitude(Algorithm):
    name = "magnitude"
    modifiers = ("MagnitudePruningModifier",)
    takes_tokens = True

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        refuse_unrun(recipe, m, errors)
        structure = str(value(m, "mask_structure") or "unstructured")
        final = float(value(m, "final_sparsity") or 0.0)
        pattern = _NM.match(structure)
        if pattern is None and structure != "unstructured":
            errors.append(b001(recipe, m, f"MagnitudePruningModifier mask_structure '{structure}' is not "
                               "run by recipe_spec.oneshot", "Write 'unstructured' or 'N:M'.", "mask_structure"))
            return []
        if pattern is not None:
            kept = int(pattern.group(1)) / max(int(pattern.group(2)), 1)
            if abs((1 - kept) - final) > 1e-9:
                errors.append(codes.M006(
                    f"final_sparsity {final:g} is overridden by mask_structure '{structure}' (sparsity "
                    f"{1 - kept:g})", "Write the sparsity the N:M pattern gives, or mask_structure: unstructured.",
                    m.value_span("final_sparsity")).in_file(recipe.path))
                return []
        return [OneShotModifier(m.type, self.name, m, strings(value(m, "targets")), sparsity=final,
                                mask_type=structure)]

    def solve(self, host: Any, mod: OneShotModifier, name: str, stats: Any, group: Any,
              prepared: Prepared | None = None) -> Solved:
        weight = host.weight(name)
        new = host.ops.where(compute_mask(host.ops, weight, mod.sparsity, mod.mask_type), weight, 0.0)
        host.set_weight(name, new)
        return Solved(new)


class Constant(Algorithm):
    name = "constant"
    modifiers = ("ConstantPruningModifier",)
    takes_tokens = True

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        refuse_unrun(recipe, m, errors)
        return [OneShotModifier(m.type, self.name, m, strings(value(m, "targets")))]

    def solve(self, host: Any, mod: OneShotModifier, name: str, stats: Any, group: Any,
              prepared: Prepared | None = None) -> Solved:
        return Solved(host.weight(name))

    def flops(self, rows: int, columns: int, tokens: int) -> tuple[float, float]:
        return 0.0, 2.0 * rows * columns


MAGNITUDE = register(Magnitude())
CONSTANT = register(Constant())
