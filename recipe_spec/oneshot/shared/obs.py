"""The block-wise OBS update (:func:`blockwise_obs`), shared by SparseGPT and GPTQ, and
SparseGPT's one-shot solver on it (Frantar & Alistarh 2023, section 3.4), written once over
:class:`~.ops.SolverOps`: llm-compressor's ``sparsify_weight``, step for step, in float32.
The loop takes a per-column rule (:class:`ColumnRule`): SparseGPT's masks here, GPTQ's
quantizer in :mod:`.gptq`.

Given a layer's weight ``W`` (``rows x columns``, canonical ``(out, in)`` layout) and the
Hessian ``H`` of its inputs (:class:`~.hessian.HessianStats`):

1. *dead columns* (``H[j, j] == 0``: the input never moved) get ``H[j, j] = 1`` and
   ``W[:, j] = 0``;
2. ``damp = dampening_frac · mean(diag H)`` is added to the diagonal and
   ``Hinv = cholesky(cholesky_inverse(cholesky(H)), upper=True)``;
3. the columns are taken in blocks of ``block_size``. Unstructured: one mask per block over
   the whole ``rows x block`` tile, ``tmp = W1² / diag(Hinv1)²``, ``thresh`` the
   ``int(numel·sparsity)``-th (0-based) smallest ``tmp``, pruned where ``tmp <= thresh`` (so
   a tile without ties loses one weight more than ``numel·sparsity``, one even at sparsity 0).
   N:M: at each column ``i`` with ``i % M == 0`` the ``N`` smallest
   ``W1[:, i:i+M]² / diag(Hinv1)[i:i+M]²`` of each row, read from the already-updated block,
   are pruned (ties: the lower column);
4. column by column ``q = w`` with the pruned entries zeroed, ``err = (w - q) / Hinv1[i, i]``,
   ``W1[:, i:] -= err ⊗ Hinv1[i, i:]``; after each block
   ``W[:, i2:] -= Err1 · Hinv[i1:i2, i2:]``; ``loss = Σ err² / 2``.

Where llm-compressor silently prunes by magnitude (a Cholesky failure replaced by the
identity), this solver retries with ten times the dampening and says so in
:attr:`PruneResult.report`; when no dampening helps it raises :class:`SolverError`.

>>> import numpy as np
>>> from recipe_spec.masks.numpy_ops import NUMPY_OPS
>>> w = np.array([[1.0, -0.1, 0.5, 2.0]], dtype=np.float32)
>>> r = sparsegpt_prune(NUMPY_OPS, w, np.eye(4, dtype=np.float32), sparsity=0.0, prune_n=2, prune_m=4)
>>> r.mask.tolist(), r.report
([[True, False, False, True]], None)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Protocol

from ...masks.ops import Array
from ...pruning.second_order.ops import SolverOps

__all__ = ["ColumnRule", "PruneResult", "SolverError", "blockwise_obs", "check_prune_args", "sparsegpt_prune",
           "inverse_hessian_factor"]

#: How many times a failed Cholesky factorisation is retried, each with ten times the dampening.
DAMPENING_RETRIES = 3
_ALL = slice(None)


class SolverError(RuntimeError):
    """A one-shot solver cannot run on the weight or the statistics it was given (NaN or inf
    in either, or a Hessian that is not positive definite at any dampening tried)."""


@dataclass(frozen=True)
class PruneResult:
    """What a one-shot solver made of one layer.

    ``weight``: the new weight, in the given weight's dtype and layout; ``mask``: bool, True
    where a weight is kept (False where the solver zeroed it: pruned, or a dead input column);
    ``loss``: SparseGPT's ``Σ err²/2`` (None for Wanda, which does not update weights);
    ``dampening_frac``: the dampening the Hessian was factorised with (None for Wanda);
    ``dead_columns``: input columns whose Hessian diagonal was zero; ``report``: what the
    solver had to do beyond the request (``"cholesky failed at dampening_frac 0.01; used
    0.1"``), None when nothing."""

    weight: Array
    mask: Array
    loss: float | None = None
    dampening_frac: float | None = None
    dead_columns: int = 0
    report: str | None = None

    @property
    def fallback(self) -> bool:
        """Whether the solver had to depart from the requested settings (see ``report``)."""
        return self.report is not None


def check_prune_args(shape: tuple[int, ...], sparsity: float, prune_n: int, prune_m: int) -> None:
    """Refuse a sparsity outside [0, 1), an N:M pattern with ``N > M`` or ``M < 1``, and N:M
    on a weight whose columns ``M`` does not divide; the messages name the argument."""
    if len(shape) != 2:
        raise ValueError(f"a one-shot solver takes a 2-D weight (out, in), got shape {list(shape)}: "
                         "flatten a convolution's kernel to (out, in·kh·kw) first")
    if not is_real(sparsity) or not 0.0 <= float(sparsity) < 1.0:
        raise ValueError(f"sparsity must be a number in [0, 1), got {sparsity!r}")
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0 for v in (prune_n, prune_m)):
        raise ValueError(f"an N:M pattern takes whole numbers N, M >= 0, got {prune_n}:{prune_m}")
    if prune_n == 0:
        return
    if prune_m < 1 or prune_n > prune_m:
        raise ValueError(f"the N:M pattern {prune_n}:{prune_m} prunes N of every M weights, so N must "
                         f"not exceed M: use e.g. 2:4")
    if shape[1] % prune_m:
        raise ValueError(f"the N:M pattern {prune_n}:{prune_m} needs the input columns to be a multiple "
                         f"of {prune_m}; this weight has {shape[1]} (shape {list(shape)}): leave the "
                         "layer out of the modifier's targets or use unstructured sparsity")


