"""The calibration statistics of the one-shot solvers, accumulated one forward call at a time.

Both are llm-compressor's running means (``sgpt_sparsify.accumulate_hessian``,
``wanda_sparsify.accumulate_row_scalars``), in float32, with the same operations in the same
order, so they give its bits on PyTorch. ``n`` counts **sequences**, not tokens: an input of
shape ``[b, t, in]`` adds ``b`` (``[t, in]``: 1).

- :class:`HessianStats` (SparseGPT): ``H *= n/(n+b); n += b; Xf = sqrt(2/n)·Xᵀ; H += Xf·Xfᵀ``,
  so that ``H = (2/n)·Σ XᵀX`` over every token of every call.
- :class:`GPTQHessianStats` (GPTQ, ``GPTQModifier.calibrate_module``): a plain sum,
  ``n += b; Xf = sqrt(2)·Xᵀ; H += Xf·Xfᵀ``, divided by ``n`` when read: the same ``(2/n)·Σ XᵀX``
  with other rounding, llm-compressor's bits for GPTQ;
- :class:`WandaStats` (Wanda): ``S *= n/(n+b); n += b; S += ‖Xᵀⱼ‖² / n``, so that ``Sⱼ`` is
  the mean over sequences of the sum over tokens of ``xⱼ²``.

A convolution's caller passes its unfolded patches, ``[b, patches, in_channels·kh·kw]``.

>>> import numpy as np
>>> from recipe_spec.masks.numpy_ops import NUMPY_OPS
>>> stats = HessianStats(NUMPY_OPS, 2, np.zeros(1, dtype=np.float32))
>>> stats.add(np.ones((2, 4, 2), dtype=np.float32))
>>> stats.samples, stats.hessian.tolist()
(2, [[8.0, 8.0], [8.0, 8.0]])
"""

from __future__ import annotations

import math
from typing import Any

from ...masks.ops import Array
from ...pruning.second_order.ops import SolverOps

__all__ = ["GPTQHessianStats", "HessianStats", "WandaStats"]


class _RunningStats:
    """The shared part: the ops, the column count, the sequence count and input checks."""

    def __init__(self, ops: SolverOps, columns: int, shape: tuple[int, ...], like: Array) -> None:
        if int(columns) < 1:
            raise ValueError(f"a calibration statistic needs at least one input column, got {columns}")
        self._ops = ops
        self.columns = int(columns)
        self.samples = 0
        self._value = ops.astype(ops.zeros(shape, like), "float32")

    def _flat_inputs(self, x: Array, sequences: int | None) -> tuple[Array, int]:
        """``x`` as ``[in, tokens]`` (a transposed view, as llm-compressor's ``inp.t()``) in
        float32 on the statistic's device, and the number of sequences it adds."""
        shape = tuple(x.shape)
        if len(shape) < 2 or shape[-1] != self.columns:
            raise ValueError(
                f"a calibration input of shape {list(shape)} does not fit a layer with "
                f"{self.columns} input columns: expected [batch, tokens, {self.columns}] "
                f"or [tokens, {self.columns}]")
        added = (shape[0] if len(shape) >= 3 else 1) if sequences is None else int(sequences)
        if added < 1:
            raise ValueError(f"a calibration input must add at least one sequence, got {added}")
        ops = self._ops
        flat = ops.permute_view(ops.reshape(x, (-1, self.columns)), (1, 0))
        return ops.cast(flat, self._value), added

    #: Whether the value is a mean over the sequences so far (else their sum).
    _mean = True

    def combine(self, sum_all: Any, sum_int: Any) -> None:
        """Make this the statistic of every process's inputs (:mod:`..distributed`):
        ``sum_all`` sums an array over the processes, ``sum_int`` an int. A mean is weighted
        by each process's sequence count."""
        total = int(sum_int(self.samples))
        if total == 0:
            return
        value = self._value * (self.samples / total) if self._mean else self._value
        self._value = sum_all(value)
        self.samples = total

    def _decay(self, added: int) -> float:
        """The factor the mean so far is scaled by, after which ``samples`` counts ``added``."""
        factor = self.samples / (self.samples + added)
        self.samples += added
        return factor


class HessianStats(_RunningStats):
    """SparseGPT's Hessian ``H = (2/n)·Σ XᵀX`` of one layer's inputs (``columns x columns``,
    float32, on ``like``'s device), as llm-compressor accumulates it."""

    def __init__(self, ops: SolverOps, columns: int, like: Array) -> None:
        super().__init__(ops, columns, (int(columns), int(columns)), like)

    @property
    def hessian(self) -> Array:
        """The Hessian so far (all zeros before the first :meth:`add`); not a copy."""
        return self._value

    def add(self, x: Array, sequences: int | None = None) -> None:
        """Add one forward call's input ``x`` (``[b, t, in]`` or ``[t, in]``); ``sequences``
        overrides the count it adds (default ``b``, or 1 for a 2-D input)."""
        flat, added = self._flat_inputs(x, sequences)
        ops = self._ops
        factor = self._decay(added)
        flat = flat * math.sqrt(2 / self.samples)
        self._value = ops.scale_add(self._value, factor, ops.matmul(flat, ops.permute_view(flat, (1, 0))))


class GPTQHessianStats(_RunningStats):
    """GPTQ's Hessian ``H = (2/n)·Σ XᵀX`` of one layer's inputs, as llm-compressor's
    ``GPTQModifier`` accumulates it: a float32 sum of ``(sqrt(2)·Xᵀ)(sqrt(2)·Xᵀ)ᵀ``, divided by
    the sequence count when read (``prepare_batch``)."""

    _mean = False

    def __init__(self, ops: SolverOps, columns: int, like: Array) -> None:
        super().__init__(ops, columns, (int(columns), int(columns)), like)

    @property
    def hessian(self) -> Array:
        """``H / n``, a new array (all zeros before the first :meth:`add`)."""
        return self._value / max(self.samples, 1)

    def add(self, x: Array, sequences: int | None = None) -> None:
        """Add one forward call's input ``x`` (``[b, t, in]`` or ``[t, in]``); ``sequences``
        overrides the count it adds (default ``b``, or 1 for a 2-D input)."""
        flat, added = self._flat_inputs(x, sequences)
        self.samples += added
        flat = flat * math.sqrt(2)
        prod = self._ops.matmul(flat, self._ops.permute_view(flat, (1, 0)))
        self._value = self._ops.scale_add(self._value, 1.0, prod)


class WandaStats(_RunningStats):
    """Wanda's row scalars ``Sⱼ`` (one per input column, float32, on ``like``'s device): the
    mean over sequences of ``Σ_tokens xⱼ²``, as llm-compressor accumulates them."""

    def __init__(self, ops: SolverOps, columns: int, like: Array) -> None:
        super().__init__(ops, columns, (int(columns),), like)

    @property
    def row_scalars(self) -> Array:
        """The row scalars so far (all zeros before the first :meth:`add`); not a copy."""
        return self._value

    def add(self, x: Array, sequences: int | None = None) -> None:
        """Add one forward call's input ``x`` (``[b, t, in]`` or ``[t, in]``); ``sequences``
        overrides the count it adds (default ``b``, or 1 for a 2-D input)."""
        flat, added = self._flat_inputs(x, sequences)
        ops = self._ops
        factor = self._decay(added)
        norms = ops.row_norms(flat)
        self._value = ops.scale_add(self._value, factor, norms ** 2 / self.samples)
