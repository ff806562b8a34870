"""The one interface every pruning algorithm implements, and what a backend runtime gives it.

A :class:`Pruner` belongs to one pruning modifier. The runtime calls :meth:`Pruner.collect`
before the events of each optimizer step (a pruner that ranks by gradients takes them there;
one fed by a calibration pass takes each layer's inputs there), then :meth:`Pruner.apply` with
the step's ``sparsity`` events of its modifier. Pruners are registered by the ``scores`` word
of their modifiers' declarations (:data:`recipe_spec.pruning.registry.PRUNERS`), so a modifier
with new scores is one more entry, never a branch in the runtime.

What a pruner reads and writes it asks of a host:

- :class:`MaskHost`: the runtime's masks (hold a parameter under a mask, recompute masks by the
  magnitude policy, release them): enough for magnitude pruning;
- :class:`WeightHost`: the weights and masks as arrays of the backend in canonical layout,
  written back as new arrays (a functional backend, such as JAX, returns new arrays into its
  train state), and the current gradients: what gradient- and Hessian-based pruners use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..masks.ops import Array
from ..recipe.findings import Finding
from ..recipe.model import Modifier
from ..schedule.events import Event
from ..schedule.plan import Plan

__all__ = ["Pruner", "MaskHost", "WeightHost", "PrunerContext", "TargetPruner"]


class MaskHost(Protocol):
    """The runtime's masks, as magnitude pruning uses them."""

    def hold(self, name: str, owner: int) -> Any:
        """The mask entry of parameter ``name``, held for modifier number ``owner`` (all True
        when it had none)."""

    def update_masks(self, entries: list[Any], sparsity: float, mask_type: Any, global_sparsity: bool,
                     step: int) -> None:
        """Recompute the masks of ``entries`` by magnitude (:func:`~.magnitude.update_masks`)."""

    def release(self, names: Iterable[str]) -> None:
        """Stop enforcing the masks of ``names``."""

    def released_at(self, owner: int, name: str, step: int) -> tuple[bool, bool]:
        """Whether modifier ``owner`` released ``name`` at ``step`` itself (its final target
        still prunes once), and whether it released it at all (``leave_enabled: false``)."""


class WeightHost(Protocol):
    """Weights, masks and gradients in canonical layout (the torch order of axes)."""

    ops: Any

    def read(self, names: Sequence[str]) -> tuple[list[Array], list[Array]]:
        """The weights and their masks (True = kept; all True where none is held yet)."""

    def write(self, names: Sequence[str], weights: Sequence[Array], masks: Sequence[Array], owner: int) -> None:
        """Set the weights and hold the masks (for modifier number ``owner``)."""

    def gradients(self, names: Sequence[str]) -> list[Array] | None:
        """The current gradients (None when one of them has none)."""

    def has(self, name: str) -> bool:
        """Whether the model has the parameter now (False while a ``LayerPruningModifier``
        has removed its layer)."""


class Pruner(Protocol):
    """One pruning modifier's algorithm.

    ``whole_step``: the modifier's ``sparsity`` events of one step are applied together, as one
    pruning step (gradient- and Hessian-based pruners); else one event at a time, in the
    plan's order (magnitude). ``samples``: it can draw gradients from a grad sampler.
    ``stateful``: :meth:`state` holds something a resumed run needs."""

    index: int
    whole_step: bool
    samples: bool
    stateful: bool

    def collect(self, step: int) -> None:
        """Before optimizer step ``step``'s events: take what the step offers (gradients)."""

    def apply(self, events: Sequence[Event]) -> None:
        """Prune for ``events``, the step's ``sparsity`` events of this pruner's modifier."""

    def state(self) -> dict[str, Any]:
        """What continuing exactly needs (saved with the runtime's state)."""

    def load(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state`."""


@dataclass
class PrunerContext:
    """Everything a pruner is built from (:data:`~.registry.PRUNERS`).

    ``names``: the parameters the modifier's ``params`` select; ``names_for(index, selector)``
    resolves an event's own selector. ``weights()``: the backend's :class:`WeightHost` (made on
    first use, shared by the runtime's pruners). ``shapes``: each parameter's canonical shape.
    ``problems``: findings a pruner reports instead of being built (raised together, located).
    """

    index: int
    modifier: Modifier
    names: list[str]
    where: str
    plan: Plan
    step: int
    oneshot: bool
    grad_sampler: Any
    masks: MaskHost
    weights: Callable[[], Any]
    names_for: Callable[[int, Any], list[str]]
    shapes: Callable[[], dict[str, tuple[int, ...]]]
    problems: list[Finding] = field(default_factory=list)

    def prune_steps(self) -> list[int]:
        """The steps, from the runtime's current one, of this modifier's ``sparsity`` events."""
        return sorted({e.step for e in self.plan.iter_events(self.step)
                       if e.modifier == self.index and e.target == "sparsity"})


class TargetPruner:
    """For pruners that prune every parameter of their modifier at once to a target each
    (``prune(targets)``, one per name): the step's events as targets, a parameter an event
    does not name keeping its previous target."""

    index: int
    names: list[str]
    last_targets: list[float] | None
    names_for: Callable[[int, Any], list[str]]
    whole_step = True
    stateful = True

    def apply(self, events: Sequence[Event]) -> None:
        targets: dict[str, float] = {}
        for event in events:
            for name in self.names_for(self.index, event.params):
                targets[name] = float(event.value)
        last = dict(zip(self.names, self.last_targets or [0.0] * len(self.names), strict=True))
        self.prune([targets.get(n, last[n]) for n in self.names])

    def prune(self, targets: Sequence[float]) -> Any:
        raise NotImplementedError
