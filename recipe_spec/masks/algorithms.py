"""Pruning masks, written once over the array operations a backend supplies
(:class:`recipe_spec.masks.ops.ArrayOps`): scores or weights in, a bool mask of the same shape
out (True = keep). The backends (``recipe_spec_torch.masks``, ``recipe_spec_keras.masks``) only
supply their ops and the layout of their arrays. Imported by backends, never by
``import recipe_spec``.

The rules are SparseML's (``mask_creator.py``, reference section 3.2), with these decisions:

- Counting: ``k = round(sparsity * count)`` units are pruned, with Python's ``round`` (half to
  even) on the float product, as SparseML. A unit is an entry (unstructured), a block
  (``[a, b]``, ``block4``) or a slice (``channel``, ``filter``).
- Ties: the ``k`` units with the smallest scores are pruned; among units whose score equals
  the k-th smallest, the ones *first* in the row-major order of the canonical score array are
  kept, the later ones pruned (SparseML's ``_flip_threshold_mask_vals`` above the minimum;
  where SparseML drew among tied minimum values with ``random.Random(42)`` we apply the same
  rule), so a mask is a function of its scores alone. Zeros go first: ``|0|`` is smallest.
- Group scores (block and ``block4`` means, ``channel``/``filter`` L1 sums) are computed here,
  in float64, by :func:`pairwise_sum`: a fixed tree of elementwise additions, each of which
  IEEE 754 rounds the same way on every framework and device, so every backend ranks the same
  bits (a framework's own ``sum`` or ``mean`` adds in an order of its own, and near-equal
  groups could then rank differently). Means divide that sum by the group's entry count.
- Layouts: every rule speaks of the *canonical* axes (:mod:`recipe_spec.masks.layout`: torch's
  order, "dimension 0/1" = (out, in)), but the algorithms work on the array as the framework
  stores it, through its :class:`~recipe_spec.masks.layout.Layout`: grouped types reshape and reduce
  the native axes that hold the canonical ones, and unstructured masks select on the native
  flat array (the k-th smallest value and ``score > threshold`` do not depend on the order);
  only the entries tied at the threshold have their positions mapped to canonical order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from .layout import Layout
from .ops import Array, ArrayOps
from .selection import kth_smallest, nth_true
from .types import parse_mask_type

__all__ = [
    "MaskShapeError", "MaskArgs", "NM_TOLERANCE", "all_finite", "check_sparsity", "mask_args", "mask_for",
    "compute_mask", "unstructured_mask", "global_unstructured_masks", "block_mask",
    "four_block_mask", "nm_mask", "channel_mask", "filter_mask", "pairwise_sum",
]

#: SparseML's tolerance between a recipe's target and an N:M pattern's own sparsity.
NM_TOLERANCE = 1e-2


class MaskShapeError(ValueError):
    """A mask type cannot be applied to a parameter of this shape.

    The message names the shape (canonical), the mask type and how to fix the recipe; ``shape``
    and ``mask_type`` are kept as attributes for callers that add the parameter's name.
    """

    def __init__(self, message: str, *, shape: Sequence[int] = (), mask_type: Any = None) -> None:
        super().__init__(message)
        self.shape = tuple(int(d) for d in shape)
        self.mask_type = mask_type


class MaskArgs(NamedTuple):
    """A checked ``mask_type`` and sparsity: ``parse_mask_type``'s (kind, arg), the target."""

    kind: str
    arg: Any
    sparsity: float
    mask_type: Any


# -- checks ----------------------------------------------------------------------------------
def check_sparsity(sparsity: Any) -> float:
    """``sparsity`` as a float in [0, 1], else ``ValueError``."""
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)):
        raise ValueError(f"sparsity must be a number in [0, 1]. Received: sparsity={sparsity!r}")
    value = float(sparsity)
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        raise ValueError(f"sparsity must be in [0, 1]. Received: sparsity={sparsity!r}")
    return value


