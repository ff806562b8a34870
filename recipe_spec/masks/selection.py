"""Exact selection, written once over the array operations a backend supplies
(:class:`recipe_spec.masks.ops.ArrayOps`): the k-th smallest value of one or more flat arrays
taken together (:func:`kth_smallest`), and the position of the n-th True of a flat bool array
(:func:`nth_true`). Imported by :mod:`recipe_spec.masks` and the backends, never by
``import recipe_spec``.

A library's own selection (``torch.kthvalue``, NumPy's ``np.partition``) is exact but pays for
every entry, and introselect is pathologically slow on long runs of equal values: over
ResNet-50's 25.5M weights with 70% zeros (every gradual-pruning update after the first),
``np.partition`` takes over ten times as long as on the same weights without them. Here the
library selects only among a small sample and the few entries near the answer; the other
entries are only compared and counted, in streaming passes that do not care how many of them
are equal.

The backend decides the sizes (:class:`SelectionLimits`, from ``ops.selection_limits()``): at
most ``direct`` entries go straight to the library's selection, ``sample`` entries bracket the
answer of larger inputs, ``chunk`` flags are counted per block by :func:`nth_true`.

>>> import numpy as np
>>> from recipe_spec.masks.numpy_ops import NUMPY_OPS
>>> x = np.repeat(np.arange(10.0), 1000)  # 10,000 entries, long runs of ties
>>> float(kth_smallest(NUMPY_OPS, [x[::-1]], 7001, direct=1000, sample=256)[0])
7.0
>>> nth_true(NUMPY_OPS, x == 3.0, 5, chunk=64)
3004
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .ops import Array, ArrayOps

__all__ = ["kth_smallest", "nth_true"]

#: How wide the bracket is around the sample's estimate of the answer: standard deviations of
#: the sample rank (binomial: the draws are uniform, with replacement), plus a few ranks for
#: small samples. Unless the values were placed where the fixed-seed draws fall, six deviations
#: miss (and the exact fallback runs) with a probability of about 2e-9.
_SIGMAS = 6.0
_SLACK = 16.0
#: The seed of the sample: fixed, so a selection's cost depends only on the values.
_SEED = 0


def _size(x: Array) -> int:
    return math.prod(x.shape)


def _joined(ops: ArrayOps, flats: Sequence[Array]) -> Array:
    return flats[0] if len(flats) == 1 else ops.concat(flats, 0)


def kth_smallest(ops: ArrayOps, flats: Sequence[Array], k: int, *, direct: int,
                 sample: int) -> tuple[Array, int | None]:
    """The k-th smallest value (1-based) of the 1-D ``flats`` taken together (one dtype, no
    NaN), as a 0-d array or scalar of their dtype: the value a full sort puts at position
    ``k``. Also the number of entries ``<=`` it when that comes for free, else None. The flats
    are not modified, and not concatenated either above ``direct`` entries in all (unless the
    sample misses).

    Up to ``direct`` entries in all: ``ops.kth_direct`` on them. Above: ``ops.random_sample``
    draws about ``sample`` entries (from each flat in proportion to its size, a fixed seed),
    and two selections in the sample give a bracket ``lo <= hi`` around the sample's estimate
    of the answer, ``6 sqrt(s q (1 - q)) + 16`` sample ranks either side (``s`` drawn,
    ``q = k / n``). One pass per flat counts the ``below`` entries ``< lo`` and keeps those in
    ``[lo, hi]``; ``ops.kth_direct`` selects among those only.

    Why this is exact, whatever the sample: a full sort puts the ``below`` entries ``< lo``
    first, then the entries in ``[lo, hi]``, then those ``> hi``. So when
    ``below < k <= below + inside``, the k-th smallest value is the ``(k - below)``-th smallest
    of the entries in ``[lo, hi]``, and exactly ``below + (those <= it)`` entries are ``<=`` it.
    (``lo == hi``: every entry inside equals ``lo``, which is then the answer.) A bound the
    estimate puts outside the sample is left out: no ``lo`` means ``below = 0``, no ``hi``
    means no upper limit. The sample only decides whether the answer falls in the bracket;
    when it does not (unlucky or adversarial data, or a sample too small to leave room for a
    bound), the selection runs ``ops.kth_direct`` on all entries: slower, and the same value.
    """
    flats = [f for f in flats if _size(f)]
    sizes = [_size(f) for f in flats]
    n = sum(sizes)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}] (the number of entries). Received: k={k}")
    if n <= direct:
        return ops.kth_direct(_joined(ops, flats), k), None

    drawn = ops.random_sample(flats, [max(1, round(sample * size / n)) for size in sizes], _SEED)
    ns = _size(drawn)
    q = k / n
    margin = _SIGMAS * math.sqrt(ns * q * (1.0 - q)) + _SLACK
    lo_rank, hi_rank = math.floor(q * ns - margin), math.ceil(q * ns + margin)
    lo = ops.kth_direct(drawn, lo_rank + 1) if lo_rank >= 0 else None
    hi = ops.kth_direct(drawn, hi_rank + 1) if hi_rank < ns else None

    if lo is not None or hi is not None:
        below, inside = 0, []  # entries < lo; per flat, the flags of the entries in [lo, hi]
        for f, size in zip(flats, sizes, strict=True):
            if lo is None:
                flags = f <= hi
            else:
                flags = f >= lo
                below += size - ops.count_nonzero(flags)
                if hi is not None:
                    flags &= f <= hi  # our own array: in place where the library can
            inside.append(flags)
        rank = k - below
        if rank >= 1:
            if lo is not None and hi is not None and bool(lo == hi):  # a run of ties
                n_inside = sum(ops.count_nonzero(flags) for flags in inside)
                if rank <= n_inside:
                    return lo, below + n_inside
            else:
                candidates = _joined(ops, [ops.compress(f, flags)
                                           for f, flags in zip(flats, inside, strict=True)])
                if rank <= _size(candidates):
                    threshold = ops.kth_direct(candidates, rank)
                    return threshold, below + ops.count_nonzero(candidates <= threshold)
    # the sample missed: exact on everything, and slower
    return ops.kth_direct(_joined(ops, flats), k), None


def nth_true(ops: ArrayOps, flags: Array, nth: int, *, chunk: int) -> int:
    """The flat position of the ``nth`` (1-based) True of the 1-D bool array ``flags``, which
    holds at least ``nth`` of them.

    Without listing every True position: the Trues of each block of ``chunk`` flags are
    counted (``ops.row_counts``) and summed up (``ops.cumsum``); the block where the running
    count first reaches ``nth`` is the number of blocks whose running count is still below it,
    and ``ops.flat_nonzero`` runs on that block only (or on the last, partial block)."""
    blocks = _size(flags) // chunk
    start, before = 0, 0
    if blocks:
        counts = ops.cumsum(ops.row_counts(ops.reshape(flags[:blocks * chunk], (blocks, chunk))))
        block = ops.count_nonzero(counts < nth)  # == blocks: the nth True is in the partial block
        start = block * chunk
        before = int(counts[block - 1]) if block else 0
    positions = ops.flat_nonzero(flags[start:start + chunk])
    return start + int(positions[nth - before - 1])
