"""Pruning masks for Keras kernels as pure NumPy functions: a kernel in, a ``bool`` mask out
(True = keep), the same mask the PyTorch backend (:mod:`recipe_spec_torch.masks`, the
reference) gives for the equivalent PyTorch weight.

Nothing here imports Keras or torch. Every mask is computed in the *torch layout* of the kernel
(:func:`to_torch_layout`) with the torch backend's rules, then returned in the Keras layout:

* counting: ``k = round(sparsity * count)`` units pruned (Python ``round``, half to even);
* ties: the ``k`` smallest scores are pruned; among scores equal to the k-th smallest the ones
  first in flat (row-major) *torch-layout* order are kept, the later ones pruned;
* the grouped types (``block4``, ``[a, b]``, ``N:M``, ``channel``, ``filter``) group and pad
  exactly as the torch backend does, with "dimension 0/1" meaning the torch weight's (out, in);
* errors: NaN/inf weights raise ``ValueError``, shapes that cannot take a mask type raise
  :class:`MaskShapeError` with the torch backend's message (shapes in torch layout).

Group scores (means of ``|w|`` and the L1 norms of slices) are floating-point sums, so their
last bits depend on the order of the additions; ranking them could differ from torch's only
between near-equal groups, but then it would. So the sums here add in exactly the order of torch's CPU
reduction kernel (``SumKernel.cpp``'s ``cascade_sum``: four interleaved accumulators per row,
8-lane vectors on contiguous rows, 16-entry cascade levels on long rows, rows added in
``TensorIterator`` order; :data:`SUM_VECTOR_BYTES`), and means divide the float32 sum as torch
does. float32 and float64 kernels match torch's CPU masks bit for bit; for 16-bit kernels the
block means match (torch upcasts first) but channel/filter L1 sums may differ in the last bit.
Masks computed by torch on a GPU add in another order and are not covered by
this guarantee (their near-ties can break differently from torch's own CPU result too).
Unstructured and global masks and N:M involve no arithmetic and match everywhere.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from recipe_spec.mask_types import parse_mask_type

__all__ = [
    "MaskShapeError",
    "SUM_VECTOR_BYTES",
    "parse_mask_type",
    "to_torch_layout",
    "from_torch_layout",
    "compute_mask",
    "global_unstructured_masks",
]

#: SparseML's tolerance between a recipe's target and an N:M pattern's own sparsity.
_NM_TOLERANCE = 1e-2
_CONV_RE = re.compile(r"^Conv(?:olution)?([123])D(Transpose)?$")


class MaskShapeError(ValueError):
    """A mask type cannot be applied to a parameter of this shape (same meaning and messages
    as ``recipe_spec_torch.masks.MaskShapeError``; the message gives the torch-layout shape).

    ``shape`` is the shape the message talks about (torch layout); :func:`compute_mask` sets
    ``keras_shape`` to the kernel's own shape as well.
    """

    def __init__(self, message: str, *, shape: Sequence[int] = (), mask_type: Any = None) -> None:
        super().__init__(message)
        self.shape = tuple(int(d) for d in shape)
        self.mask_type = mask_type
        self.keras_shape: tuple[int, ...] | None = None


# -- mask types ------------------------------------------------------------------------------
# -- layouts ---------------------------------------------------------------------------------
def _spatial_dims(layer_type: str, ndim: int) -> int | None:
    """How many kernel-position dims a ``layer_type`` kernel has (0 for Dense), or None when
    the kernel is not transposed (Embedding, unknown layers, 0-D/1-D arrays such as biases)."""
    if ndim < 2:
        return None
    if layer_type == "Dense":
        expected = 0
    else:
        match = _CONV_RE.match(layer_type)
        if not match:
            return None  # Embedding (num, dim) == torch's layout; anything else unchanged
        expected = int(match.group(1))
    if ndim != expected + 2:
        raise ValueError(
            f"a {layer_type} kernel has {expected + 2} dimensions, got an array with {ndim} "
            "dimensions"
        )
    return expected


def to_torch_layout(kernel: np.ndarray, layer_type: str) -> np.ndarray:
    """The torch weight that holds the same values as a Keras ``kernel`` (a view, no copy).

    Dense ``(in, out)`` -> Linear ``(out, in)``; ConvND ``(k..., in, out)`` -> ``(out, in,
    k...)``; ConvNDTranspose ``(k..., out, in)`` -> ConvTranspose ``(in, out, k...)`` (all three
    are the same permutation: the last two axes reversed, moved in front); Embedding
    ``(num, dim)`` and anything else (biases, norms, other layers) unchanged.

    >>> to_torch_layout(np.zeros((3, 3, 4, 8)), "Conv2D").shape
    (8, 4, 3, 3)
    """
    kernel = np.asarray(kernel)
    nd = _spatial_dims(layer_type, kernel.ndim)
    if nd is None:
        return kernel
    return kernel.transpose(nd + 1, nd, *range(nd))


def from_torch_layout(array: np.ndarray, layer_type: str, shape: Sequence[int]) -> np.ndarray:
    """The inverse of :func:`to_torch_layout`: ``array`` (torch layout) as a Keras array of
    ``shape`` (the kernel's shape, checked)."""
    array = np.asarray(array)
    shape = tuple(int(d) for d in shape)
    nd = _spatial_dims(layer_type, len(shape))
    out = array if nd is None else array.transpose(*range(2, nd + 2), 1, 0)
    if out.shape != shape:
        raise ValueError(
            f"an array of torch-layout shape {list(array.shape)} is not a {layer_type} kernel of "
            f"shape {list(shape)}"
        )
    return out


# -- validation ------------------------------------------------------------------------------
def _check_sparsity(sparsity: Any) -> float:
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)):
        raise ValueError(f"sparsity must be a number in [0, 1]. Received: sparsity={sparsity!r}")
    value = float(sparsity)
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        raise ValueError(f"sparsity must be in [0, 1]. Received: sparsity={sparsity!r}")
    return value


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind in "fc" or a.dtype.name in ("bfloat16",)