def mask_args(mask_type: Any, sparsity: Any) -> MaskArgs:
    """The mask type, then the sparsity, checked (``ValueError``) in that order."""
    kind, arg = parse_mask_type(mask_type)
    return MaskArgs(kind, arg, check_sparsity(sparsity), mask_type)


def _layout(x: Array, layout: Layout | None) -> Layout:
    return Layout.identity(tuple(x.shape)) if layout is None else layout


def _check_no_nan(ops: ArrayOps, scores: Array, layout: Layout) -> None:
    # A NaN makes the sum NaN; so does +inf with -inf, hence the exact check only then.
    if ops.is_floating(scores) and math.isnan(ops.sum_all(scores)) and ops.count_nonzero(ops.isnan(scores)):
        raise ValueError(
            f"scores of shape {list(layout.canonical_shape)} contain NaN values, which cannot be ranked"
        )


def all_finite(ops: ArrayOps, x: Array) -> bool:
    """Whether every entry of ``x`` is finite (an integer array always is). A finite sum proves
    it; only a non-finite one (which can also be an overflow) needs the exact, slower count."""
    return not ops.is_floating(x) or math.isfinite(ops.sum_all(x)) or (
        ops.count_nonzero(ops.isfinite(x)) == math.prod(x.shape)
    )


def _check_finite(ops: ArrayOps, weight: Array, layout: Layout) -> None:
    if not all_finite(ops, weight):
        raise ValueError(
            f"weight of shape {list(layout.canonical_shape)} contains NaN or infinite values, so "
            "its magnitudes cannot be ranked to build a mask (the training probably diverged: "
            "lower the learning rate or check the loss)"
        )


def _require_2d(shape: tuple[int, ...], what: str, mask_type: Any) -> None:
    if len(shape) < 2:
        raise MaskShapeError(
            f"mask_type {what} needs a parameter with 2 or more dimensions, got shape "
            f"{list(shape)}. Exclude this parameter (biases and norms are not prunable) or use "
            "mask_type 'unstructured'",
            shape=shape, mask_type=mask_type,
        )


# -- exact selection -------------------------------------------------------------------------
def _keep_first_tied(ops: ArrayOps, keep: Array, tied: Array, surplus: int, layout: Layout) -> Array:
    """``keep`` plus the first ``surplus`` True entries of ``tied`` in canonical flat order."""
    limits = ops.selection_limits()
    if layout.is_identity:
        return ops.or_prefix(keep, tied, nth_true(ops, tied, surplus, chunk=limits.chunk) + 1)
    positions = ops.flat_nonzero(tied)  # native order: map the few tied entries only
    canonical = layout.canonical_positions(positions)
    cutoff, _ = kth_smallest(ops, [canonical], surplus, direct=limits.direct, sample=limits.sample)
    return ops.set_true(keep, ops.compress(positions, canonical <= cutoff))


def _keep_largest(ops: ArrayOps, flats: Sequence[Array], layouts: Sequence[Layout], k: int) -> list[Array]:
    """Flat keep-masks for the 1-D ``flats`` taken together in order: exactly ``k`` False
    entries, the k smallest values; the tie rule in each flat's canonical order."""
    sizes = [math.prod(f.shape) for f in flats]
    n = sum(sizes)
    if k <= 0 or k >= n:
        return [ops.full(f.shape, k <= 0, f) for f in flats]
    limits = ops.selection_limits()
    threshold, n_pruned = kth_smallest(ops, flats, k, direct=limits.direct, sample=limits.sample)
    keeps = [f > threshold for f in flats]
    if n_pruned is None:
        n_pruned = n - sum(ops.count_nonzero(keep) for keep in keeps)
    surplus = n_pruned - k  # entries equal to the threshold to keep after all
    for i, (flat, layout) in enumerate(zip(flats, layouts, strict=True)):
        if surplus <= 0:
            break
        tied = flat == threshold
        n_tied = ops.count_nonzero(tied)
        if n_tied <= surplus:
            keeps[i] = keeps[i] | tied
            surplus -= n_tied
        else:
            keeps[i] = _keep_first_tied(ops, keeps[i], tied, surplus, layout)
            surplus = 0
    return keeps


