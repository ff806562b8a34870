"""GPTQ's one-shot solver (Frantar et al. 2022), written once over :class:`~.ops.SolverOps`:
llm-compressor 0.14's ``quantize_weight``, step for step, in float32. It is SparseGPT's
block-wise OBS update (:func:`~.blockwise.blockwise_obs`) with a quantizer in place of the
mask: each column's target is the column on the grid of :mod:`recipe_spec.quantization`.

Given a layer's weight ``W`` (``rows x columns``, canonical ``(out, in)``) and its Hessian
``H = (2/n)·Σ XᵀX`` (:class:`~.hessian.GPTQHessianStats`):

1. the scale and zero point come once from the **original** weight (the memoryless min-max
   observer, per tensor, row or group) and stay fixed while GPTQ updates the weight; given
   ``scale`` / ``zero_point`` are used as they are;
2. activation order (``actorder`` ``"static"`` = ``"weight"``): ``perm`` sorts the columns by
   ``diag(H)`` descending (the undampened ``H``; ties keep column order), ``W``'s columns and
   ``H``'s rows and columns are permuted, and each column keeps its original group's scale
   (``g_idx = (arange(cols) // group_size)[perm]``); ``"group"`` (group strategy only, else it
   is ignored, as llm-compressor does) takes the qparams of the *permuted* weight's groups
   instead and returns ``g_idx``, each original column's group;
3. dead columns, dampening and the inverse Hessian's factor as SparseGPT's
   (:func:`~.blockwise.inverse_hessian_factor`): where llm-compressor silently falls back to
   round-to-nearest (a Cholesky failure replaced by the identity), this solver retries with
   ten times the dampening and says so in :attr:`QuantizeResult.report`;
4. column by column ``q = fake_quantize(w, scale[:, g], zero_point[:, g])``,
   ``err = (w - q) / Hinv1[i, i]``, ``W1[:, i:] -= err ⊗ Hinv1[i, i:]``; after each block
   ``W[:, i2:] -= Err1 · Hinv[i1:i2, i2:]``; ``loss = Σ err² / 2``; the columns are put back
   in their order. The weight returned is the dequantized values: on the grid.

>>> import numpy as np
>>> from recipe_spec.masks.numpy_ops import NUMPY_OPS
>>> from recipe_spec.quantization import QuantArgs
>>> w = np.array([[1.0, -0.3, 0.52, 2.0]], dtype=np.float32)
>>> r = gptq_quantize(NUMPY_OPS, w, np.eye(4, dtype=np.float32), args=QuantArgs(num_bits=2, strategy="channel"))
>>> r.weight.tolist(), float(r.scale[0, 0])
([[1.3333333730697632, -0.0, 0.0, 1.3333333730697632]], 1.3333333730697632)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

from ...masks.ops import Array
from ...pruning.second_order.ops import SolverOps
from ...quantization.args import QuantArgs
from ...quantization.grid import check_weight_shape, fake_quantize, minmax_qparams, weight_global_scale
from ..shared.obs import (
    DAMPENING_RETRIES,
    HessianFactor,
    SolverError,
    blockwise_obs,
    check_factor,
    check_finite,
    check_hessian_shape,
    factor_hessian,
    is_real,
    zero_dead_columns,
)

__all__ = ["ACTORDERS", "QuantizeResult", "gptq_quantize"]

#: The activation orders: none, by the Hessian's diagonal keeping each column's group
#: (``"static"`` is compressed-tensors' alias of ``"weight"``), or with groups of the
#: permuted weight (``"group"``).
ACTORDERS = (None, "static", "weight", "group")


@dataclass(frozen=True)
class QuantizeResult:
    """What GPTQ made of one layer.

    ``weight``: the new weight on the grid (dequantized), in the given weight's dtype and
    layout; ``scale``, ``zero_point``: the qparams it is on (compressed-tensors' shapes:
    ``(1,)``, ``(rows, 1)``, ``(rows, groups)``; the zero point whole-valued, in the scale's
    float dtype); ``g_idx``: each input column's group, only for ``actorder="group"`` (None
    otherwise); ``loss``: ``Σ err²/2``; ``dampening_frac``: the dampening the Hessian was
    factorised with; ``dead_columns``: input columns whose Hessian diagonal was zero;
    ``report``: what the solver had to do beyond the request, None when nothing."""

    weight: Array
    scale: Array
    zero_point: Array
    loss: float
    dampening_frac: float
    g_idx: tuple[int, ...] | None = None
    dead_columns: int = 0
    report: str | None = None

    @property
    def fallback(self) -> bool:
        """Whether the solver had to depart from the requested settings (see ``report``)."""
        return self.report is not None


class _GridRule:
    """GPTQ's :class:`~.blockwise.ColumnRule`: ``q`` is the column on the grid of its group."""

    def __init__(self, ops: SolverOps, args: QuantArgs, scale: Array, zero_point: Array,
                 groups: Sequence[int], mask: Array | None = None, global_scale: Array | None = None) -> None:
        self._ops, self._args, self._groups, self._mask, self._global = ops, args, groups, mask, global_scale
        if args.strategy == "tensor":
            self._scales, self._zeros = [scale], [zero_point]
        else:
            width = int(scale.shape[1])
            self._scales = [scale[:, g] for g in range(width)]
            self._zeros = [zero_point[:, g] for g in range(width)]
        self._i1 = 0

    def start_block(self, W1: Array, Hinv1: Array, i1: int) -> None:
        self._i1 = i1

    def column(self, T1: Array, i: int) -> Array:
        g = self._groups[self._i1 + i]
        q = fake_quantize(self._ops, T1[i], self._scales[g], self._zeros[g], self._args, self._global)
        return q if self._mask is None else self._ops.where(self._mask[:, self._i1 + i], q, 0.0)

    def block_update(self, update: Array, i2: int) -> Array:
        return update


