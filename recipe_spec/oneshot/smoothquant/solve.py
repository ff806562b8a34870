"""SmoothQuant's scales (llm-compressor 0.14, ``modifiers/transform/smoothquant/base.py``),
written once over the array operations of :class:`SmoothingOps`.

For each mapping (a smooth layer, e.g. a norm, and the balance layers it feeds):

1. calibration records each output channel's minimum and maximum of the smooth layer's output
   over every calibration token (:class:`ChannelRange`); the *activation range* is
   ``max - min`` (not ``max |X|``);
2. ``smoothquant``: ``w_j = 2 · max over balance layers and rows of |W[:, j]|`` and
   ``s_j = range_j^alpha / w_j^(1 - alpha)``, or ``range_j`` where ``w_j`` is 0;
   ``log_equalization``: ``s_j = range_j / log2(2 + range_j)``;
3. the scales are floored at ``1e-5`` (:data:`MINIMUM_SMOOTHING_SCALE`);
4. the balance layers' weights are multiplied column-wise (``W · diag(s)``) and the smooth
   layer's weight (a vector, or a matrix's rows) and bias divided by ``s``.

>>> import numpy as np
>>> from recipe_spec.masks.numpy_ops import NUMPY_OPS as ops
>>> before, s = smoothing_scales(ops, np.array([4.0, 0.0], np.float32),
...                              [np.array([[1.0, 0.5]], np.float32)], 0.5)
>>> s.tolist()
[1.4142135381698608, 9.999999747378752e-06]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ...masks.ops import Array
from ...quantization.ops import QuantOps
from ..distributed import joined_extremes

__all__ = ["MINIMUM_SMOOTHING_SCALE", "ALGORITHMS", "SmoothingOps", "ChannelRange", "smoothing_scales",
           "scale_columns", "divide_rows"]

#: The floor of every scale (llm-compressor's ``MINIMUM_SMOOTHING_SCALE``).
MINIMUM_SMOOTHING_SCALE = 1e-5
#: SmoothQuantModifier's ``algorithm`` values.
ALGORITHMS = ("smoothquant", "log_equalization")


class SmoothingOps(QuantOps, Protocol):
    """What smoothing needs besides :class:`~.ops.QuantOps`."""

    def log2(self, x: Array) -> Array:
        """Elementwise base-2 logarithm, in ``x``'s dtype."""

    def reshape(self, x: Array, shape: Sequence[int]) -> Array:
        """``x`` with a new shape."""

    def concat(self, xs: Sequence[Array], axis: int) -> Array:
        """``xs`` joined along ``axis``."""

    def sum(self, x: Array, axis: int) -> Array:
        """The sum along ``axis`` (dropped)."""

    def sqrt(self, x: Array) -> Array:
        """Elementwise square root."""


class ChannelRange:
    """The running per-channel minimum and maximum of a smooth layer's output, fed
    ``[tokens, channels]`` float32 arrays (an observer: ``add(x, sequences)``)."""

    def __init__(self, ops: SmoothingOps):
        self.ops = ops
        self.low: Any = None
        self.high: Any = None
        self.samples = 0

    def add(self, x: Array, sequences: int) -> None:
        """Fold one output into the running minimum and maximum."""
        ops = self.ops
        low, high = ops.reshape(ops.amin(x, 0), (-1,)), ops.reshape(ops.amax(x, 0), (-1,))
        self.low = low if self.low is None else ops.minimum(self.low, low)
        self.high = high if self.high is None else ops.maximum(self.high, high)
        self.samples += sequences

    #: Over several processes the extremes are joined (the one-process values whatever the
    #: order), not relayed.
    relayed = False

    def state(self) -> tuple[list[Array], list[Any]]:
        """The running extremes and the count (:meth:`set_state`)."""
        return [], [self.low, self.high, self.samples]

    def set_state(self, arrays: list[Array], state: list[Any]) -> None:
        """Continue from another range's :meth:`state` (of the same layer)."""
        del arrays
        self.low, self.high, self.samples = state[0], state[1], int(state[2])

    def combine(self, collective: Any) -> None:
        """The range of every process's outputs (``collective``: a
        :class:`~..distributed.Collective`), as llm-compressor's ``all_reduce`` MIN and MAX."""
        self.low, self.high = joined_extremes(self.low, self.high, self.ops, collective)
        self.samples = int(collective.sum_int(self.samples))

    def range(self) -> Array:
        """``max - min`` per channel (llm-compressor's activation scales)."""
        if self.low is None:
            raise ValueError("no activation was observed")
        return self.high - self.low


def smoothing_scales(ops: SmoothingOps, activation_range: Array, balance_weights: Sequence[Array],
                     alpha: float, algorithm: str = "smoothquant") -> tuple[Array, Array]:
    """The scales of one mapping: ``(before the floor, floored)`` (see the module docstring).
    ``balance_weights``: each balance layer's ``(out, in)`` weight."""
    if algorithm == "log_equalization":
        before = activation_range / ops.log2(activation_range + 2.0)
    elif algorithm == "smoothquant":
        columns = [ops.amax(ops.abs(w), 0) for w in balance_weights]
        weight_scales = ops.reshape(ops.amax(ops.concat(columns, 0), 0), (-1,)) * 2.0
        scales = activation_range ** alpha / weight_scales ** (1.0 - alpha)
        before = ops.where(weight_scales > 0.0, scales, activation_range)
    else:
        raise ValueError(f"smoothing algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    return before, ops.maximum(before, MINIMUM_SMOOTHING_SCALE)


def scale_columns(ops: SmoothingOps, weight: Array, scales: Array) -> Array:
    """A balance layer's ``(out, in)`` weight with column ``j`` multiplied by ``scales[j]``."""
    return weight * ops.reshape(scales, (1, -1))


def divide_rows(ops: SmoothingOps, value: Array, scales: Array) -> Array:
    """A smooth layer's weight or bias divided by ``scales``: a vector entry by entry; a
    matrix's last ``len(scales)`` rows row by row (llm-compressor's rule for a Linear smooth
    layer with more outputs than the balance layers have inputs, e.g. a fused qkv)."""
    if len(value.shape) == 1:
        return value / scales
    n = int(scales.shape[0])
    rows = int(value.shape[0])
    column = ops.reshape(scales, (-1, 1))
    if n == rows:
        return value / column
    return ops.concat([value[: rows - n], value[rows - n:] / column], 0)