def _keep_units(ops: ArrayOps, scores: Array, layout: Layout, sparsity: float) -> Array:
    """Keep-mask over an array of unit scores: ``round(sparsity * size)`` smallest pruned."""
    flat = ops.reshape(scores, (-1,))
    k = round(sparsity * math.prod(layout.shape))
    return ops.reshape(_keep_largest(ops, [flat], [layout], k)[0], layout.shape)


# -- unstructured ----------------------------------------------------------------------------
def unstructured_mask(ops: ArrayOps, scores: Array, sparsity: float, layout: Layout | None = None) -> Array:
    """Prune the ``round(sparsity * size)`` smallest ``scores``, entry by entry (the tie rule:
    earlier canonical entries kept). NaN scores and a sparsity outside [0, 1] raise
    ``ValueError``."""
    sparsity = check_sparsity(sparsity)
    layout = _layout(scores, layout)
    _check_no_nan(ops, scores, layout)
    return _keep_units(ops, scores, layout, sparsity)


def global_unstructured_masks(ops: ArrayOps, scores_list: Sequence[Array], sparsity: float,
                              layouts: Sequence[Layout] | None = None) -> list[Array]:
    """One threshold over all ``scores_list`` together (SparseML's ``global_sparsity``):
    exactly ``round(sparsity * total size)`` entries pruned, the smallest scores of all; ties
    keep the entries first in the list, then first in each array's canonical flat order.
    Scores of different dtypes are compared in float64 (which holds each of them exactly)."""
    sparsity = check_sparsity(sparsity)
    scores_list = list(scores_list)
    layouts = [_layout(s, None) for s in scores_list] if layouts is None else list(layouts)
    for scores, layout in zip(scores_list, layouts, strict=True):
        _check_no_nan(ops, scores, layout)
    if len({str(s.dtype) for s in scores_list}) > 1:
        scores_list = [ops.astype(s, "float64") for s in scores_list]
    flats = [ops.reshape(s, (-1,)) for s in scores_list]
    keeps = _keep_largest(ops, flats, layouts, round(sparsity * sum(math.prod(f.shape) for f in flats)))
    return [ops.reshape(keep, layout.shape) for keep, layout in zip(keeps, layouts, strict=True)]


# -- group scores ----------------------------------------------------------------------------
def pairwise_sum(ops: ArrayOps, x: Array, axis: int) -> Array:
    """The float64 sum of ``x`` along ``axis`` (kept, with size 1), in a fixed order: level by
    level, entry ``i`` of the next level is ``v[2i] + v[2i+1]``, an odd last entry is carried
    up unchanged. 5 entries: ``((x0 + x1) + (x2 + x3)) + x4``; 7 entries:
    ``((x0 + x1) + (x2 + x3)) + ((x4 + x5) + x6)``. Only elementwise float64 additions, so the
    result is the same to the bit on every framework and device."""
    x = ops.astype(x, "float64")
    lead = (slice(None),) * axis
    n = x.shape[axis]
    if n == 0:
        shape = list(x.shape)
        shape[axis] = 1
        return ops.astype(ops.full(shape, False, x), "float64")
    while n > 1:
        half = n // 2
        pairs = x[lead + (slice(0, 2 * half, 2),)] + x[lead + (slice(1, 2 * half, 2),)]
        if n % 2:
            pairs = ops.concat([pairs, x[lead + (slice(n - 1, n),)]], axis)
        x, n = pairs, half + n % 2
    return x


def _native_part(layout: Layout, c: int, size: int) -> Layout:
    """``layout`` with canonical axis ``c`` cut to ``size`` entries."""
    shape = list(layout.shape)
    shape[layout.axes[c]] = size
    return Layout(tuple(shape), layout.axes)


