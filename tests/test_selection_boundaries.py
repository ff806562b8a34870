"""Exact selection (recipe_spec/masks/selection.py) at its edges: k on either end, an input of
exactly ``direct`` entries, samples of one entry per piece, the bracket's documented width
(``6 sqrt(s q (1 - q)) + 16`` sample ranks either side of ``q s``) and which selections it
leads to. Every expected value comes from a dense reference (``np.sort``, counting with
NumPy), never from the code under test. Found by mutation testing (docs/mutation.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from recipe_spec.masks.numpy_ops import NUMPY_OPS as NP
from recipe_spec.masks.numpy_ops import NumpyOps
from recipe_spec.masks.selection import kth_smallest, nth_true


class Recording(NumpyOps):
    """NumPy ops that record each ``kth_direct`` input size and each drawn sample."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.counts: list[list[int]] = []
        self.drawn: list[np.ndarray] = []

    def kth_direct(self, flat: np.ndarray, k: int) -> np.generic:
        self.sizes.append(flat.shape[0])
        return super().kth_direct(flat, k)

    def random_sample(self, flats, counts, seed):  # type: ignore[no-untyped-def]
        self.counts.append(list(counts))
        out = super().random_sample(flats, counts, seed)
        self.drawn.append(out)
        return out


def test_k_on_either_end_and_outside() -> None:
    x = np.array([3.0, 1.0, 2.0])
    for flats in ([x], [x[:0], x, x[:0]]):
        assert kth_smallest(NP, flats, 1, direct=64, sample=256)[0] == 1.0
        assert kth_smallest(NP, flats, 3, direct=64, sample=256)[0] == 3.0
        for k in (0, 4):
            with pytest.raises(ValueError, match=rf"^k must be in \[1, 3\] \(the number of entries\). Received: k={k}$"):
                kth_smallest(NP, flats, k, direct=64, sample=256)
    with pytest.raises(ValueError, match=r"k must be in \[1, 0\]"):
        kth_smallest(NP, [x[:0]], 1, direct=64, sample=256)


def test_direct_up_to_exactly_its_limit() -> None:
    x = np.random.default_rng(1).standard_normal(100)
    ops = Recording()
    value, n_le = kth_smallest(ops, [x], 50, direct=100, sample=32)
    assert (value, n_le, ops.sizes, ops.counts) == (np.sort(x)[49], None, [100], [])
    ops = Recording()
    value, n_le = kth_smallest(ops, [x], 50, direct=99, sample=32)  # one more than direct: sampled
    assert value == np.sort(x)[49] and ops.counts == [[32]]
    assert (ops.sizes, n_le) == expected_path(x, 50, ops.drawn[0]) == ([100], None)  # too few for a bracket


@pytest.mark.parametrize(("sizes", "sample", "counts"), [
    ((30, 70), 10, [3, 7]),
    ((30, 70), 1, [1, 1]),  # round(0.3) = 0: at least one from each piece
    ((5, 995), 100, [1, 100]),  # round(0.5) = 0 (to even), round(99.5) = 100
    ((250, 750), 256, [64, 192]),
])
def test_sample_in_proportion_to_each_piece(sizes: tuple[int, int], sample: int, counts: list[int]) -> None:
    rng = np.random.default_rng(2)
    flats = [rng.standard_normal(s) for s in sizes]
    ops = Recording()
    value, _ = kth_smallest(ops, flats, 17, direct=10, sample=sample)
    assert ops.counts == [counts] and value == np.sort(np.concatenate(flats))[16]


def expected_path(x: np.ndarray, k: int, drawn: np.ndarray) -> tuple[list[int], int | None]:
    """The selections the documented bracket leads to, and the count of entries <= the answer,
    worked out with np.sort and counting."""
    n, ns = len(x), len(drawn)
    q = k / n
    margin = 6 * math.sqrt(ns * q * (1 - q)) + 16
    lo_rank, hi_rank = math.floor(q * ns - margin), math.ceil(q * ns + margin)
    ordered = np.sort(drawn)
    lo = ordered[lo_rank] if lo_rank >= 0 else None
    hi = ordered[hi_rank] if hi_rank < ns else None
    sizes = [ns] * ((lo is not None) + (hi is not None))
    answer = np.sort(x)[k - 1]
    if lo is None and hi is None:
        return [n], None
    inside = np.ones(n, bool) if lo is None else x >= lo
    if hi is not None:
        inside &= x <= hi
    below = 0 if lo is None else int(np.count_nonzero(x < lo))
    if 1 <= k - below <= int(inside.sum()):
        if lo is not None and hi is not None and lo == hi:
            return sizes, below + int(inside.sum())
        return sizes + [int(inside.sum())], int(np.count_nonzero(x <= answer))
    return sizes + [n], None  # the sample missed: all of them


