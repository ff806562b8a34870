"""What only the model and the optimizer show, checked at ``modify()`` and ``apply()`` with the
plan compiled: a ``param_groups`` entry the optimizer lacks (M005), global magnitude pruning
with a structured mask (M006), a layer removed while a modifier still prunes its weights
(P003). Each is a located error before the model is touched, never a raw exception from
inside a training step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import RecipeError
from ..modifiers import spec
from ..pruning.magnitude import global_mask_type_message, global_sparsity_of
from ..recipe.findings import Finding, positioned
from ..recipe.model import Recipe
from ..schedule.plan import Plan

__all__ = ["check_fits_run"]

NamesFor = Callable[[int, Any], list[str]]


def check_fits_run(recipe: Recipe, plan: Plan, names_for: NamesFor, optimizer_groups: int | None) -> None:
    """Raise :class:`RecipeError` with every finding of this module about ``recipe`` run with
    ``plan`` on a model whose selectors ``names_for`` resolves, and an optimizer of
    ``optimizer_groups`` parameter groups (None: not known, not checked)."""
    findings = list(_group_findings(recipe, optimizer_groups))
    findings += _global_mask_findings(recipe)
    findings += _removed_while_pruned(recipe, plan, names_for)
    if findings:
        raise RecipeError([positioned(f, recipe) for f in findings])


def _group_findings(recipe: Recipe, groups: int | None) -> Iterator[Finding]:
    if groups is None:
        return
    for m in recipe.modifiers:
        listed = m.args.get("param_groups")
        if not isinstance(listed, (list, tuple)):
            continue
        for i, g in enumerate(listed):
            if isinstance(g, int) and not isinstance(g, bool) and not 0 <= g < groups:
                yield Finding(
                    codes.M005,
                    f"param_groups lists group {g}, but the optimizer has {groups} parameter group(s)",
                    f"Use group indexes from 0 to {groups - 1}, or leave param_groups out to set every group.",
                    m, ("param_groups", i),
                )


def _global_mask_findings(recipe: Recipe) -> Iterator[Finding]:
    for m in recipe.modifiers:
        declared = spec(m.type)
        if declared is None or not declared.prunes or declared.scores != "magnitude":
            continue
        mask_type = m.args.get("mask_type", "unstructured")
        if global_sparsity_of(m) and mask_type not in (None, "unstructured"):
            where = ("mask_type",) if "mask_type" in m.args else ()
            yield Finding(
                codes.M006, f"{m.type}: {global_mask_type_message(mask_type)}",
                "Set mask_type: unstructured, or global_sparsity: false to prune layer by layer with this mask.",
                m, where,
            )


def _tracks(plan: Plan) -> Iterator[tuple[int, int, float, list[Any]]]:
    """Each track's modifier, first step, end (a step, or ``inf``) and first-step events."""
    for t in plan.tracks:
        events = [e for e in plan.iter_events(t.first, t.first + 1) if e.modifier == t.index]
        yield t.index, t.first, (t.last if t.last is not None else math.inf), events


def _first_at(plan: Plan, step: int, a: int, b: int) -> bool:
    """Whether modifier ``a``'s events of ``step`` come before modifier ``b``'s."""
    for e in plan.iter_events(step, step + 1):
        if e.modifier in (a, b):
            return e.modifier == a
    return False


def _removed_while_pruned(recipe: Recipe, plan: Plan, names_for: NamesFor) -> Iterator[Finding]:
    removed: list[tuple[int, int, float, int, str]] = []  # modifier, from, until, entry, layer
    pruned: list[tuple[int, int, float, list[str]]] = []  # modifier, from, to (inclusive), names
    for index, first, end, events in _tracks(plan):
        for e in events:
            if e.target == "layers" and e.value == "remove":
                layers = e.params if isinstance(e.params, (list, tuple)) else [e.params]
                # the track's last step is its removal when it never restores (end_epoch -1)
                until = end if recipe.modifiers[index].args.get("end_epoch", -1) not in (-1, None) else math.inf
                removed += [(index, first, until, i, str(layer)) for i, layer in enumerate(layers)]
            elif e.target == "sparsity" or (e.target == "masks" and e.value == "hold"):
                pruned.append((index, first, end, names_for(index, e.params)))
    spe = plan.steps_per_epoch
    for r_index, r_from, r_until, entry, layer in removed:
        lm = recipe.modifiers[r_index]
        for p_index, p_from, p_to, names in pruned:
            if not (p_from < r_until and r_from <= p_to):
                continue
            if r_from == p_to and _first_at(plan, r_from, p_index, r_index):
                continue  # the pruning's last event comes before the removal in that step
            inside = [n for n in names if n == layer or n.startswith(layer + ".")]
            if not inside:
                continue
            pm = recipe.modifiers[p_index]
            last = "the end" if math.isinf(p_to) else f"epoch {p_to / spe:g}"
            yield Finding(
                codes.P003,
                f"{lm.type} removes layer '{layer}' at epoch {r_from / spe:g}, while {pm.type} (line {pm.span.line}) "
                f"still prunes its {', '.join(repr(n) for n in inside[:3])}{' ...' if len(inside) > 3 else ''} "
                f"(until {last})",
                f"Remove the layer once {pm.type} has ended (start_epoch after its end_epoch), or leave "
                f"the layer's parameters out of its params.",
                lm, ("layers",) if isinstance(lm.args.get("layers"), str) else ("layers", entry),
            )
