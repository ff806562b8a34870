"""Pruning masks as pure tensor functions: scores in, a ``torch.bool`` mask out (True = keep).

Nothing here touches a module or autograd: every function works under ``torch.no_grad`` on
detached tensors and returns a new mask of the weight's shape; :mod:`.pruning` is the one place
that writes masks into a model. The rules are SparseML's (``mask_creator.py``, reference
section 3.2), with the decisions listed below where SparseML was random, buggy or silent.

Counting rule (every mask type): ``k = round(sparsity * count)`` units are pruned, with Python's
``round`` (half to even) on the float product, exactly as SparseML. A unit is an entry
(unstructured), a block (``[a, b]``, ``block4``) or a slice (``channel``, ``filter``).

Tie rule (decided here): the ``k`` units with the smallest scores are pruned; among units whose
score equals the k-th smallest, the ones that come *first* in flat (row-major) order are kept
and the later ones pruned. This is what SparseML's ``_flip_threshold_mask_vals`` does when the
threshold is above the minimum; where SparseML instead picked among tied minimum values (many
existing zeros) with ``random.Random(42)``, we apply the same first-kept rule, so a mask is a
deterministic function of its scores on every device. Zeros always go first: ``|0|`` is the
smallest magnitude.

Selection is exact and fast: the k-th smallest score is found by bracketing it with a fixed-seed
random sample, counting the entries below the bracket and running ``torch.kthvalue`` only on
the few entries inside it (falling back to ``torch.kthvalue`` on everything if the bracket
misses). The result is the same value ``torch.kthvalue`` returns, in a few streaming passes and
without concatenating or copying the scores (only small inputs, up to ``_DIRECT_SELECT``
entries, and a missed bracket go to ``torch.kthvalue`` directly), which also keeps global masks
memory-light.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from recipe_spec.mask_types import parse_mask_type

__all__ = [
    "MaskShapeError",
    "parse_mask_type",
    "unstructured_mask",
    "global_unstructured_masks",
    "block_mask",
    "four_block_mask",
    "nm_mask",
    "channel_mask",
    "filter_mask",
    "compute_mask",
]

#: Tensors (or lists of them) up to this many entries go straight to ``torch.kthvalue``.
_DIRECT_SELECT = 1 << 16
#: Size of the random sample used to bracket the k-th smallest score.
_SAMPLE = 1 << 14
#: Entries counted per chunk when locating the n-th tied entry.
_CHUNK = 1 << 14
#: SparseML's tolerance between a recipe's target and an N:M pattern's own sparsity.
_NM_TOLERANCE = 1e-2


class MaskShapeError(ValueError):
    """A mask type cannot be applied to a parameter of this shape.

    The message names the shape, the mask type and how to fix the recipe; ``shape`` and
    ``mask_type`` are kept as attributes for callers that add the parameter's name.
    """

    def __init__(self, message: str, *, shape: Sequence[int] = (), mask_type: Any = None) -> None:
        super().__init__(message)
        self.shape = tuple(int(d) for d in shape)
        self.mask_type = mask_type


# -- mask types ------------------------------------------------------------------------------
# -- validation ------------------------------------------------------------------------------
def _check_sparsity(sparsity: Any) -> float:
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)):
        raise ValueError(f"sparsity must be a number in [0, 1]. Received: sparsity={sparsity!r}")
    value = float(sparsity)
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        raise ValueError(f"sparsity must be in [0, 1]. Received: sparsity={sparsity!r}")
    return value


def _check_no_nan(scores: torch.Tensor) -> None:
    # A NaN makes the sum NaN; so does +inf with -inf, hence the exact check only then.
    if scores.is_floating_point() and bool(torch.isnan(scores.sum())) and bool(torch.isnan(scores).any()):
        raise ValueError(
            f"scores of shape {list(scores.shape)} contain NaN values, which cannot be ranked"
        )


def _check_finite(weight: torch.Tensor) -> None:
    # A finite sum proves every entry finite; only a non-finite one (which can also be an
    # overflow) needs the exact, slower check.
    if (
        weight.is_floating_point()
        and not bool(torch.isfinite(weight.sum()))
        and not bool(torch.isfinite(weight).all())
    ):
        raise ValueError(
            f"weight of shape {list(weight.shape)} contains NaN or infinite values, so its "
            "magnitudes cannot be ranked to build a mask (the training probably diverged: "
            "lower the learning rate or check the loss)"
        )


# -- exact selection -------------------------------------------------------------------------
def _count(t: torch.Tensor) -> int:
    return int(torch.count_nonzero(t))


def _kth_smallest(chunks: Sequence[torch.Tensor], k: int) -> tuple[torch.Tensor, int | None]:
    """The k-th smallest value (1-based) over the flat ``chunks`` taken together, as a 0-d
    tensor: exactly what ``torch.kthvalue(torch.cat(chunks), k)`` gives, computed by
    bracketing it with a fixed-seed sample and selecting inside the bracket only. Also the
    number of entries <= that value when the bracket gives it for free (else None)."""
    chunks = [c for c in chunks if c.numel()]
    n = sum(c.numel() for c in chunks)
    if n <= _DIRECT_SELECT:
        flat = chunks[0] if len(chunks) == 1 else torch.cat(chunks)
        return torch.kthvalue(flat, k).values, None

    gen = torch.Generator().manual_seed(0)
    sample = torch.cat([
        c[torch.randint(0, c.numel(), (max(1, round(_SAMPLE * c.numel() / n)),),
                        generator=gen).to(c.device)]
        for c in chunks
    ])
    ns = sample.numel()
    q = k / n
    margin = 6.0 * math.sqrt(ns * q * (1.0 - q)) + 16.0
    lo_rank, hi_rank = math.floor(q * ns - margin), math.ceil(q * ns + margin)
    lo = torch.kthvalue(sample, lo_rank + 1).values if lo_rank >= 0 else None
    hi = torch.kthvalue(sample, hi_rank + 1).values if hi_rank < ns else None

    if lo is not None or hi is not None:
        # one streaming pass per bound: count the entries below the bracket, flag those in it
        below, inside = 0, []
        for c in chunks:
            if lo is None:
                flags = c <= hi
            else:
                flags = c >= lo
                below += c.numel() - _count(flags)
                if hi is not None:
                    flags.logical_and_(c <= hi)
            inside.append(flags)
        rank = k - below
        if rank >= 1:
            if lo is not None and hi is not None and bool(lo == hi):  # a run of ties
                n_inside = sum(_count(f) for f in inside)
                if rank <= n_inside:
                    return lo.clone(), below + n_inside
            else:
                candidates = torch.cat([c[f] for c, f in zip(chunks, inside, strict=True)])
                if rank <= candidates.numel():
                    threshold = torch.kthvalue(candidates, rank).values
                    return threshold, below + _count(candidates <= threshold)
    # the sample missed (adversarial data); exact and slower
    flat = chunks[0] if len(chunks) == 1 else torch.cat(chunks)
    return torch.kthvalue(flat, k).values, None


def _nth_true(flags: torch.Tensor, nth: int) -> int:
    """Flat index of the ``nth`` (1-based) True of a flat bool tensor, without materializing
    all True indices (counts per chunk, then ``nonzero`` in one chunk only)."""
    n = flags.numel()
    full = n - n % _CHUNK
    before = 0
    if full:
        cum = flags[:full].view(-1, _CHUNK).sum(1).cumsum(0)
        block = int(torch.searchsorted(cum, torch.tensor([nth], device=cum.device)))
        if block < cum.numel():
            before = int(cum[block - 1]) if block else 0
            local = flags[block * _CHUNK:(block + 1) * _CHUNK].nonzero().flatten()
            return block * _CHUNK + int(local[nth - before - 1])
        before = int(cum[-1])
    local = flags[full:].nonzero().flatten()
    return full + int(local[nth - before - 1])


def _keep_largest(chunks: Sequence[torch.Tensor], k: int) -> list[torch.Tensor]:
    """Flat keep-masks for ``chunks`` taken together in order: exactly ``k`` False entries,
    the k smallest values; among entries equal to the threshold the earliest are kept (the
    module's tie rule)."""
    n = sum(c.numel() for c in chunks)
    if k <= 0:
        return [torch.ones(c.shape, dtype=torch.bool, device=c.device) for c in chunks]
    if k >= n:
        return [torch.zeros(c.shape, dtype=torch.bool, device=c.device) for c in chunks]
    threshold, n_pruned = _kth_smallest(chunks, k)
    keeps = [c > threshold for c in chunks]
    if n_pruned is None:
        n_pruned = n - sum(_count(m) for m in keeps)
    surplus = n_pruned - k  # entries equal to the threshold to keep after all
    for chunk, keep in zip(chunks, keeps, strict=True):
        if surplus <= 0:
            break
        tied = chunk == threshold
        n_tied = _count(tied)
        if n_tied <= surplus:
            keep |= tied
            surplus -= n_tied
        else:
            last = _nth_true(tied, surplus) + 1
            keep[:last] |= tied[:last]
            surplus = 0
    return keeps


def _keep_units(scores: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Keep-mask over a tensor of unit scores: round(sparsity * numel) smallest pruned."""
    flat = scores.reshape(-1)
    return _keep_largest([flat], round(sparsity * flat.numel()))[0].view(scores.shape)


# -- unstructured ----------------------------------------------------------------------------
@torch.no_grad()
def unstructured_mask(scores: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Prune the ``round(sparsity * numel)`` smallest ``scores``, entry by entry.

    Exactly that many entries are False (``k = 0`` -> all True, ``sparsity = 1`` -> all
    False); ties at the threshold follow the module's tie rule (earlier entries kept), so the
    same scores always give the same mask. ``sparsity`` outside [0, 1] or NaN scores raise
    ``ValueError``.

    >>> unstructured_mask(torch.tensor([0.3, 0.1, 0.2, 0.1]), 0.5).tolist()
    [True, False, True, False]
    """
    sparsity = _check_sparsity(sparsity)
    scores = scores.detach()
    _check_no_nan(scores)
    return _keep_units(scores, sparsity)


@torch.no_grad()
def global_unstructured_masks(scores_list: Sequence[torch.Tensor], sparsity: float) -> list[torch.Tensor]:
    """One threshold over all ``scores_list`` together (SparseML's ``global_sparsity``).

    Exactly ``round(sparsity * total_numel)`` entries are False across the list, the smallest
    scores of all tensors; the per-tensor counts follow from the scores. The list is taken in
    order as one flat vector for the tie rule, but not concatenated (above 65,536 entries in
    all): the threshold comes from a bracketing sample and per-tensor counts, so the extra
    memory is the bool masks plus the few entries near the threshold.
    """
    sparsity = _check_sparsity(sparsity)
    tensors = [s.detach() for s in scores_list]
    for t in tensors:
        _check_no_nan(t)
    flats = [t.reshape(-1) for t in tensors]
    k = round(sparsity * sum(f.numel() for f in flats))
    keeps = _keep_largest(flats, k)
    return [keep.view(t.shape) for keep, t in zip(keeps, tensors, strict=True)]


# -- grouped masks ---------------------------------------------------------------------------
def _group_means(groups: torch.Tensor) -> torch.Tensor:
    """Mean of each row of a (G, g) tensor, always through the same contiguous kernel so that
    equal groups built by different mask types score bit-identically."""
    return groups.contiguous().mean(dim=1)


@torch.no_grad()
def block_mask(weight: torch.Tensor, sparsity: float, block_shape: Sequence[int]) -> torch.Tensor:
    """SparseML's ``BlockMaskCreator``: prune whole ``a x b`` blocks of dims 0 and 1.

    ``block_shape = [a, b]`` (``-1`` = the whole dimension; longer lists must end in 1s) tiles
    the (out, in) dims of the weight; for weights with more dims (conv kernels) each kernel
    position has its own blocks, as in SparseML. Block score = mean ``|w|``;
    ``round(sparsity * n_blocks)`` blocks pruned (tie rule: blocks ordered by
    (row block, column block, kernel position)). A block shape that does not divide the weight
    raises :class:`MaskShapeError`; there is no padding (use ``block4`` for that).

    Decided here: SparseML grouped ``a*b`` consecutive (out, in) pairs in row-major order, which
    is a true ``a x b`` block only when ``a == 1`` or ``b == 1`` (``[2, 2]`` pruned 1x4 strips);
    we prune true ``a x b`` blocks. Counts are the same either way.
    """
    sparsity = _check_sparsity(sparsity)
    weight = weight.detach()
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
            f"Invalid block_shape {full} for parameter shape {weight.shape}. Elements of "
            f"block_shape must divide parameter shape evenly (dimension {i} has {shape[i]} "
            f"entries, not a multiple of {full[i]}). Use mask_type 'block4' (which pads the last "
            "group) or 'unstructured', or exclude this parameter from the modifier",
            shape=shape, mask_type=spec,
        )
    a, b = full[0], full[1]
    rows, cols = shape[0] // a, shape[1] // b
    kernel = math.prod(shape[2:])
    tiles = weight.abs().reshape(rows, a, cols, b, kernel).permute(0, 2, 4, 1, 3)
    scores = _group_means(tiles.reshape(-1, a * b)).view(rows, cols, kernel)
    keep = _keep_units(scores, sparsity)
    mask = keep.view(rows, 1, cols, 1, kernel).expand(rows, a, cols, b, kernel)
    return mask.reshape(shape)


@torch.no_grad()
def four_block_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """SparseML's ``FourBlockMaskCreator`` (``mask_type: block4``).

    Entries are grouped in fours along dim 1, the input channels (for weights with more than
    2 dims, dim 1 is first moved last, so a group is 4 input channels at one kernel position;
    a 1-D weight is grouped along its only dim). When that dim is not a multiple of 4 the last
    group is padded with the mean of its real entries, so its score is their mean. Group score
    = mean ``|w|``; ``round(sparsity * n_groups)`` groups pruned, then expanded back (padding
    dropped). Example: conv1 (8, 3, 3, 3) at 0.05 -> 72 groups of 3 real weights, 4 pruned,
    12 of 216 weights zero (0.0556, not 0.05).
    """
    sparsity = _check_sparsity(sparsity)
    weight = weight.detach()
    shape = tuple(weight.shape)
    if weight.numel() == 0:
        return torch.ones(shape, dtype=torch.bool, device=weight.device)
    if not shape:  # a scalar is one group of one real entry
        return four_block_mask(weight.reshape(1), sparsity).reshape(())
    scores = weight.abs()
    moved = scores.dim() > 2
    if moved:
        scores = scores.movedim(1, -1)
    width = scores.shape[-1]
    remainder = width % 4
    if remainder:
        pad = scores[..., -remainder:].mean(dim=-1, keepdim=True)
        scores = torch.cat([scores, pad.expand(*scores.shape[:-1], 4 - remainder)], dim=-1)
    outer = scores.shape[:-1]
    groups = scores.reshape(-1, 4)
    keep = _keep_units(_group_means(groups), sparsity)
    mask = keep.view(*outer, -1, 1).expand(*outer, scores.shape[-1] // 4, 4)
    mask = mask.reshape(*outer, scores.shape[-1])[..., :width]
    if moved:
        mask = mask.movedim(-1, 1)
    return mask.contiguous()


@torch.no_grad()
def nm_mask(weight: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """N:M sparsity (``mask_type: "N:M"``, ``"tensorrt"`` = 2:4): keep exactly the ``n``
    largest ``|w|`` of every ``m`` consecutive entries along dim 1 (the input dim; for weights
    with more than 2 dims, dim 1 is moved last so a group is ``m`` input channels at one
    kernel position). Ties: the earlier entry of a group is kept. Dim 1 not a multiple of
    ``m`` raises :class:`MaskShapeError`.

    Decided here: SparseML grouped the flattened tensor (so groups could straddle rows), only
    required ``numel % M == 0``, and returned 4-D masks in the permuted layout; we group along
    the input dim only and return the weight's shape.
    """
    if not (isinstance(n, int) and isinstance(m, int) and 0 < n <= m):
        raise ValueError(f"N:M masks need integers 0 < N <= M. Received: N={n!r}, M={m!r}")
    weight = weight.detach()
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
    scores = weight.abs()
    moved = scores.dim() > 2
    if moved:
        scores = scores.movedim(1, -1)
    groups = scores.reshape(-1, m)
    order = torch.sort(groups, dim=1, descending=True, stable=True).indices[:, :n]
    mask = torch.zeros(groups.shape, dtype=torch.bool, device=weight.device)
    mask.scatter_(1, order, True)
    mask = mask.view(scores.shape)
    if moved:
        mask = mask.movedim(-1, 1)
    return mask.contiguous()


def _slice_mask(weight: torch.Tensor, sparsity: float, dim: int, kind: str) -> torch.Tensor:
    sparsity = _check_sparsity(sparsity)
    weight = weight.detach()
    shape = tuple(weight.shape)
    if len(shape) < 2:
        raise MaskShapeError(
            f"mask_type '{kind}' prunes whole slices of dimension {dim} and needs a parameter "
            f"with 2 or more dimensions, got shape {list(shape)}. Exclude this parameter "
            "(biases and norms are not prunable) or use mask_type 'unstructured'",
            shape=shape, mask_type=kind,
        )
    others = [d for d in range(len(shape)) if d != dim]
    scores = weight.abs().sum(dim=others)
    keep = _keep_units(scores, sparsity)
    view = [1] * len(shape)
    view[dim] = shape[dim]
    return keep.view(view).expand(shape).contiguous()


@torch.no_grad()
def channel_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Prune whole input channels (slices of dim 1): score = L1 norm of the slice,
    ``round(sparsity * n_channels)`` channels pruned (tie rule: lower channel index kept)."""
    return _slice_mask(weight, sparsity, 1, "channel")


@torch.no_grad()
def filter_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Prune whole output filters (slices of dim 0): score = L1 norm of the slice,
    ``round(sparsity * n_filters)`` filters pruned (tie rule: lower filter index kept)."""
    return _slice_mask(weight, sparsity, 0, "filter")


# -- dispatcher ------------------------------------------------------------------------------
@torch.no_grad()
def compute_mask(weight: torch.Tensor, sparsity: float, mask_type: Any = "unstructured") -> torch.Tensor:
    """The mask of ``weight`` at ``sparsity`` for a recipe's ``mask_type``; scores = ``|w|``.

    Weights holding NaN or inf raise ``ValueError`` (the caller adds the parameter's name and
    the step). For N:M types the sparsity is the pattern's own (``1 - N/M``): as in SparseML,
    ``sparsity == 0`` gives an all-True mask and any target further than 1e-2 from ``1 - N/M``
    raises ``ValueError`` (so N:M cannot follow a gradual init -> final schedule).
    """
    kind, arg = parse_mask_type(mask_type)
    sparsity = _check_sparsity(sparsity)
    weight = weight.detach()
    _check_finite(weight)
    if kind == "unstructured":
        return _keep_units(weight.abs(), sparsity)
    if kind == "block4":
        return four_block_mask(weight, sparsity)
    if kind == "block":
        return block_mask(weight, sparsity, arg)
    if kind == "nm":
        n, m = arg
        if sparsity == 0.0:
            return torch.ones(weight.shape, dtype=torch.bool, device=weight.device)
        if abs((1.0 - n / m) - sparsity) > _NM_TOLERANCE:
            raise ValueError(
                f"mask_type {mask_type!r} keeps {n} of every {m} weights (sparsity "
                f"{1.0 - n / m:g}), so the target sparsity must be within {_NM_TOLERANCE:g} of "
                f"{1.0 - n / m:g} (or 0). Received: sparsity={sparsity:g}"
            )
        return nm_mask(weight, n, m)
    if kind == "channel":
        return channel_mask(weight, sparsity)
    return filter_mask(weight, sparsity)