# -- grouped masks ---------------------------------------------------------------------------
def block_mask(ops: ArrayOps, weight: Array, sparsity: float, block_shape: Sequence[int],
               layout: Layout | None = None) -> Array:
    """SparseML's ``BlockMaskCreator``: prune whole ``a x b`` blocks of canonical dims 0 and 1
    (``-1`` = the whole dimension; longer lists must end in 1s), each kernel position with its
    own blocks. Score = mean ``|w|`` (:func:`pairwise_sum` over ``b``, then over ``a``, divided
    by ``a * b``); blocks ordered (row block, column block, kernel position) for the tie rule.
    A block shape that does not divide the weight raises :class:`MaskShapeError`.

    Decided here: SparseML grouped ``a*b`` consecutive (out, in) pairs in row-major order, a
    true ``a x b`` block only when ``a == 1`` or ``b == 1``; we prune true blocks (same counts)."""
    sparsity = check_sparsity(sparsity)
    layout = _layout(weight, layout)
    shape = layout.canonical_shape
    spec = list(block_shape)
    if len(spec) < 2 or any(v != 1 for v in spec[2:]) or len(spec) > max(len(shape), 2) or not all(
        isinstance(v, int) and not isinstance(v, bool) and (v > 0 or v == -1) for v in spec
    ):
        raise ValueError(
            f"Invalid block_shape {spec!r}: expected [rows, cols] (positive ints or -1), "
            "optionally followed by 1s for the kernel dims"
        )
    _require_2d(shape, f"{spec[:2]!r} (block masks)", spec)
    full = spec + [1] * (len(shape) - len(spec))
    full = [shape[i] if v == -1 else v for i, v in enumerate(full)]
    bad = [i for i, (d, b) in enumerate(zip(shape, full, strict=True)) if d % b]
    if bad:
        i = bad[0]
        raise MaskShapeError(
            f"mask_type {spec[:2]!r} cannot be applied to a parameter of shape {list(shape)}: "
            f"Invalid block_shape {full} for parameter shape {ops.describe_shape(shape)}. "
            f"Elements of block_shape must divide parameter shape evenly (dimension {i} has "
            f"{shape[i]} entries, not a multiple of {full[i]}). Use mask_type 'block4' (which "
            "pads the last group) or 'unstructured', or exclude this parameter from the modifier",
            shape=shape, mask_type=spec,
        )
    a, b = full[0], full[1]
    split_shape, blocks, inner = layout.split({0: a, 1: b})
    sums = pairwise_sum(ops, ops.reshape(ops.abs(weight), split_shape), inner[1])
    scores = pairwise_sum(ops, sums, inner[0]) / (a * b)
    keep = _keep_units(ops, scores, blocks, sparsity)
    return ops.reshape(ops.expand(keep, split_shape), layout.shape)


