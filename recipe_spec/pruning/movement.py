"""Movement pruning (Sanh, Wolf and Rush, 2020; SparseML's ``MovementPruningModifier``),
framework-free over a backend :class:`~recipe_spec.pruning.base.WeightHost`.

SparseML's semantics (``modifier_pruning_movement.py``, ``MovementPruningParamsScorer``):

- every selected parameter has a score ``S``, zero at the start of training;
- before every optimizer step, from the first step of training (not only from
  ``start_epoch``) to the modifier's last pruning step, ``S += -0.01 * grad * w`` with the
  step's masked gradient and the weight before the update; a parameter whose gradient holds a
  NaN, or has none (its layer removed for now by a ``LayerPruningModifier``), is skipped for
  that step;
- at each pruning step of the gradual schedule (GMPruningModifier's), each parameter keeps its
  highest-scoring weights, layer by layer (movement scores of different layers are not
  comparable, so there is no global ranking): ``round(sparsity * n)`` lowest scores pruned,
  ties and grouped mask types as :mod:`recipe_spec.masks` (block means of the scores).

The runtime drives it as it drives the second-order pruners (the same gradients, taken at the
same point of each step): :meth:`MovementPruner.collect` before the step's events,
:meth:`MovementPruner.prune` for the step's sparsity events.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..masks.algorithms import mask_args, mask_for
from ..masks.ops import Array
from .base import PrunerContext, TargetPruner, WeightHost

__all__ = ["MovementPruner", "build", "MOVEMENT_RATE"]

#: SparseML's factor: ``S += -0.01 * grad * w`` per step.
MOVEMENT_RATE = 0.01

class MovementPruner(TargetPruner):
    """The scores and pruning steps of one ``MovementPruningModifier``."""

    sampled = False  # scores come from the training steps' own gradients
    samples = False

    def __init__(self, host: WeightHost, names: Sequence[str], mask_type: Any, where: str, index: int):
        self.host, self.names, self.mask_type, self.where, self.index = host, list(names), mask_type, where, index
        self.scores: list[Array] | None = None
        self.last_targets: list[float] | None = None
        self.collect_until: int | None = None  # the last pruning step: later scores are never used

    def collect(self, step: int) -> None:
        """Add optimizer step ``step``'s movement, ``-0.01 * grad * w``, to the scores."""
        if self.collect_until is not None and step > self.collect_until:
            return
        ops = self.host.ops
        if self.scores is None:
            self.scores = self._zeros(self.host.read(self.names)[0])
        # a parameter whose layer is removed for now has no gradient: skipped, as SparseML does
        present = [(j, name) for j, name in enumerate(self.names) if self.host.has(name)]
        weights, masks = self.host.read([name for _, name in present])
        for (j, name), weight, mask in zip(present, weights, masks, strict=True):
            grads = self.host.gradients([name])
            if grads is None:
                continue
            grad = ops.where(mask, grads[0], 0.0)  # the masked gradient the update sees
            if ops.count_nonzero(ops.isnan(grad)):
                continue
            self.scores[j] = self.scores[j] + grad * weight * -MOVEMENT_RATE

    def prune(self, targets: Sequence[float]) -> None:
        """Keep each parameter's highest-scoring weights: ``targets[j]`` of parameter ``j``'s
        lowest scores pruned."""
        ops = self.host.ops
        weights, masks = self.host.read(self.names)
        if self.scores is None:
            self.scores = self._zeros(weights)
        new_masks = []
        for score, target in zip(self.scores, targets, strict=True):
            # ranks are kept by a shift to non-negative values, exact in float64: the mask rules
            # rank |x| (magnitudes) and average blocks, so equal shifts leave both orders alone
            wide = ops.astype(score, "float64")
            shifted = wide - ops.min_value(wide) if math.prod(wide.shape) else wide
            new_masks.append(mask_for(ops, shifted, mask_args(self.mask_type, float(target))))
        self.host.write(self.names, weights, new_masks, self.index)
        self.last_targets = [float(t) for t in targets]

    def _zeros(self, weights: Sequence[Array]) -> list[Array]:
        return [self.host.ops.zeros(tuple(w.shape), w) for w in weights]

    # -- saving, resuming ----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The scores so far (arrays of the backend, canonical layout) and the last targets."""
        return {"scores": list(self.scores) if self.scores is not None else None, "last_targets": self.last_targets}

    def load(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state`."""
        ops = self.host.ops
        weights, _ = self.host.read(self.names)
        saved = state.get("scores")
        self.scores = None if saved is None else [ops.cast(s, w) for s, w in zip(saved, weights, strict=True)]
        targets = state.get("last_targets")
        self.last_targets = None if targets is None else [float(t) for t in targets]


def build(ctx: PrunerContext) -> MovementPruner:
    """The pruner of a ``MovementPruningModifier`` (``scores="movement"``); refused in one-shot
    ``apply()``, which trains no step to move the weights."""
    if ctx.oneshot:
        raise ValueError(
            f"{ctx.where} ranks weights by how training moves them; one-shot apply() trains no step: "
            "use modify() and train, or a magnitude or second-order pruning modifier"
        )
    pruner = MovementPruner(ctx.weights(), ctx.names, ctx.modifier.args.get("mask_type", "unstructured"),
                            ctx.where, ctx.index)
    pruner.names_for = ctx.names_for
    steps = ctx.prune_steps()
    pruner.collect_until = max(steps) if steps else -1
    return pruner