def data(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    normal = rng.standard_normal(n)
    return {
        "normal": normal,
        "70% zeros": np.where(rng.random(n) < 0.7, 0.0, np.abs(normal)),
        "two levels": (rng.random(n) < 0.5).astype(np.float64),
        "sorted": np.sort(normal),
    }


@pytest.mark.parametrize("name", list(data(10)))
@pytest.mark.parametrize("k", [1, 2, 40, 600, 1500, 2500, 3499, 4960, 5000])
@pytest.mark.parametrize("pieces", [1, 3])
def test_bracket_width_and_selections(name: str, k: int, pieces: int) -> None:
    x = data(5000)[name]
    flats = np.array_split(x, pieces) if pieces > 1 else [x]
    ops = Recording()
    value, n_le = kth_smallest(ops, flats, k, direct=64, sample=256)
    assert value == np.sort(x)[k - 1]
    (drawn,) = ops.drawn
    sizes, count = expected_path(x, k, drawn)
    assert ops.sizes == sizes
    assert n_le == count


def test_sample_that_misses_falls_back_to_everything() -> None:
    x = np.arange(1000, dtype=np.float64)
    drawn = np.random.default_rng(0).integers(0, 1000, 64)  # the fixed seed's draws
    rigged = x.copy()
    rigged[drawn] = 1e6 + np.arange(64)  # every drawn value above every other
    ops = Recording()
    value, n_le = kth_smallest(ops, [rigged], 500, direct=64, sample=64)
    assert value == np.sort(rigged)[499] and n_le is None and ops.sizes[-1] == 1000


# -- nth_true: the position of the n-th True ------------------------------------------------

@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 8])
def test_nth_true_on_block_edges(chunk: int) -> None:
    for n in (1, 7, 8, 9, 16):
        for pattern in (np.ones(n, bool), np.arange(n) % 2 == 1, np.arange(n) % 4 == 3, np.arange(n) == n - 1):
            positions = np.flatnonzero(pattern)
            for nth in range(1, len(positions) + 1):
                assert nth_true(NP, pattern, nth, chunk=chunk) == positions[nth - 1], (chunk, n, nth)


def bracket_ranks(k: int, n: int, ns: int) -> tuple[int, int]:
    """The documented bracket: ``q s -/+ (6 sqrt(s q (1 - q)) + 16)`` sample ranks."""
    q = k / n
    margin = 6 * math.sqrt(ns * q * (1 - q)) + 16
    return math.floor(q * ns - margin), math.ceil(q * ns + margin)


def test_bracket_bounds_on_the_sample_edges() -> None:
    """The k whose lower bound is the sample's smallest value (rank 0), and those whose upper
    bound is one past the sample's largest (no upper bound) or its largest."""
    n, ns = 5000, 256
    x = data(n)["normal"]
    ks = [next(k for k in range(1, n + 1) if bracket_ranks(k, n, ns)[0] == 0),
          next(k for k in range(n, 0, -1) if bracket_ranks(k, n, ns)[1] == ns),
          next(k for k in range(n, 0, -1) if bracket_ranks(k, n, ns)[1] == ns - 1)]
    for k in ks:
        ops = Recording()
        value, n_le = kth_smallest(ops, [x], k, direct=64, sample=ns)
        assert value == np.sort(x)[k - 1]
        assert (ops.sizes, n_le) == expected_path(x, k, ops.drawn[0]), k


def test_answer_on_the_lower_bound() -> None:
    """Every drawn entry is the largest value: the lower bound is that value, and the answer is
    the first entry in the bracket (k - below = 1), found among the candidates."""
    n, ns = 1000, 64
    drawn = np.unique(np.random.default_rng(0).integers(0, n, ns))  # the fixed seed's draws
    x = np.arange(n, dtype=np.float64)
    x[drawn] = 1e6
    k = n - len(drawn) + 1
    ops = Recording()
    value, n_le = kth_smallest(ops, [x], k, direct=64, sample=ns)
    assert (value, n_le) == (1e6, n)
    assert ops.sizes == [ns, len(drawn)]  # no upper bound; every 1e6 a candidate


def test_answer_on_the_last_of_a_run_of_ties() -> None:
    """Every drawn entry is one middle value v: both bounds are v (a run of ties, no selection
    at all), and the answer is the last v (k - below = the number of entries in the bracket)."""
    n, ns = 20_000, 1024
    drawn = np.unique(np.random.default_rng(0).integers(0, n, ns))  # the fixed seed's draws
    rest = np.setdiff1d(np.arange(n), drawn)
    below = len(rest) // 2
    x = np.empty(n)
    x[drawn] = 0.5
    x[rest[:below]] = -1.0 - np.arange(below)
    x[rest[below:]] = 2.0 + np.arange(len(rest) - below)
    k = below + len(drawn)
    ops = Recording()
    value, n_le = kth_smallest(ops, [x], k, direct=64, sample=ns)
    assert (value, n_le) == (0.5, k) and value == np.sort(x)[k - 1]
    assert ops.sizes == [ns, ns]
