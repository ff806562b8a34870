"""The gradients M-FAC ranks with during training: the last ``m`` gradients taken before
optimizer steps, each restricted to the weights unpruned now (SparseML's ring buffer).

SparseML emptied its buffer at every mask update, so a pruning step saw only the gradients
taken since the previous one and failed when ``num_grads`` was larger (or when a
``num_grads`` table asked for more after an update). Here the window slides over mask
updates: the rows kept are compacted to the weights that remain and refilled from slot 0, so
wherever SparseML ran the rows and their order are the same as its buffer's; where it failed
the window holds the last ``m`` gradients, the older ones taken before the previous update.

>>> import numpy as np
>>> from recipe_spec.masks.numpy_ops import NUMPY_OPS
>>> w = GradientWindow(NUMPY_OPS, np.arange(3), capacity=2, like=np.zeros(1))
>>> for t in range(3):
...     w.add(np.array([t, t, t], dtype=float))
>>> w.count, w.matrix()[:, 0].tolist()  # ring order: slot 0 was overwritten by the third
(2, [2.0, 1.0])
>>> w.restrict(np.array([True, False, True]), capacity=2)  # after a mask update
>>> w.matrix().tolist()  # oldest first, the next one overwrites slot 0
[[1.0, 1.0], [2.0, 2.0]]
"""

from __future__ import annotations

from typing import Any

from ...masks.ops import Array
from .ops import FisherOps

__all__ = ["GradientWindow"]


class GradientWindow:
    """``capacity`` gradient rows over the coordinates ``keep`` (flat positions into the
    concatenation of the modifier's parameters), on ``like``'s dtype and device (``grads_device``).
    ``keep`` indexes the gradients where the weights are; each row, and the columns kept after
    a mask update, are moved to the window's device before they meet its rows."""

    def __init__(self, ops: FisherOps, keep: Array, capacity: int, like: Array):
        self.ops = ops
        self.keep = keep
        self.capacity = int(capacity)
        self.like = like
        self.slots: list[Array | None] = [None] * self.capacity
        self.next = 0  # the slot the next gradient goes to
        self.count = 0  # filled slots

    def add(self, flat_grad: Array) -> None:
        """Add one gradient (the concatenation of the parameters' flat gradients)."""
        row = self.ops.cast(self.ops.take(flat_grad, self.keep), self.like)
        self.slots[self.next] = row
        self.next = (self.next + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

    def matrix(self) -> Array:
        """The rows in slot order (``count x kept``)."""
        return self.ops.stack([s for s in self.slots if s is not None], 0)

    def chronological(self) -> list[Array]:
        """The rows oldest first."""
        if self.count < self.capacity:
            return [s for s in self.slots[: self.count] if s is not None]
        order = self.slots[self.next:] + self.slots[: self.next]
        return [s for s in order if s is not None]

    def restrict(self, kept: Array, capacity: int, keep: Any = None) -> None:
        """After a mask update: keep the columns where ``kept`` (over the current columns) is
        True, the newest ``capacity`` rows oldest first; the next gradient goes to slot 0
        when the window is full, else after the rows kept. ``keep``: the new flat positions."""
        kept = self.ops.to_device(kept, self.ops.device_of(self.like))  # the mask lives with the weights
        rows = [self.ops.compress(r, kept) for r in self.chronological()][-capacity:] if capacity else []
        self.capacity = int(capacity)
        self.slots = [*rows, *([None] * (self.capacity - len(rows)))]
        self.count = len(rows)
        self.next = self.count % self.capacity if self.capacity else 0
        if keep is not None:
            self.keep = keep
