"""Optimizer steps and epochs.

Optimizer step ``k`` (0-based) happens at epoch ``e_k = k / steps_per_epoch``; the modifier
updates for step ``k`` are applied just before it, using ``e_k``. A modifier's start, end and
update points happen at the first step with ``e_k >= t``.

Epochs written in a recipe are decimals (``0.1`` means one tenth, not the binary float
nearest to it), so step arithmetic is done on exact fractions of the written decimals: no
update is lost or doubled by rounding, whatever ``steps_per_epoch`` is.

>>> [first_step_at(t, 4) for t in (0, 0.25, 0.3, 1.5, 6.5)]
[0, 1, 2, 6, 26]
>>> epoch_of_step(11, 7)
1.5714285714285714
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

__all__ = ["exact", "epoch_of_step", "first_step_at", "grid_step", "next_grid_step"]


@lru_cache(maxsize=4096)
def exact(value: float) -> Fraction:
    """The decimal a recipe number stands for, as an exact fraction (``0.1`` -> ``1/10``).

    A Fraction (an exact step epoch ``Fraction(k, S)``) is returned as it is.
    """
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    return Fraction(repr(float(value)))


def epoch_of_step(step: int, steps_per_epoch: int) -> float:
    """The epoch of optimizer step ``step`` as a float: ``k / steps_per_epoch``.

    Computed as ``k // S + (k % S) / S``, the float SparseML used, so values that depend on
    it (interpolated sparsity, learning rates) are bit-identical to SparseML's.
    """
    return step // steps_per_epoch + (step % steps_per_epoch) / steps_per_epoch


def first_step_at(epoch: float, steps_per_epoch: int) -> int:
    """The first optimizer step whose epoch is at or after ``epoch`` (``-1``: step 0)."""
    if epoch == -1 or epoch <= 0:
        return 0
    return math.ceil(exact(epoch) * steps_per_epoch)


def grid_step(start: float, frequency: float, n: int, steps_per_epoch: int) -> int:
    """The step of the ``n``-th point ``start + n * frequency`` of an update grid."""
    origin = exact(max(start, 0) if start != -1 else 0)
    return math.ceil((origin + n * exact(frequency)) * steps_per_epoch)


def next_grid_step(start: float, frequency: float, step: int, steps_per_epoch: int) -> int:
    """The first grid step at or after ``step`` (grid points ``start + n * frequency``).

    >>> [next_grid_step(0, 0.5, k, 5) for k in (0, 1, 3, 4, 6)]
    [0, 3, 3, 5, 8]
    """
    a, b, d = _grid(start, frequency)
    # smallest n >= 0 with ceil((a + n b) S / d) >= step  <=>  (a + n b) S > (step - 1) d
    n = max(((step - 1) * d - a * steps_per_epoch) // (b * steps_per_epoch) + 1, 0)
    return -((-(a + n * b) * steps_per_epoch) // d)


@lru_cache(maxsize=4096)
def _grid(start: float, frequency: float) -> tuple[int, int, int]:
    """A grid's origin and spacing as integers over one denominator: ``(a, b, d)``, the
    points being ``(a + n b) / d`` epochs (integer arithmetic on every step of a preview)."""
    origin = exact(max(start, 0) if start != -1 else 0)
    freq = exact(frequency)
    d = math.lcm(origin.denominator, freq.denominator)
    return origin.numerator * (d // origin.denominator), freq.numerator * (d // freq.denominator), d
