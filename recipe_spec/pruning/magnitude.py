"""Magnitude pruning: the one mask-update policy every backend's mask set calls, and the pruner
of the modifiers whose declarations say ``scores="magnitude"`` (gradual, constant and AC/DC
pruning).

The policy (:func:`update_masks`), in this order: every weight finite (else
:class:`NonFiniteWeightsError`, naming the parameter and the step), a global ranking only for
unstructured masks (else ``ValueError``), then one threshold over all the weights together
(global sparsity, more than one parameter) or a mask per parameter (every mask type of
:mod:`recipe_spec.masks.algorithms`). A backend's mask set reads its weights, calls it with its
array operations and layouts, and writes the masks; it holds no copy of these rules.

>>> import numpy as np
>>> from recipe_spec.masks.numpy_ops import NUMPY_OPS
>>> [m.tolist() for m in update_masks(NUMPY_OPS, [np.array([0.3, 0.1, 0.2, 0.4])], 0.5,
...                                   "unstructured", False, ["w"], 0)]
[[True, False, False, True]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..masks.algorithms import all_finite, compute_mask, global_unstructured_masks
from ..masks.layout import Layout
from ..masks.ops import Array, ArrayOps
from ..modifiers import spec
from ..recipe.model import Modifier
from ..schedule.events import Event
from .base import MaskHost, PrunerContext

__all__ = [
    "NonFiniteWeightsError", "update_masks", "global_sparsity_of", "non_finite_message",
    "global_mask_type_message", "MagnitudePruner",
]


class NonFiniteWeightsError(FloatingPointError):
    """A weight holds NaN or infinite values when a mask is computed from it."""


def non_finite_message(name: str, step: int, sparsity: float) -> str:
    return (
        f"parameter '{name}' holds NaN or infinite values at step {step}, when its mask is "
        f"updated to sparsity {sparsity:.4g}: the training diverged (lower the learning rate or "
        "check the loss) before pruning can rank weights"
    )


def global_mask_type_message(mask_type: Any) -> str:
    return (
        f"global sparsity ranks single weights across parameters; mask_type {mask_type!r} "
        "is not supported with it (use unstructured, or a layer-wise pruning modifier)"
    )


def update_masks(ops: ArrayOps, weights: Sequence[Array], sparsity: float, mask_type: Any,
                 global_sparsity: bool, names: Sequence[str], step: int,
                 layouts: Sequence[Layout | None] | None = None) -> list[Array]:
    """The new keep-masks of ``weights`` (parameters ``names``, at optimizer ``step``) for
    ``sparsity`` by magnitude; ``layouts``: where each array keeps its canonical axes (None:
    as stored)."""
    for name, weight in zip(names, weights, strict=True):
        if not all_finite(ops, weight):
            raise NonFiniteWeightsError(non_finite_message(name, step, sparsity))
    if global_sparsity and mask_type not in (None, "unstructured"):
        raise ValueError(global_mask_type_message(mask_type))
    laid = list(layouts) if layouts is not None else [None] * len(weights)
    if global_sparsity and len(weights) > 1:
        return global_unstructured_masks(
            ops, [ops.abs(w) for w in weights], sparsity,
            None if layouts is None else [lay if lay is not None else Layout.identity(tuple(w.shape))
                                          for lay, w in zip(laid, weights, strict=True)],
        )
    return [compute_mask(ops, w, sparsity, mask_type, lay) for w, lay in zip(weights, laid, strict=True)]


def global_sparsity_of(m: Modifier) -> bool:
    """Whether modifier ``m`` ranks its parameters together: always for a global modifier,
    else its ``global_sparsity`` argument or that argument's declared default (AC/DC: true)."""
    declared = spec(m.type)
    if declared is None:
        return bool(m.args.get("global_sparsity", False))
    if declared.global_sparsity:
        return True
    arg = declared.arg("global_sparsity")
    return bool(m.args.get("global_sparsity", arg.default if arg is not None else False))


class MagnitudePruner:
    """The pruner of one magnitude-ranked modifier: each ``sparsity`` event recomputes the
    masks of the parameters it names, one event at a time. A parameter the modifier released
    (``leave_enabled: false``) is pruned no more, except once to its final target at the very
    step it is released (SparseML updates, then ends)."""

    whole_step = False
    samples = False
    stateful = False

    def __init__(self, ctx: PrunerContext):
        self.index, self.masks, self.names_for = ctx.index, ctx.masks, ctx.names_for
        m = ctx.modifier
        self.mask_type = m.args.get("mask_type", "unstructured")
        self.global_sparsity = global_sparsity_of(m)

    def collect(self, step: int) -> None:
        """Nothing: magnitudes are read when the masks change."""

    def apply(self, events: Sequence[Event]) -> None:
        for event in events:
            self._prune(event)

    def _prune(self, event: Event) -> None:
        host: MaskHost = self.masks
        names = self.names_for(self.index, event.params)
        verdicts = {n: host.released_at(self.index, n, event.step) for n in names}
        ending = [n for n in names if verdicts[n][0]]
        if ending:
            self._update([host.hold(n, self.index) for n in ending], event)
            host.release(ending)
        entries = [host.hold(n, self.index) for n in names if not verdicts[n][1]]
        if entries:
            self._update(entries, event)

    def _update(self, entries: list[Any], event: Event) -> None:
        self.masks.update_masks(entries, float(event.value), self.mask_type, self.global_sparsity, event.step)

    def state(self) -> dict[str, Any]:
        return {}

    def load(self, state: dict[str, Any]) -> None:
        """Nothing to restore: the masks are the runtime's."""