def is_real(x: object) -> bool:
    """Whether ``x`` is a real number (a NumPy scalar too), not a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def check_finite(ops: SolverOps, x: Array, what: str) -> None:
    """Refuse NaN or inf in ``x`` (``what`` names it in the message)."""
    if math.isfinite(ops.sum_all(x)):  # one pass; a NaN or inf entry makes any sum non-finite
        return
    bad = ops.count_nonzero(~ops.isfinite(x))
    if bad:
        raise SolverError(f"the {what} holds {bad} NaN or infinite entries: check the layer's weights "
                          "and the calibration inputs (an overflow in half precision?)")


def _all_finite(ops: SolverOps, x: Array) -> bool:
    """Whether every entry of ``x`` is finite: one pass without a flag array when its sum is
    finite (a NaN or an infinity makes any sum non-finite), entry by entry only when it is not
    (finite entries that overflow the sum, or a real NaN or inf)."""
    return math.isfinite(ops.sum_all(x)) or not ops.count_nonzero(~ops.isfinite(x))


def inverse_hessian_factor(ops: SolverOps, hessian: Array, dampening_frac: float,
                           retries: int = DAMPENING_RETRIES) -> tuple[Array, float, str | None]:
    """``(Hinv, dampening used, report)``: the upper Cholesky factor of ``(H + damp·I)⁻¹``,
    ``damp = frac · mean(diag H)``, trying ``dampening_frac`` and then ten times more, up to
    ``retries`` times. ``hessian`` (float32, dead columns already handled) is not modified.
    Raises :class:`SolverError` when every dampening fails."""
    frac = float(dampening_frac)
    mean_diag = ops.mean(ops.diagonal(hessian))
    failed: list[float] = []
    for _ in range(retries + 1):
        damped = ops.add_diagonal(ops.copy(hessian), mean_diag * frac)
        lower = ops.cholesky(damped)
        upper = None if lower is None else ops.inverse_upper_factor(lower)
        if upper is not None and _all_finite(ops, upper):
            report = None if not failed else (
                f"cholesky failed at dampening_frac {', '.join(_fmt(f) for f in failed)}; used {_fmt(frac)}")
            return upper, frac, report
        failed.append(frac)
        frac = frac * 10 if frac > 0 else 0.01
    raise SolverError(
        f"the Hessian is not positive definite even with dampening_frac {_fmt(failed[-1])} "
        f"(tried {', '.join(_fmt(f) for f in failed)}): the calibration inputs of this layer are "
        "degenerate; use more or more varied calibration samples, or a larger dampening_frac")


@dataclass(frozen=True)
class HessianFactor:
    """What SparseGPT's and GPTQ's solves take from a layer's Hessian alone, before their
    column loop (:func:`factor_hessian`): ``order``, the column order (GPTQ's activation order:
    ``diag(H)`` descending, ties in column order; None: as given); ``dead``, the input columns
    whose diagonal was zero (bool, in that order) and their count; ``Hinv``, the upper factor of
    the dampened inverse in that order; the dampening ``used`` and the ``report`` (None when
    the first dampening worked). ``settings``: ``(dampening_frac, retries, ordered)`` it was
    made for. A host may have it made ahead, on a second thread, while the layer before is
    solved (:meth:`~recipe_spec.oneshot.algorithm.Algorithm.prepare`)."""

    columns: int
    order: Array | None
    dead: Array
    dead_count: int
    Hinv: Array
    used: float
    report: str | None
    settings: tuple[float, int, bool]


def factor_hessian(ops: SolverOps, hessian: Array, dampening_frac: float, retries: int = DAMPENING_RETRIES, *,
                   ordered: bool = False, like: Array | None = None) -> HessianFactor:
    """The step SparseGPT and GPTQ share before their column loop (``hessian``, ``(in, in)``,
    is not modified): with ``ordered``, the columns sorted by ``diag(H)`` descending; *dead*
    input columns (``H[j, j] == 0``) get ``H[j, j] = 1`` (the caller zeroes them in the weight);
    then :func:`inverse_hessian_factor`. ``like``: a float32 array whose device it is worked on
    (default: the Hessian's own)."""
    if not is_real(dampening_frac) or not 0.0 <= float(dampening_frac) < math.inf:
        raise ValueError(f"dampening_frac must be a finite number >= 0, got {dampening_frac!r}")
    H = ops.copy(ops.cast(hessian, like) if like is not None else ops.astype(hessian, "float32"))
    check_finite(ops, H, "Hessian")
    order = None
    if ordered:
        order = ops.argsort_last(-ops.diagonal(H))  # descending, ties in column order
        H = ops.index_select(ops.index_select(H, 0, order), 1, order)
    dead = ops.diagonal(H) == 0
    dead_count = ops.count_nonzero(dead)
    if dead_count:
        H = ops.add_diagonal(H, ops.cast(dead, H))
    Hinv, used, report = inverse_hessian_factor(ops, H, dampening_frac, retries)
    return HessianFactor(int(H.shape[0]), order, dead, dead_count, Hinv, used, report,
                         (float(dampening_frac), int(retries), bool(ordered)))


def check_factor(factor: HessianFactor, columns: int, dampening_frac: float, retries: int, ordered: bool) -> None:
    """Refuse a :class:`HessianFactor` made for another layer width or other settings."""
    wanted = (float(dampening_frac), int(retries), bool(ordered))
    if factor.columns != columns or factor.settings != wanted:
        raise ValueError(f"the Hessian factor was made for {factor.columns} columns with (dampening_frac, "
                         f"retries, ordered) {factor.settings}, not {columns} with {wanted}")


def check_hessian_shape(hessian: Array | None, factor: HessianFactor | None, cols: int) -> None:
    """Refuse a Hessian (or, given only a factor, no Hessian) that does not fit ``cols`` input
    columns."""
    if hessian is None and factor is None:
        raise ValueError("give the Hessian or its factor")
    if hessian is not None and tuple(hessian.shape) != (cols, cols):
        raise ValueError(f"the Hessian has shape {list(hessian.shape)}, but a weight with {cols} input "
                         f"columns needs [{cols}, {cols}]")


def zero_dead_columns(ops: SolverOps, W: Array, factor: HessianFactor) -> Array:
    """``W`` (in the factor's column order) with its dead columns zeroed."""
    if not factor.dead_count:
        return W
    return ops.where(ops.reshape(~factor.dead, (1, int(W.shape[1]))), W, 0.0)


def _fmt(x: float) -> str:
    """A dampening fraction as a person writes it (``0.1``, not ``0.10000000000000002``)."""
    return f"{x:.6g}"


def sparsegpt_prune(ops: SolverOps, weight: Array, hessian: Array | None, *, sparsity: float,
                    prune_n: int = 0, prune_m: int = 0, block_size: int = 128,
                    dampening_frac: float = 0.01, preserve_mask: Array | bool | None = None,
                    retries: int = DAMPENING_RETRIES, factor: HessianFactor | None = None) -> PruneResult:
    """Prune one layer with SparseGPT (see the module docstring) and return the updated weight.

    ``weight``: ``(out, in)``; ``hessian``: ``(in, in)`` from :class:`~.hessian.HessianStats`
    (neither is modified). ``prune_n > 0`` selects N:M (``sparsity`` is then not used, as in
    llm-compressor; ``block_size`` must be a multiple of ``prune_m`` so that the groups are the
    weight's own). ``preserve_mask`` (llm-compressor's ``preserve_sparsity_mask``): True keeps
    every weight that is already zero pruned; a bool array (True = kept) keeps its False
    entries pruned. Its N:M groups read the preserved zeros of their own columns (llm-compressor
    reads the columns of the first block again in every later block). ``factor``: the
    Hessian's :func:`factor_hessian` made ahead with these settings (``hessian`` may then be
    None)."""
    check_prune_args(tuple(weight.shape), sparsity, prune_n, prune_m)
    rows, cols = (int(d) for d in weight.shape)
    if not isinstance(block_size, numbers.Integral) or isinstance(block_size, bool) or block_size < 1:
        raise ValueError(f"block_size must be a whole number >= 1, got {block_size!r}")
    if prune_n and block_size % prune_m:
        raise ValueError(f"block_size {block_size} must be a multiple of M = {prune_m} for N:M pruning, "
                         "so that every group of M columns lies in one block")
    if not is_real(dampening_frac) or not 0.0 <= float(dampening_frac) < math.inf:
        raise ValueError(f"dampening_frac must be a finite number >= 0, got {dampening_frac!r}")
    check_hessian_shape(hessian, factor, cols)
    W = ops.copy(ops.astype(weight, "float32"))
    check_finite(ops, W, "weight")
    if factor is None:
        factor = factor_hessian(ops, hessian, dampening_frac, retries, like=W)
    else:
        check_factor(factor, cols, dampening_frac, retries, False)
    W = zero_dead_columns(ops, W, factor)
    dead, dead_count, Hinv, used, report = factor.dead, factor.dead_count, factor.Hinv, factor.used, factor.report

    before = _preserved(ops, W, preserve_mask, sparsity, dead)
    rule = _MaskRule(ops, sparsity, prune_n, prune_m, before)
    W, loss = blockwise_obs(ops, W, Hinv, block_size, rule)
    mask = ops.concat(rule.keeps, 1) if len(rule.keeps) > 1 else rule.keeps[0]
    if dead_count:
        mask = mask & ops.reshape(~dead, (1, cols))
    return PruneResult(ops.cast(W, weight), mask, loss, used, dead_count, report)


class ColumnRule(Protocol):
    """What one block-wise OBS solve does besides the shared update: which value each column
    is moved to (SparseGPT: the column with its pruned entries zeroed; GPTQ: the column on the
    quantization grid), and which entries right of a block the block's error may move."""

    def start_block(self, W1: Array, Hinv1: Array, i1: int) -> None:
        """A block of columns ``i1 .. i1 + width`` starts: ``W1`` is its working copy (not to
        be written), ``Hinv1`` its diagonal block of the inverse Hessian's factor."""

    def column(self, T1: Array, i: int) -> Array:
        """The target ``q`` of column ``i`` of the block, read from the block as updated so
        far, held transposed: ``T1`` is ``(width, rows)`` and ``T1[i]`` is the column now."""

    def block_update(self, update: Array, i2: int) -> Array:
        """The update ``Err1 · Hinv[i1:i2, i2:]`` of the columns from ``i2`` on, as applied."""


def blockwise_obs(ops: SolverOps, W: Array, Hinv: Array, block_size: int, rule: ColumnRule) -> tuple[Array, float]:
    """The block-wise OBS update shared by SparseGPT and GPTQ (Frantar & Alistarh 2022, 2023):
    ``(W with every column moved to its target, Σ err² / 2)``. Column by column ``q`` is the
    rule's target, ``err = (w - q) / Hinv1[i, i]``, ``W1[:, i:] -= err ⊗ Hinv1[i, i:]``; after
    each block ``W[:, i2:] -= Err1 · Hinv[i1:i2, i2:]``. Takes ownership of ``W`` (float32,
    ``(rows, cols)``); ``Hinv`` is the upper factor of :func:`inverse_hessian_factor`.

    The block is worked on transposed (``(width, rows)``, each column a contiguous row), so
    that reading a column and updating the columns right of it walk memory in order; every
    entry of the update is the same single product ``err[r] · Hinv1[i, j]`` subtracted once,
    so the bits are those of the ``(rows, width)`` layout (llm-compressor's)."""
    rows, cols = (int(d) for d in W.shape)
    loss = 0.0
    for i1 in range(0, cols, block_size):
        i2 = min(i1 + block_size, cols)
        W1 = W[:, i1:i2]
        Hinv1 = Hinv[i1:i2, i1:i2]
        rule.start_block(W1, Hinv1, i1)
        T1 = ops.permute(W1, (1, 0))  # a contiguous copy
        qs, errs = [], []
        with ops.serial(T1):  # small elementwise steps whose bits do not depend on threads
            for i in range(i2 - i1):
                q = rule.column(T1, i)
                row = Hinv1[i, i:]
                err = (T1[i] - q) / row[0]
                # the rank-1 update: one product per entry (llm-compressor's bits), rows contiguous
                T1 = ops.subtract_outer(T1, i, row, err)
                qs.append(q)
                errs.append(err)
        Err1 = ops.stack(errs, 1)
        W = ops.assign(W, (_ALL, slice(i1, i2)), ops.stack(qs, 1))
        loss += ops.sum_all(Err1 * Err1) / 2
        if i2 < cols:
            W = ops.subtract(W, (_ALL, slice(i2, None)), rule.block_update(ops.matmul(Err1, Hinv[i1:i2, i2:]), i2))
    return W, float(loss)


class _MaskRule:
    """SparseGPT's :class:`ColumnRule`: one mask per block (unstructured: over the whole tile
    at its start; N:M: per group of M columns as the loop reaches it), ``q = w`` with the
    pruned entries zeroed; preserved zeros are never moved by a block's error."""

    def __init__(self, ops: SolverOps, sparsity: float, n: int, m: int, before: Array | None) -> None:
        self._ops, self._sparsity, self._n, self._m, self._before = ops, sparsity, n, m, before
        self.keeps: list[Array] = []

    def start_block(self, W1: Array, Hinv1: Array, i1: int) -> None:
        ops = self._ops
        rows, width = (int(d) for d in W1.shape)
        self._scale = ops.reshape(ops.diagonal(Hinv1), (1, width)) ** 2
        self._before1 = None if self._before is None else self._before[:, i1:i1 + width]
        if not self._n:
            keep1 = _tile_keep(ops, W1, self._scale, self._before1, self._sparsity)
        else:
            keep1 = ops.full((rows, width), True, W1) if self._before1 is None else ~self._before1
        self.keeps.append(keep1)

    def column(self, T1: Array, i: int) -> Array:
        if self._n and i % self._m == 0:
            now = self._ops.permute_view(T1[i:i + self._m], (1, 0))
            self.keeps[-1] = _group_keep(self._ops, self.keeps[-1], now, self._scale, self._before1,
                                         i, self._n, self._m)
        return self._ops.where(self.keeps[-1][:, i], T1[i], 0.0)

    def block_update(self, update: Array, i2: int) -> Array:
        return update if self._before is None else self._ops.where(self._before[:, i2:], 0.0, update)


def _preserved(ops: SolverOps, W: Array, preserve_mask: Any, sparsity: float, dead: Array) -> Array | None:
    """The entries that stay pruned (bool, True = pruned), or None; refuses a layer already
    sparser than ``sparsity``, as llm-compressor does."""
    if preserve_mask is None or preserve_mask is False:
        return None
    if preserve_mask is True:
        before = W == 0
    else:
        if tuple(preserve_mask.shape) != tuple(W.shape):
            raise ValueError(f"preserve_mask has shape {list(preserve_mask.shape)}, the weight "
                             f"{list(W.shape)}: pass the layer's own mask (True = kept)")
        before = ~ops.astype(preserve_mask, "bool") | ops.reshape(dead, (1, int(W.shape[1])))
    current = ops.count_nonzero(before) / (int(W.shape[0]) * int(W.shape[1]))
    if current > sparsity:
        raise ValueError(f"the layer is already {current:.4g} sparse, more than the target sparsity "
                         f"{sparsity}: raise the sparsity or turn preserve_sparsity_mask off")
    return before


def _tile_keep(ops: SolverOps, W1: Array, scale: Array, before1: Array | None, sparsity: float) -> Array:
    """The unstructured mask of one block (True = kept): one threshold over the whole tile."""
    numel = int(W1.shape[0]) * int(W1.shape[1])
    k = int(numel * sparsity)
    if before1 is None:
        tmp = W1 ** 2 / scale
    elif k > ops.count_nonzero(before1):
        tmp = ops.where(before1, 0.0, W1 ** 2) / scale  # llm-compressor's (~mask) · W1², without a bool product
    else:
        return ~before1
    thresh = ops.kth_direct(ops.reshape(tmp, (numel,)), k + 1)
    return tmp > thresh


def _group_keep(ops: SolverOps, keep1: Array, now: Array, scale: Array, before1: Array | None,
                i: int, n: int, m: int) -> Array:
    """``keep1`` with the ``n`` smallest ``now² / scale`` of each row of columns ``i..i+m``
    (``now``: those columns as updated so far, ``(rows, m)``) pruned (preserved zeros score 0,
    so they are pruned first)."""
    tmp = now ** 2 / scale[:, i:i + m]
    if before1 is not None:
        tmp = ops.where(before1[:, i:i + m], 0.0, tmp)  # tmp · ~mask: 0 where preserved (tmp >= 0)
    return ops.scatter_last(keep1, ops.argsort_last(tmp)[:, :n] + i, False)
