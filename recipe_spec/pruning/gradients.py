"""Pruners that rank weights from gradients, inside a backend runtime: the pruners of a
recipe's M-FAC and OBS modifiers (with their checks before training, M012) and of its
movement pruning modifiers (:mod:`recipe_spec.pruning.movement`), the gradients taken before every
optimizer step, and the pruning events of a step handled together per modifier.

A backend runtime (:class:`recipe_spec.runtime.RecipeRuntime`) supplies a
:class:`~.pruner.Host` through ``_second_order_host(grad_sampler)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..diagnostics.base import RecipeError
from ..modifiers import spec
from .second_order.checks import second_order_findings
from .second_order.pruner import SecondOrderPruner
from .second_order.settings import settings_for

if TYPE_CHECKING:
    from ..runtime.base import RecipeRuntime
    from ..schedule.events import Event

__all__ = ["SECOND_ORDER_SCORES", "GRADIENT_SCORES", "SecondOrderSet", "is_second_order", "takes_gradients"]

#: The ``scores`` of the second-order modifiers.
SECOND_ORDER_SCORES = ("mfac", "obs")
#: The ``scores`` of every modifier handled here: ranked from the training's gradients.
GRADIENT_SCORES = (*SECOND_ORDER_SCORES, "movement")


def is_second_order(modifier_type: str) -> bool:
    declared = spec(modifier_type)
    return declared is not None and declared.scores in SECOND_ORDER_SCORES


def takes_gradients(modifier_type: str) -> bool:
    """Whether the modifier's pruner is driven here (second-order or movement pruning)."""
    declared = spec(modifier_type)
    return declared is not None and declared.scores in GRADIENT_SCORES


class SecondOrderSet:
    """The pruners of a recipe's second-order modifiers on one runtime."""

    def __init__(self, pruners: dict[int, Any]):
        self.pruners = pruners

    @classmethod
    def attach(cls, runtime: RecipeRuntime, grad_sampler: Any, oneshot: bool = False) -> SecondOrderSet | None:
        """Check the recipe's second-order modifiers against the model and make their
        pruners (None when the recipe has none). Raises :class:`RecipeError` (M012)."""
        from ..recipe.findings import positioned

        indexes = [i for i, m in enumerate(runtime.recipe.modifiers) if takes_gradients(m.type)]
        if grad_sampler is not None and not any(is_second_order(runtime.recipe.modifiers[i].type) for i in indexes):
            raise ValueError("grad_sampler is for M-FAC and OBS pruning modifiers; this recipe has none")
        if not indexes:
            return None
        host = runtime._second_order_host(grad_sampler)
        assert runtime.plan is not None and runtime._model_params is not None
        from ..lint import _canonical_shape

        # in PyTorch's axes (a Keras Dense kernel (in, out) is (out, in)): block4 groups dimension 1
        shapes = {r.name: _canonical_shape(r, runtime.framework)[1] for r in runtime._model_params.records}
        problems = []
        pruners: dict[int, Any] = {}
        for i in indexes:
            m = runtime.recipe.modifiers[i]
            names = runtime.names_for(i, m.args.get("params"))
            if not is_second_order(m.type):
                pruners[i] = _movement_pruner(runtime, host, i, m, names, oneshot)
                continue
            findings = second_order_findings(
                m, i, runtime.plan, {n: shapes[n] for n in names}, grad_sampler is not None, oneshot,
                host.world_size(), host.itemsize(names), host.free_memory, runtime.step_count,
                host.gradients(names) is not None,
            )
            problems.extend(positioned(f, runtime.recipe) for f in findings)
            s = settings_for(m)
            where = f"{runtime.recipe.path or '<recipe>'}:{m.span.line}: {m.type}"
            pruner = SecondOrderPruner(host, s, names, where, s.samples(grad_sampler is not None, oneshot), i)
            prune_steps = sorted({e.step for e in runtime.plan.iter_events(runtime.step_count)
                                  if e.modifier == i and e.target == "sparsity"}) if not oneshot else []
            if prune_steps:
                pruner.collect_start = runtime.step_count
                pruner.collect_from = max(runtime.step_count, prune_steps[0] - s.grads_for(0.0) + 1)
                pruner.collect_until = prune_steps[-1]
            pruners[i] = pruner
        if problems:
            raise RecipeError(problems)
        return cls(pruners)

    def owns(self, modifier: int) -> bool:
        return modifier in self.pruners

    def collect(self, step: int) -> None:
        """Before optimizer step ``step``: every training-time M-FAC and movement pruner takes
        its gradients."""
        for pruner in self.pruners.values():
            pruner.collect(step)

    def state(self) -> dict[str, Any]:
        return {str(i): p.state() for i, p in self.pruners.items()}

    def load(self, state: dict[str, Any]) -> None:
        for i, saved in state.items():
            if int(i) in self.pruners:
                self.pruners[int(i)].load(saved)

    def prune(self, modifier: int, events: Sequence[Event], names_for: Any) -> None:
        """The sparsity events of one modifier at one step, as one pruning step."""
        pruner = self.pruners[modifier]
        targets: dict[str, float] = {}
        for event in events:
            for name in names_for(modifier, event.params):
                targets[name] = float(event.value)
        last = dict(zip(pruner.names, pruner.last_targets or [0.0] * len(pruner.names), strict=True))
        pruner.prune([targets.get(n, last[n]) for n in pruner.names])


def _movement_pruner(runtime: RecipeRuntime, host: Any, i: int, m: Any, names: list[str], oneshot: bool) -> Any:
    from .movement import MovementPruner

    where = f"{runtime.recipe.path or '<recipe>'}:{m.span.line}: {m.type}"
    if oneshot:
        raise ValueError(
            f"{where} ranks weights by how training moves them; one-shot apply() trains no step: "
            "use modify() and train, or a magnitude or second-order pruning modifier"
        )
    pruner = MovementPruner(host, names, m.args.get("mask_type", "unstructured"), where, i)
    assert runtime.plan is not None
    prune_steps = [e.step for e in runtime.plan.iter_events(runtime.step_count)
                   if e.modifier == i and e.target == "sparsity"]
    pruner.collect_until = max(prune_steps) if prune_steps else -1
    return pruner
