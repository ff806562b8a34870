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

__all__ = ["GPTQHessianStats", "HessianStats", "WandaStats", "SharedInput"]


class SharedInput:
    """The products computed from the last layer input seen in a forward pass, for the
    statistics of the next layers fed the same input (q/k/v share the attention's input,
    gate/up the MLP's): each product is computed once per input and added to each layer's own
    statistic, so each Hessian gets the bits it gets alone, for a third (or half) of the
    matrix products. An input is the same when the ops say so (:meth:`~.SolverOps.same_values`:
    the same memory, unchanged); the last one is held, so its memory is not reused meanwhile.

    >>> import numpy as np
    >>> from recipe_spec.masks.numpy_ops import NUMPY_OPS
    >>> shared, x = SharedInput(NUMPY_OPS), np.ones((1, 3, 2), dtype=np.float32)
    >>> q, k = (GPTQHessianStats(NUMPY_OPS, 2, x) for _ in range(2))
    >>> q.add(x, shared=shared); k.add(x, shared=shared); shared.computed
    1
    >>> bool((q.hessian == k.hessian).all())
    True
    """

    def __init__(self, ops: SolverOps) -> None:
        self._ops = ops
        self._last: Any = None
        self._products: dict[tuple[Any, ...], Array] = {}
        #: How many products were computed (a shared one counts once).
        self.computed = 0

    def product(self, x: Array, key: tuple[Any, ...], compute: Any) -> Array:
        """``compute()`` for input ``x``, or the product already computed for the same input
        and ``key`` (everything else the product depends on)."""
        if self._last is None or not self._ops.same_values(self._last, x):
            self._last, self._products = x, {}
        found = self._products.get(key)
        if found is None:
            found = self._products[key] = compute()
            self.computed += 1
        return found


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

    def combine(self, collective: Any) -> None:
        """Make this the statistic of every process's inputs (``collective``: a
        :class:`~..distributed.Collective`): summed over the processes, a mean weighted by each
        process's sequence count."""
        total = int(collective.sum_int(self.samples))
        if total == 0:
            return
        value = self._value * (self.samples / total) if self._mean else self._value
        self._value = collective.sum(value)
        self.samples = total

    def state(self) -> tuple[list[Array], list[int]]:
        """The accumulator's whole state: its arrays and its counts (:meth:`set_state`)."""
        return [self._value], [self.samples]

    def set_state(self, arrays: list[Array], counts: list[int]) -> None:
        """Continue from another accumulator's :meth:`state` (of the same layer): the next
        :meth:`add` gives what it would give there, bit for bit."""
        self._value, self.samples = arrays[0], int(counts[0])

    def _decay(self, added: int) -> float:
        """The factor the mean so far is scaled by, after which ``samples`` counts ``added``."""
        factor = self.samples / (self.samples + added)
        self.samples += added
        return factor


class HessianStats(_RunningStats):
    """SparseGPT's Hessian ``H = (2/n)·Σ XᵀX`` of one layer's inputs (``columns x columns``,
    float32, on ``like``'s device), as llm-compressor accumulates it."""

    #: Its :meth:`add` takes a :class:`SharedInput`.
    shares_input = True

    def __init__(self, ops: SolverOps, columns: int, like: Array) -> None:
        super().__init__(ops, columns, (int(columns), int(columns)), like)

    @property
    def hessian(self) -> Array:
        """The Hessian so far (all zeros before the first :meth:`add`); not a copy where the ops'
        products are whole (:meth:`~.SolverOps.gram_matrix`)."""
        return self._ops.gram_matrix(self._value)

    def add(self, x: Array, sequences: int | None = None, shared: SharedInput | None = None) -> None:
        """Add one forward call's input ``x`` (``[b, t, in]`` or ``[t, in]``); ``sequences``
        overrides the count it adds (default ``b``, or 1 for a 2-D input); ``shared``: the
        product shared with the other layers fed ``x``."""
        flat, added = self._flat_inputs(x, sequences)
        ops = self._ops
        factor = self._decay(added)
        scale = math.sqrt(2 / self.samples)

        def product() -> Array:
            return ops.gram(flat * scale)

        prod = product() if shared is None else shared.product(x, ("sparsegpt", self.columns, scale), product)
        self._value = ops.scale_add(self._value, factor, prod)


class GPTQHessianStats(_RunningStats):
    """GPTQ's Hessian ``H = (2/n)·Σ XᵀX`` of one layer's inputs, as llm-compressor's
    ``GPTQModifier`` accumulates it: a float32 sum of ``(sqrt(2)·Xᵀ)(sqrt(2)·Xᵀ)ᵀ``, divided by
    the sequence count when read (``prepare_batch``)."""

    _mean = False

    #: Its :meth:`add` takes a :class:`SharedInput`.
    shares_input = True

    def __init__(self, ops: SolverOps, columns: int, like: Array) -> None:
        super().__init__(ops, columns, (int(columns), int(columns)), like)

    @property
    def hessian(self) -> Array:
        """``H / n``, a new array (all zeros before the first :meth:`add`)."""
        return self._ops.gram_matrix(self._value) / max(self.samples, 1)

    def add(self, x: Array, sequences: int | None = None, shared: SharedInput | None = None) -> None:
        """Add one forward call's input ``x`` (``[b, t, in]`` or ``[t, in]``); ``sequences``
        overrides the count it adds (default ``b``, or 1 for a 2-D input); ``shared``: the
        product shared with the other layers fed ``x``."""
        flat, added = self._flat_inputs(x, sequences)
        self.samples += added
        ops = self._ops

        def product() -> Array:
            return ops.gram(flat * math.sqrt(2))

        prod = product() if shared is None else shared.product(x, ("gptq", self.columns), product)
        self._value = ops.scale_add(self._value, 1.0, prod)


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