def _check_finite(weight: np.ndarray) -> None:
    if _is_float(weight) and not bool(np.isfinite(weight.astype(np.float64)).all()):
        raise ValueError(
            f"weight of shape {list(weight.shape)} contains NaN or infinite values, so its "
            "magnitudes cannot be ranked to build a mask (the training probably diverged: "
            "lower the learning rate or check the loss)"
        )


def _check_no_nan(scores: np.ndarray) -> None:
    if _is_float(scores) and bool(np.isnan(scores.astype(np.float64)).any()):
        raise ValueError(
            f"scores of shape {list(scores.shape)} contain NaN values, which cannot be ranked"
        )


# -- exact selection -------------------------------------------------------------------------
def _keep_largest(flats: Sequence[np.ndarray], k: int) -> list[np.ndarray]:
    """Flat keep-masks for ``flats`` taken together in order: exactly ``k`` False entries, the
    k smallest values; among entries equal to the threshold the earliest are kept."""
    n = sum(f.size for f in flats)
    if k <= 0:
        return [np.ones(f.shape, dtype=bool) for f in flats]
    if k >= n:
        return [np.zeros(f.shape, dtype=bool) for f in flats]
    allv = flats[0] if len(flats) == 1 else np.concatenate(flats)
    threshold = np.partition(allv, k - 1)[k - 1]
    keeps = [f > threshold for f in flats]
    surplus = (n - sum(int(np.count_nonzero(m)) for m in keeps)) - k
    for flat, keep in zip(flats, keeps, strict=True):
        if surplus <= 0:
            break
        tied = np.flatnonzero(flat == threshold)[:surplus]
        keep[tied] = True
        surplus -= tied.size
    return keeps


def _keep_units(scores: np.ndarray, sparsity: float) -> np.ndarray:
    flat = scores.reshape(-1)
    return _keep_largest([flat], round(sparsity * flat.size))[0].reshape(scores.shape)


# -- torch's CPU summation order -------------------------------------------------------------
#: Bytes per torch CPU vector (``Vectorized<T>``) in its sum kernel: 32 on x86 (AVX2 and the
#: default build; the AVX-512 dispatch of ``sum_stub`` falls back to the AVX2 kernel), so 8
#: float32 or 4 float64 lanes. May be set by hand to mirror another torch build.
SUM_VECTOR_BYTES = 32
#: torch's ``row_sum`` interleaves this many accumulators (``ilp_factor``).
_ILP = 4


