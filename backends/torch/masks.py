"""Pruning masks for PyTorch: ``torch.bool`` masks (True = keep), the rules of
:mod:`recipe_spec.masks` (counting, ties, float64 group scores, SparseML's decisions), which
holds every algorithm; this module supplies torch's array operations (:class:`TorchOps`) and
the public entry points. A torch weight is already in canonical layout.

Nothing here touches a module or autograd: every function works under ``torch.no_grad`` on
detached tensors and returns a new mask of the weight's shape; :mod:`.pruning` is the one place
that writes masks into a model.

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
from recipe_spec import masks as core
from recipe_spec.array_ops import InPlaceOps
from recipe_spec.mask_types import parse_mask_type
from recipe_spec.masks import MaskShapeError

__all__ = [
    "MaskShapeError",
    "TorchOps",
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


_DTYPES = {"float64": torch.float64, "int32": torch.int32}


class TorchOps(InPlaceOps):
    """:class:`recipe_spec.array_ops.ArrayOps` over torch tensors (any device)."""

    def describe_shape(self, shape: Sequence[int]) -> str:
        return str(torch.Size(shape))

    def is_floating(self, x: torch.Tensor) -> bool:
        return x.is_floating_point()

    def astype(self, x: torch.Tensor, dtype: str) -> torch.Tensor:
        return x.to(_DTYPES[dtype])

    def isnan(self, x: torch.Tensor) -> torch.Tensor:
        return torch.isnan(x)

    def isfinite(self, x: torch.Tensor) -> torch.Tensor:
        return torch.isfinite(x)

    def sum_all(self, x: torch.Tensor) -> float:
        return float(x.sum())

    def count_nonzero(self, x: torch.Tensor) -> int:
        return _count(x)

    def full(self, shape: Sequence[int], value: bool, like: torch.Tensor) -> torch.Tensor:
        return torch.full(tuple(shape), value, dtype=torch.bool, device=like.device)

    def expand(self, x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        return x.expand(tuple(shape)).contiguous()

    def concat(self, xs: Sequence[torch.Tensor], axis: int) -> torch.Tensor:
        return torch.cat(list(xs), dim=axis)

    def kth_smallest(self, flats: Sequence[torch.Tensor], k: int) -> tuple[torch.Tensor, int | None]:
        return _kth_smallest(flats, k)

    def nth_true(self, flags: torch.Tensor, nth: int) -> int:
        return _nth_true(flags, nth)

    def flat_nonzero(self, flags: torch.Tensor) -> torch.Tensor:
        return flags.reshape(-1).nonzero().flatten()


_OPS = TorchOps()


# -- public entry points (rules and messages: recipe_spec.masks) -----------------------------
@torch.no_grad()
def unstructured_mask(scores: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Prune the ``round(sparsity * numel)`` smallest ``scores``, entry by entry.

    Exactly that many entries are False (``k = 0`` -> all True, ``sparsity = 1`` -> all
    False); ties at the threshold keep the earlier entries, so the same scores always give the
    same mask. ``sparsity`` outside [0, 1] or NaN scores raise ``ValueError``.

    >>> unstructured_mask(torch.tensor([0.3, 0.1, 0.2, 0.1]), 0.5).tolist()
    [True, False, True, False]
    """
    return core.unstructured_mask(_OPS, scores.detach(), sparsity)


@torch.no_grad()
def global_unstructured_masks(scores_list: Sequence[torch.Tensor], sparsity: float) -> list[torch.Tensor]:
    """One threshold over all ``scores_list`` together (SparseML's ``global_sparsity``).

    Exactly ``round(sparsity * total_numel)`` entries are False across the list, the smallest
    scores of all tensors. The list is taken in order as one flat vector for the tie rule, but
    not concatenated (above 65,536 entries in all): the threshold comes from a bracketing
    sample and per-tensor counts, so the extra memory is the bool masks plus the few entries
    near the threshold.
    """
    return core.global_unstructured_masks(_OPS, [s.detach() for s in scores_list], sparsity)


@torch.no_grad()
def block_mask(weight: torch.Tensor, sparsity: float, block_shape: Sequence[int]) -> torch.Tensor:
    """SparseML's ``BlockMaskCreator``: prune whole ``a x b`` blocks of dims 0 and 1 (see
    :func:`recipe_spec.masks.block_mask`); a block shape that does not divide the weight raises
    :class:`MaskShapeError`."""
    return core.block_mask(_OPS, weight.detach(), sparsity, block_shape)


@torch.no_grad()
def four_block_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """SparseML's ``FourBlockMaskCreator`` (``mask_type: block4``): groups of 4 input channels,
    the last one padded (see :func:`recipe_spec.masks.four_block_mask`)."""
    return core.four_block_mask(_OPS, weight.detach(), sparsity)


@torch.no_grad()
def nm_mask(weight: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """N:M sparsity (``"N:M"``, ``"tensorrt"`` = 2:4): the ``n`` largest ``|w|`` of every ``m``
    consecutive input channels kept (see :func:`recipe_spec.masks.nm_mask`)."""
    return core.nm_mask(_OPS, weight.detach(), n, m)


@torch.no_grad()
def channel_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Prune whole input channels (slices of dim 1) by L1 norm."""
    return core.channel_mask(_OPS, weight.detach(), sparsity)


@torch.no_grad()
def filter_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Prune whole output filters (slices of dim 0) by L1 norm."""
    return core.filter_mask(_OPS, weight.detach(), sparsity)


@torch.no_grad()
def compute_mask(weight: torch.Tensor, sparsity: float, mask_type: Any = "unstructured") -> torch.Tensor:
    """The mask of ``weight`` at ``sparsity`` for a recipe's ``mask_type``; scores = ``|w|``.

    Weights holding NaN or inf raise ``ValueError`` (the caller adds the parameter's name and
    the step). For N:M types the sparsity is the pattern's own (``1 - N/M``): ``sparsity == 0``
    gives an all-True mask and a target further than 1e-2 from ``1 - N/M`` raises
    ``ValueError``.
    """
    return core.compute_mask(_OPS, weight.detach(), sparsity, mask_type)