def four_block_mask(ops: ArrayOps, weight: Array, sparsity: float, layout: Layout | None = None,
                    magnitude: bool = True) -> Array:
    """SparseML's ``FourBlockMaskCreator`` (``block4``): entries grouped in fours along
    canonical dim 1, the input channels (a 1-D weight along its only dim); group score = mean
    ``|w|`` (:func:`pairwise_sum` / 4). When that dim is not a multiple of 4, SparseML pads the
    last group with the mean of its real entries, so its score is the mean of its real entries:
    computed so here, their pairwise sum / their count. Groups ordered (out, kernel position...,
    group) for the tie rule, as SparseML moves dim 1 last. Example: conv1 (8, 3, 3, 3) at 0.05
    -> 72 groups of 3 real weights, 4 pruned, 12 of 216 weights zero (0.0556, not 0.05).
    ``magnitude=False``: ``weight`` holds scores already (second-order pruning), averaged as
    they are."""
    sparsity = check_sparsity(sparsity)
    layout = _layout(weight, layout)
    if math.prod(layout.shape) == 0:
        return ops.full(layout.shape, True, weight)
    if not layout.shape:  # a scalar is one group of one real entry
        return ops.reshape(four_block_mask(ops, ops.reshape(weight, (1,)), sparsity), ())
    ndim = len(layout.axes)
    g = 1 if ndim >= 2 else 0
    width, axis = layout.canonical_shape[g], layout.axes[g]
    full = width - width % 4
    segments = [(start, stop) for start, stop in ((0, full), (full, width)) if stop > start]
    lead = (slice(None),) * axis
    values = ops.abs(weight) if magnitude else weight
    parts = []  # (group scores, split shape, native shape) of the whole groups, the padded one
    for start, stop in segments:
        size = min(4, stop - start)
        native = _native_part(layout, g, stop - start)
        split_shape, groups, inner = native.split({g: size})
        part = ops.reshape(values[lead + (slice(start, stop),)], split_shape)
        parts.append((pairwise_sum(ops, part, inner[g]) / size, split_shape, native.shape))
    group_axis = groups.axes[g]
    scores = ops.concat([p[0] for p in parts], group_axis) if len(parts) > 1 else parts[0][0]
    order = (0, *range(2, ndim), 1) if ndim > 2 else tuple(range(ndim))
    keep = _keep_units(ops, scores, Layout(tuple(scores.shape), groups.axes).reorder(order), sparsity)
    pieces, offset, group_lead = [], 0, (slice(None),) * group_axis
    for part_scores, split_shape, native_shape in parts:
        count = part_scores.shape[group_axis]
        piece = keep[group_lead + (slice(offset, offset + count),)]
        pieces.append(ops.reshape(ops.expand(piece, split_shape), native_shape))
        offset += count
    return ops.concat(pieces, axis) if len(pieces) > 1 else pieces[0]


def nm_mask(ops: ArrayOps, weight: Array, n: int, m: int, layout: Layout | None = None) -> Array:
    """N:M sparsity: keep exactly the ``n`` largest ``|w|`` of every ``m`` consecutive entries
    along canonical dim 1 (the input dim; a group is ``m`` input channels at one kernel
    position); ties keep the earlier entry of a group. Dim 1 not a multiple of ``m`` raises
    :class:`MaskShapeError`. An entry is kept when fewer than ``n`` entries of its group rank
    before it (larger, or equal and earlier): ``m * (m - 1) / 2`` comparisons, no arithmetic.

    Decided here: SparseML grouped the flattened tensor (groups could straddle rows), required
    only ``size % M == 0`` and returned 4-D masks permuted; we group along the input dim."""
    if not (isinstance(n, int) and isinstance(m, int) and 0 < n <= m):
        raise ValueError(f"N:M masks need integers 0 < N <= M. Received: N={n!r}, M={m!r}")
    layout = _layout(weight, layout)
    shape = layout.canonical_shape
    if len(shape) < 2 or shape[1] % m:
        got = f"dimension 1 has {shape[1]} entries" if len(shape) >= 2 else "it has fewer than 2 dimensions"
        raise MaskShapeError(
            f"mask_type '{n}:{m}' needs dimension 1 (input channels) of the parameter to be a "
            f"multiple of {m}, but the parameter has shape {list(shape)} and {got}. Exclude "
            "this parameter from the modifier, or choose an N:M pattern whose M divides it "
            "(or mask_type 'unstructured')",
            shape=shape, mask_type=f"{n}:{m}",
        )
    if n == m:
        return ops.full(layout.shape, True, weight)
    split_shape, _, inner = layout.split({1: m})
    grouped = ops.reshape(ops.abs(weight), split_shape)
    lead = (slice(None),) * inner[1]
    entries = [grouped[lead + (slice(i, i + 1),)] for i in range(m)]
    ahead: list[Any] = [0] * m  # per entry: how many entries of its group rank before it
    for i in range(m):
        for j in range(i):
            j_first = entries[j] >= entries[i]
            ahead[i] = ahead[i] + ops.astype(j_first, "int32")
            ahead[j] = ahead[j] + ops.astype(~j_first, "int32")
    return ops.reshape(ops.concat([count < n for count in ahead], inner[1]), layout.shape)