def gptq_quantize(ops: SolverOps, weight: Array, hessian: Array | None, *, args: QuantArgs, block_size: int = 128,
                  dampening_frac: float = 0.01, actorder: str | None = None, scale: Array | None = None,
                  zero_point: Array | None = None, g_idx: Sequence[int] | None = None,
                  retries: int = DAMPENING_RETRIES, mask: Array | None = None,
                  factor: HessianFactor | None = None, global_scale: Array | None = None) -> QuantizeResult:
    """Quantize one layer with GPTQ (see the module docstring) and return the updated weight.

    ``weight``: ``(out, in)``; ``hessian``: ``(in, in)``, ``H/n`` (neither is modified);
    ``args``: the weight's grid. ``scale`` / ``zero_point`` (both or neither): qparams to use
    instead of the observer's, in the strategy's shape. ``g_idx``: each input column's group
    (group strategy; default ``column // group_size``), permuted with the columns. ``mask``:
    a bool ``(out, in)`` array; where it is False the quantized value is 0 (0 is on every
    grid), so the zeros of a pruned weight survive and their error is fed to the columns after
    them, as SparseGPT with a fixed mask (recipe-spec's own; llm-compressor has no such
    option). ``factor``: the Hessian's :func:`~.obs.factor_hessian` made ahead with these
    settings (``ordered`` for an activation order; ``hessian`` may then be None).
    ``global_scale``: NVFP4's (``tensor_group``), shape ``(1,)`` (default: the weight's own);
    each column is quantized with ``scale / global_scale``."""
    shape = tuple(int(d) for d in weight.shape)
    check_weight_shape(shape, args)
    rows, cols = shape
    if not isinstance(block_size, numbers.Integral) or isinstance(block_size, bool) or block_size < 1:
        raise ValueError(f"block_size must be a whole number >= 1, got {block_size!r}")
    if not is_real(dampening_frac) or not 0.0 <= float(dampening_frac) < math.inf:
        raise ValueError(f"dampening_frac must be a finite number >= 0, got {dampening_frac!r}")
    if actorder not in ACTORDERS:
        raise ValueError(f"actorder must be one of {', '.join(map(str, ACTORDERS))}, got {actorder!r}")
    check_hessian_shape(hessian, factor, cols)
    if (scale is None) != (zero_point is None):
        raise ValueError("give both scale and zero_point, or neither (the observer computes both)")
    if actorder == "group" and args.strategy not in ("group", "tensor_group"):
        actorder = None  # llm-compressor: group order needs group scales, else none
    groups = _group_index(args, cols, g_idx)

    W = ops.copy(ops.astype(weight, "float32"))
    check_finite(ops, W, "weight")
    if factor is None:
        factor = factor_hessian(ops, hessian, dampening_frac, retries, ordered=actorder is not None, like=W)
    else:
        check_factor(factor, cols, dampening_frac, retries, actorder is not None)
    if args.strategy == "tensor_group" and global_scale is None:
        global_scale = weight_global_scale(ops, weight)
    if args.strategy != "tensor_group":
        global_scale = None
    if scale is None and actorder != "group":
        # the observer reads the weight as the model holds it: a bfloat16 weight gets bfloat16
        # scales (compressed-tensors' calculate_qparams in the weight's dtype), used in float32
        scale, zero_point = minmax_qparams(ops, weight, args, global_scale)

    perm = factor.order
    if perm is not None:
        W = ops.index_select(W, 1, perm)
        if mask is not None:
            mask = ops.index_select(mask, 1, perm)
        order = [int(p) for p in perm]
        if actorder == "group":
            if scale is None:
                scale, zero_point = minmax_qparams(ops, W, args, global_scale)
        else:
            groups = [groups[p] for p in order]
    assert scale is not None and zero_point is not None
    scale, zero_point = ops.cast(scale, W), ops.cast(zero_point, W)

    W = zero_dead_columns(ops, W, factor)
    dead_count, Hinv, used, report = factor.dead_count, factor.Hinv, factor.used, factor.report

    if global_scale is not None:
        global_scale = ops.cast(global_scale, W)
    rule = _GridRule(ops, args, scale, zero_point, groups, mask, global_scale)
    W, loss = blockwise_obs(ops, W, Hinv, block_size, rule)
    out_groups = None
    if perm is not None:
        W = ops.index_select(W, 1, ops.argsort_last(perm))
        if actorder == "group":
            inverse = [0] * cols
            for pos, col in enumerate(order):
                inverse[col] = groups[pos]
            out_groups = tuple(inverse)
    if not _finite(ops, W):
        raise SolverError("GPTQ produced NaN or infinite weights: the Hessian is badly conditioned; "
                          "use a larger dampening_frac or more calibration samples")
    return QuantizeResult(ops.cast(W, weight), scale, zero_point, loss, used, out_groups, dead_count, report)


def _group_index(args: QuantArgs, cols: int, g_idx: Sequence[int] | None) -> list[int]:
    """Each column's group (all 0 for tensor and channel scales)."""
    if args.strategy not in ("group", "tensor_group"):
        if g_idx is not None:
            raise ValueError(f"g_idx needs strategy 'group', not {args.strategy!r}")
        return [0] * cols
    size = int(args.group_size or 1)
    if g_idx is None:
        return [c // size for c in range(cols)]
    out = [int(g) for g in g_idx]
    if len(out) != cols or min(out) < 0 or max(out) >= cols // size:
        raise ValueError(f"g_idx must give each of the {cols} columns a group in 0..{cols // size - 1}")
    return out


def _finite(ops: SolverOps, x: Array) -> bool:
    """Whether every entry of ``x`` is finite."""
    return math.isfinite(ops.sum_all(x)) or not ops.count_nonzero(~ops.isfinite(x))