def _fold(x: np.ndarray) -> np.ndarray:
    """Sequential sum over the last axis, ``((0 + x0) + x1) + ...``, in ``x``'s dtype."""
    acc = np.zeros(x.shape[:-1], dtype=x.dtype)
    for j in range(x.shape[-1]):
        acc = acc + x[..., j]
    return acc


def _cascade(x: np.ndarray) -> np.ndarray:
    """torch's ``multi_row_sum`` for one row, over the last axis: sequential chunks of ``2**p``
    entries (``p = max(4, ceil(log2(n)) // 4)``) whose sums go through up to 3 more levels."""
    size = x.shape[-1]
    lead = x.shape[:-1]
    ceil_log2 = 1 if size <= 2 else (size - 1).bit_length()
    step = 1 << max(4, ceil_log2 // 4)
    nfull = size // step

    def groups(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = v.shape[-1] // step
        return _fold(v[..., : q * step].reshape(*lead, q, step)), _fold(v[..., q * step:])

    chunks = _fold(x[..., : nfull * step].reshape(*lead, nfull, step))
    tail = _fold(x[..., nfull * step:])
    level1, rest1 = groups(chunks)
    level2, rest2 = groups(level1)
    return ((tail + rest1) + rest2) + _fold(level2)


def _ilp_sum(x: np.ndarray) -> np.ndarray:
    """torch's ``row_sum`` over the last axis: 4 interleaved cascades (entry ``4r + k`` goes to
    accumulator ``k``), the leftover entries added to the first, then the four added up."""
    size = x.shape[-1]
    q = size // _ILP
    body = x[..., : q * _ILP].reshape(*x.shape[:-1], q, _ILP)
    partial = _cascade(np.swapaxes(body, -1, -2))  # (..., 4)
    acc = partial[..., 0]
    for j in range(q * _ILP, size):
        acc = acc + x[..., j]
    for k in range(1, _ILP):
        acc = acc + partial[..., k]
    return acc


def _vec_inner_sum(x: np.ndarray) -> np.ndarray:
    """torch's ``vectorized_inner_sum`` over the last (contiguous) axis: a ``row_sum`` of whole
    vectors, lane by lane; then ``0 + leftover entries + lane 0 + lane 1 + ...``."""
    lanes = SUM_VECTOR_BYTES // x.dtype.itemsize
    size = x.shape[-1]
    nvec = size // lanes
    body = x[..., : nvec * lanes].reshape(*x.shape[:-1], nvec, lanes)
    lane_sums = _ilp_sum(np.swapaxes(body, -1, -2))  # (..., lanes)
    acc = _fold(x[..., nvec * lanes:])
    for j in range(lanes):
        acc = acc + lane_sums[..., j]
    return acc


def _torch_sum(x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """``torch.sum(x, dim=axes)`` of a contiguous float32/float64 array, bit for bit as torch's
    CPU ``cascade_sum`` adds: ``TensorIterator`` puts the reduced dims first (fastest first,
    adjacent ones coalesced), the fastest reduced run is summed as rows by the kernel its
    strides select, and the rows are added into the output in iteration order.

    The kept dims must be adjacent in ``x`` (they are for every caller here)."""
    x = np.ascontiguousarray(x)
    axes = sorted({a % x.ndim for a in axes})
    out_shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    strides = [math.prod(x.shape[i + 1:]) for i in range(x.ndim)]
    reduced = [i for i in reversed(range(x.ndim)) if i in axes and x.shape[i] > 1]
    kept = [i for i in range(x.ndim) if i not in axes and x.shape[i] > 1]
    if not reduced:
        return x.reshape(out_shape).copy()
    lanes = SUM_VECTOR_BYTES // x.dtype.itemsize
    # coalesce adjacent reduced dims (fastest first) that are contiguous in the input
    runs: list[list[int]] = [[reduced[0]]]
    for d in reduced[1:]:
        prev = runs[-1][-1]
        if strides[prev] * x.shape[prev] == strides[d]:
            runs[-1].append(d)
        else:
            runs.append([d])
    # axes: kept (one coalesced dim), then the reduced runs slowest first, each slow -> fast
    ones = [i for i in range(x.ndim) if x.shape[i] == 1]
    order = ones + kept + [d for run in reversed(runs) for d in reversed(run)]
    n_out = math.prod(x.shape[i] for i in kept)
    run_sizes = [math.prod(x.shape[d] for d in run) for run in reversed(runs)]
    rows = x.transpose(order).reshape(n_out, *run_sizes)
    size0 = run_sizes[-1]
    contiguous0 = strides[runs[0][0]] == 1
    if contiguous0 and size0 >= lanes:
        sums = _vec_inner_sum(rows)
    elif len(runs) > 1 or not kept:
        sums = _ilp_sum(rows)  # scalar_inner_sum (or a single output)
    else:
        # one reduced run and a kept dim: the outer-sum kernels sum whole blocks of outputs
        # with multi_row_sum (no interleaving) and the leftover outputs with row_sum
        kept_contiguous = strides[kept[-1]] == 1
        if kept_contiguous and n_out >= lanes:  # vectorized_outer_sum
            blocked = n_out - n_out % (_ILP * lanes)
        elif strides[runs[0][0]] < strides[kept[-1]]:  # scalar_inner_sum
            blocked = 0
        else:  # scalar_outer_sum
            blocked = n_out - n_out % _ILP
        sums = np.concatenate([_cascade(rows[:blocked]), _ilp_sum(rows[blocked:])])
    # rows are added into the output in iteration order (fastest outer run fastest), i.e. the
    # row-major order of the outer runs, slowest first
    return _fold(sums.reshape(n_out, -1)).reshape(out_shape)


def _acc_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _group_means(groups: np.ndarray) -> np.ndarray:
    """Mean of each row of a (G, g) array as torch computes it on the CPU: the sum (in float32
    for 16-bit types) divided by g, cast back to the input's dtype."""
    acc = groups.astype(_acc_dtype(groups.dtype))
    g = groups.shape[1]
    means = _torch_sum(acc, [1]) / acc.dtype.type(g)
    return means.astype(groups.dtype)


# -- grouped masks (torch layout) ------------------------------------------------------------
def _block_mask(weight: np.ndarray, sparsity: float, block_shape: Sequence[int]) -> np.ndarray:
    shape = tuple(weight.shape)
    spec = list(block_shape)
    if len(spec) < 2 or any(v != 1 for v in spec[2:]) or len(spec) > max(len(shape), 2) or not all(
        isinstance(v, int) and not isinstance(v, bool) and (v > 0 or v == -1) for v in spec
    ):
        raise ValueError(
            f"Invalid block_shape {spec!r}: expected [rows, cols] (positive ints or -1), "
            "optionally followed by 1s for the kernel dims"
        )
    if len(shape) < 2:
        raise MaskShapeError(
            f"mask_type {spec[:2]!r} (block masks) needs a parameter with 2 or more dimensions, "
            f"got shape {list(shape)}. Exclude this parameter (biases and norms are not "
            "prunable) or use mask_type 'unstructured'",
            shape=shape, mask_type=spec,
        )
    full = spec + [1] * (len(shape) - len(spec))
    full = [shape[i] if v == -1 else v for i, v in enumerate(full)]
    bad = [i for i, (d, b) in enumerate(zip(shape, full, strict=True)) if d % b]
    if bad:
        i = bad[0]
        raise MaskShapeError(
            f"mask_type {spec[:2]!r} cannot be applied to a parameter of shape {list(shape)}: "
            f"Invalid block_shape {full} for parameter shape {list(shape)}. Elements of "
            f"block_shape must divide parameter shape evenly (dimension {i} has {shape[i]} "
            f"entries, not a multiple of {full[i]}). Use mask_type 'block4' (which pads the last "
            "group) or 'unstructured', or exclude this parameter from the modifier",
            shape=shape, mask_type=spec,
        )
    a, b = full[0], full[1]
    rows, cols = shape[0] // a, shape[1] // b
    kernel = math.prod(shape[2:])
    tiles = np.abs(weight).reshape(rows, a, cols, b, kernel).transpose(0, 2, 4, 1, 3)
    scores = _group_means(tiles.reshape(-1, a * b)).reshape(rows, cols, kernel)
    keep = _keep_units(scores, sparsity)
    mask = np.broadcast_to(keep.reshape(rows, 1, cols, 1, kernel), (rows, a, cols, b, kernel))
    return mask.reshape(shape)


def _four_block_mask(weight: np.ndarray, sparsity: float) -> np.ndarray:
    shape = tuple(weight.shape)
    if weight.size == 0:
        return np.ones(shape, dtype=bool)
    if not shape:  # a scalar is one group of one real entry
        return _four_block_mask(weight.reshape(1), sparsity).reshape(())
    scores = np.abs(weight)
    moved = scores.ndim > 2
    if moved:
        scores = np.moveaxis(scores, 1, -1)
    width = scores.shape[-1]
    remainder = width % 4
    if remainder:
        tail = scores[..., -remainder:].reshape(-1, remainder)
        pad = _group_means(tail).reshape(*scores.shape[:-1], 1)
        scores = np.concatenate(
            [scores, np.broadcast_to(pad, (*scores.shape[:-1], 4 - remainder))], axis=-1
        )
    outer = scores.shape[:-1]
    keep = _keep_units(_group_means(scores.reshape(-1, 4)), sparsity)
    mask = np.broadcast_to(keep.reshape(*outer, -1, 1), (*outer, scores.shape[-1] // 4, 4))
    mask = mask.reshape(*outer, scores.shape[-1])[..., :width]
    if moved:
        mask = np.moveaxis(mask, -1, 1)
    return mask


def _nm_mask(weight: np.ndarray, n: int, m: int) -> np.ndarray:
    if not (isinstance(n, int) and isinstance(m, int) and 0 < n <= m):
        raise ValueError(f"N:M masks need integers 0 < N <= M. Received: N={n!r}, M={m!r}")
    shape = tuple(weight.shape)
    if len(shape) < 2 or shape[1] % m:
        got = f"dimension 1 has {shape[1]} entries" if len(shape) >= 2 else "it has fewer than 2 dimensions"
        raise MaskShapeError(
            f"mask_type '{n}:{m}' needs dimension 1 (input channels) of the parameter to be a "
            f"multiple of {m}, but the parameter has shape {list(shape)} and {got}. Exclude "
            "this parameter from the modifier, or choose an N:M pattern whose M divides it "
            "(or mask_type 'unstructured')",
            shape=shape, mask_type=f"{n}:{m}",
        )
    scores = np.abs(weight)
    moved = scores.ndim > 2
    if moved:
        scores = np.moveaxis(scores, 1, -1)
    groups = scores.reshape(-1, m)
    # stable descending order: ties keep the earlier entry first
    order = np.argsort(-groups.astype(_acc_dtype(groups.dtype)), axis=1, kind="stable")[:, :n]
    mask = np.zeros(groups.shape, dtype=bool)
    np.put_along_axis(mask, order, True, axis=1)
    mask = mask.reshape(scores.shape)
    if moved:
        mask = np.moveaxis(mask, -1, 1)
    return mask


def _slice_mask(weight: np.ndarray, sparsity: float, dim: int, kind: str) -> np.ndarray:
    shape = tuple(weight.shape)
    if len(shape) < 2:
        raise MaskShapeError(
            f"mask_type '{kind}' prunes whole slices of dimension {dim} and needs a parameter "
            f"with 2 or more dimensions, got shape {list(shape)}. Exclude this parameter "
            "(biases and norms are not prunable) or use mask_type 'unstructured'",
            shape=shape, mask_type=kind,
        )
    others = [d for d in range(len(shape)) if d != dim]
    absw = np.abs(weight)
    if absw.dtype in (np.float32, np.float64):
        scores = _torch_sum(absw, others)
    else:  # 16-bit floats: torch accumulates in float32 (row order as above, see module doc)
        scores = _torch_sum(absw.astype(np.float32), others).astype(absw.dtype)
    keep = _keep_units(scores, sparsity)
    view = [1] * len(shape)
    view[dim] = shape[dim]
    return np.broadcast_to(keep.reshape(view), shape)


def _torch_layout_mask(weight: np.ndarray, sparsity: float, kind: str, arg: Any,
                       mask_type: Any) -> np.ndarray:
    if kind == "unstructured":
        return _keep_units(np.abs(weight), sparsity)
    if kind == "block4":
        return _four_block_mask(weight, sparsity)
    if kind == "block":
        return _block_mask(weight, sparsity, arg)
    if kind == "nm":
        n, m = arg
        if sparsity == 0.0:
            return np.ones(weight.shape, dtype=bool)
        if abs((1.0 - n / m) - sparsity) > _NM_TOLERANCE:
            raise ValueError(
                f"mask_type {mask_type!r} keeps {n} of every {m} weights (sparsity "
                f"{1.0 - n / m:g}), so the target sparsity must be within {_NM_TOLERANCE:g} of "
                f"{1.0 - n / m:g} (or 0). Received: sparsity={sparsity:g}"
            )
        return _nm_mask(weight, n, m)
    if kind == "channel":
        return _slice_mask(weight, sparsity, 1, "channel")
    return _slice_mask(weight, sparsity, 0, "filter")


# -- public API ------------------------------------------------------------------------------
def compute_mask(kernel: Any, sparsity: float, mask_type: Any = "unstructured",
                 layer_type: str = "Dense") -> np.ndarray:
    """The keep-mask (``bool``, the kernel's shape) of a Keras ``kernel`` at ``sparsity`` for a
    recipe's ``mask_type``: the mask ``recipe_spec_torch.masks.compute_mask`` gives for
    ``to_torch_layout(kernel, layer_type)``, in the Keras layout. Scores are ``|w|``.

    Same checks in the same order as the torch backend: the mask type (``ValueError``), the
    sparsity (``ValueError``), NaN/inf weights (``ValueError``), then the shape
    (:class:`MaskShapeError`, shape in torch layout). For N:M the target must be 0 or within
    1e-2 of ``1 - N/M``.

    >>> compute_mask(np.array([[0.3, 0.1], [0.2, 0.4]]), 0.5).tolist()
    [[True, False], [False, True]]
    """
    kind, arg = parse_mask_type(mask_type)
    sparsity = _check_sparsity(sparsity)
    kernel = np.asarray(kernel)
    weight = to_torch_layout(kernel, layer_type)
    _check_finite(weight)
    try:
        mask = _torch_layout_mask(weight, sparsity, kind, arg, mask_type)
    except MaskShapeError as err:
        err.keras_shape = tuple(kernel.shape)
        raise
    return np.ascontiguousarray(from_torch_layout(mask, layer_type, kernel.shape))


def global_unstructured_masks(kernels_and_types: Sequence[tuple[Any, str]],
                              sparsity: float) -> list[np.ndarray]:
    """One magnitude threshold over all kernels together (SparseML's ``global_sparsity``), as
    ``recipe_spec_torch.masks.global_unstructured_masks`` on the torch-layout ``|w|``.

    Exactly ``round(sparsity * total_size)`` entries are False across the list; ties at the
    threshold keep the entries first in the list's order, then in flat torch-layout order.
    NaN weights raise ``ValueError`` (infinities rank highest, as in torch).

    >>> [m.tolist() for m in global_unstructured_masks(
    ...     [(np.array([[1.0, 0.5]]), "Dense"), (np.array([0.5, 2.0]), "bias")], 0.5)]
    [[[True, False]], [False, True]]
    """
    sparsity = _check_sparsity(sparsity)
    kernels = [np.asarray(k) for k, _ in kernels_and_types]
    scores = [np.abs(to_torch_layout(k, t)) for k, (_, t) in zip(kernels, kernels_and_types, strict=True)]
    for s in scores:
        _check_no_nan(s)
    dtypes = {s.dtype for s in scores}
    if len(dtypes) > 1:  # torch.cat promotes; compare in a dtype that holds every value exactly
        common = np.result_type(*dtypes)
        scores = [s.astype(common) for s in scores]
    flats = [s.reshape(-1) for s in scores]
    keeps = _keep_largest(flats, round(sparsity * sum(f.size for f in flats)))
    return [
        np.ascontiguousarray(from_torch_layout(keep.reshape(s.shape), t, k.shape))
        for keep, s, k, (_, t) in zip(keeps, scores, kernels, kernels_and_types, strict=True)
    ]