def _slice_mask(ops: ArrayOps, weight: Array, sparsity: float, dim: int, kind: str,
                layout: Layout | None) -> Array:
    sparsity = check_sparsity(sparsity)
    layout = _layout(weight, layout)
    shape = layout.canonical_shape
    _require_2d(shape, f"'{kind}' prunes whole slices of dimension {dim} and", kind)
    sums = ops.abs(weight)
    for c in reversed(range(len(shape))):  # canonical axes, innermost first
        if c != dim:
            sums = pairwise_sum(ops, sums, layout.axes[c])
    keep = _keep_units(ops, ops.reshape(sums, (shape[dim],)), Layout.identity((shape[dim],)), sparsity)
    return ops.expand(ops.reshape(keep, sums.shape), layout.shape)


def channel_mask(ops: ArrayOps, weight: Array, sparsity: float, layout: Layout | None = None) -> Array:
    """Prune whole input channels (slices of canonical dim 1): score = L1 norm of the slice
    (:func:`pairwise_sum` over the other canonical axes, innermost first),
    ``round(sparsity * n_channels)`` channels pruned (ties: lower channel index kept)."""
    return _slice_mask(ops, weight, sparsity, 1, "channel", layout)


def filter_mask(ops: ArrayOps, weight: Array, sparsity: float, layout: Layout | None = None) -> Array:
    """Prune whole output filters (slices of canonical dim 0), scored and ranked as
    :func:`channel_mask` does channels."""
    return _slice_mask(ops, weight, sparsity, 0, "filter", layout)


# -- dispatcher ------------------------------------------------------------------------------
def mask_for(ops: ArrayOps, weight: Array, args: MaskArgs, layout: Layout | None = None) -> Array:
    """The mask of ``weight`` for checked :func:`mask_args`; scores = ``|w|``. Weights holding
    NaN or inf raise ``ValueError``. For N:M types the sparsity is the pattern's own
    (``1 - N/M``): as in SparseML, ``sparsity == 0`` gives an all-True mask and a target further
    than 1e-2 from ``1 - N/M`` raises ``ValueError`` (N:M cannot follow a gradual schedule)."""
    kind, arg, sparsity, mask_type = args
    layout = _layout(weight, layout)
    _check_finite(ops, weight, layout)
    if kind == "unstructured":
        return _keep_units(ops, ops.abs(weight), layout, sparsity)
    if kind == "block4":
        return four_block_mask(ops, weight, sparsity, layout)
    if kind == "block":
        return block_mask(ops, weight, sparsity, arg, layout)
    if kind == "nm":
        n, m = arg
        if sparsity == 0.0:
            return ops.full(layout.shape, True, weight)
        if abs((1.0 - n / m) - sparsity) > NM_TOLERANCE:
            raise ValueError(
                f"mask_type {mask_type!r} keeps {n} of every {m} weights (sparsity "
                f"{1.0 - n / m:g}), so the target sparsity must be within {NM_TOLERANCE:g} of "
                f"{1.0 - n / m:g} (or 0). Received: sparsity={sparsity:g}"
            )
        return nm_mask(ops, weight, n, m, layout)
    return _slice_mask(ops, weight, sparsity, 1 if kind == "channel" else 0, kind, layout)


def compute_mask(ops: ArrayOps, weight: Array, sparsity: float, mask_type: Any = "unstructured",
                 layout: Layout | None = None) -> Array:
    """The mask of ``weight`` at ``sparsity`` for a recipe's ``mask_type``: the checks in order
    (mask type, sparsity, NaN/inf weights, then the shape), then :func:`mask_for`."""
    return mask_for(ops, weight, mask_args(mask_type, sparsity), layout)
