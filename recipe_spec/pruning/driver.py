"""The pruners of a recipe on one runtime: one per modifier whose declaration names its
``scores`` (:data:`~.registry.PRUNERS`), what each step offers handed to them before the step's
events (:meth:`PrunerSet.collect`), and each modifier's ``sparsity`` events applied by its
pruner (:meth:`PrunerSet.apply`).

The runtime hands in what the pruners need (the plan, the parameters a selector names, the
hosts); nothing here knows the runtime's class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..diagnostics.base import RecipeError
from ..modifiers import spec
from ..recipe.findings import positioned
from ..recipe.model import Recipe
from ..schedule.events import Event
from ..schedule.plan import Plan
from .base import MaskHost, Pruner, PrunerContext
from .registry import PRUNERS

__all__ = ["PrunerSet", "pruned_names"]


def pruned_names(index: int, m: Any, names_for: Callable[[int, Any], list[str]]) -> list[str]:
    """Every parameter modifier ``m`` prunes: its ``params`` and, when ``final_sparsity`` maps
    sparsities to selectors (``params: []``), each group's, in order and once each, selected
    as the plan's events select them (a group's list is a tuple there)."""
    names = list(names_for(index, m.args.get("params")))
    final = m.args.get("final_sparsity")
    if isinstance(final, Mapping):
        for selectors in final.values():
            names += names_for(index, tuple(selectors) if isinstance(selectors, list) else selectors)
    return list(dict.fromkeys(names))


class PrunerSet:
    """Every pruner of a recipe's modifiers, by modifier index."""

    def __init__(self, pruners: dict[int, Pruner]):
        self.pruners = pruners

    @classmethod
    def attach(cls, recipe: Recipe, plan: Plan, step: int, framework: str, masks: MaskHost,
               weight_host: Callable[[], Any], names_for: Callable[[int, Any], list[str]],
               shapes: Callable[[], dict[str, tuple[int, ...]]], grad_sampler: Any = None,
               oneshot: bool = False) -> PrunerSet:
        """Make the pruner of each pruning modifier of ``recipe``. Raises :class:`RecipeError`
        with every located problem a pruner found (M012 ...), ``ValueError`` for a grad sampler
        no pruner uses, ``NotImplementedError`` for scores no pruner is registered for."""
        host: list[Any] = []

        def weights() -> Any:  # one backend host, made when a pruner first needs it
            if not host:
                host.append(weight_host())
            return host[0]

        pruners: dict[int, Pruner] = {}
        problems = []
        for i, m in enumerate(recipe.modifiers):
            declared = spec(m.type)
            if declared is None or declared.scores is None:
                continue
            make = PRUNERS.get(declared.scores)
            if make is None:
                raise NotImplementedError(
                    f"{m.type} (line {m.span.line}) ranks weights by {declared.scores} scores, which "
                    f"the {framework} backend does not implement"
                )
            ctx = PrunerContext(
                i, m, pruned_names(i, m, names_for), f"{recipe.path or '<recipe>'}:{m.span.line}: {m.type}",
                plan, step, oneshot, grad_sampler, masks, weights, names_for, shapes,
            )
            pruners[i] = make(ctx)
            problems += [positioned(f, recipe) for f in ctx.problems]
        if grad_sampler is not None and not any(p.samples for p in pruners.values()):
            raise ValueError("grad_sampler is for M-FAC and OBS pruning modifiers; this recipe has none")
        if problems:
            raise RecipeError(problems)
        return cls(pruners)

    @property
    def gradient(self) -> dict[int, Pruner]:
        """The pruners that take each step's gradients (``whole_step``), by modifier index."""
        return {i: p for i, p in self.pruners.items() if p.whole_step}

    def whole_step(self, modifier: int) -> bool:
        """Whether modifier ``modifier``'s sparsity events of a step are applied together."""
        pruner = self.pruners.get(modifier)
        return pruner is not None and pruner.whole_step

    def collect(self, step: int) -> None:
        """Before optimizer step ``step``'s events: every pruner takes what the step offers."""
        for pruner in self.pruners.values():
            pruner.collect(step)

    def apply(self, modifier: int, events: Sequence[Event]) -> None:
        """Modifier ``modifier``'s ``sparsity`` events of one step, by its pruner."""
        pruner = self.pruners.get(modifier)
        if pruner is None:
            raise NotImplementedError(f"no pruner runs the sparsity events of modifier {modifier}")
        pruner.apply(events)

    def state(self) -> dict[str, Any]:
        return {str(i): p.state() for i, p in self.pruners.items() if p.stateful}

    def load(self, state: dict[str, Any]) -> None:
        for i, saved in state.items():
            pruner = self.pruners.get(int(i))
            if pruner is not None and pruner.stateful:
                pruner.load(saved)
