"""The mask algorithms of ``recipe_spec.masks`` on their own: hand-computed cases over NumPy ops,
the float64 pairwise summation order, the axis mapping (``recipe_spec.masks.layout``) and its tie
positions, and torch ops against NumPy ops on the same values and layouts."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest

from recipe_spec import masks as core
from recipe_spec.masks.layout import Layout, strides
from recipe_spec.masks.numpy_ops import NUMPY_OPS as NP

KERAS_LAYOUTS = {  # native shape -> canonical axes, as recipe_spec_keras.masks.kernel_layout
    "Dense": lambda shape: Layout(shape, (1, 0)),
    "Conv1D": lambda shape: Layout(shape, (2, 1, 0)),
    "Conv2D": lambda shape: Layout(shape, (3, 2, 0, 1)),
    "identity": Layout.identity,
}


def canonical(native: np.ndarray, layout: Layout) -> np.ndarray:
    return np.ascontiguousarray(native.transpose(layout.axes))


def pairwise_reference(values: list[float]) -> float:
    """The documented order, written out with Python floats (IEEE float64)."""
    while len(values) > 1:
        values = [values[i] + values[i + 1] for i in range(0, len(values) - 1, 2)] + values[len(values) - len(values) % 2:]
    return values[0]


# -- the core imports no array library ------------------------------------------------------
def test_core_imports_no_array_library() -> None:
    code = ("import sys, recipe_spec, recipe_spec.masks, recipe_spec.masks.layout, recipe_spec.masks.ops; "
            "print(sorted({'numpy', 'torch', 'tensorflow', 'keras'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- float64 pairwise sums -------------------------------------------------------------------
def test_pairwise_order_on_values_where_orders_differ() -> None:
    tiny = 2.0 ** -53
    x = np.array([1.0, tiny, tiny, tiny])
    got = float(core.pairwise_sum(NP, x, 0)[0])
    assert got == (1.0 + tiny) + (tiny + tiny) == 1.0 + 2 * tiny  # the documented tree
    assert ((1.0 + tiny) + tiny) + tiny == 1.0  # left to right would give 1.0
    # float32 input: summed in float64, so below float32's resolution nothing is lost
    eps = np.float32(2.0 ** -24)
    x32 = np.array([1.0, eps, eps, eps], dtype=np.float32)
    assert float(core.pairwise_sum(NP, x32, 0)[0]) == 1.0 + 3 * 2.0 ** -24
    assert float(np.float32(1.0) + eps + eps + eps) == 1.0


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 7, 8, 13, 33])
def test_pairwise_matches_the_written_out_tree(n: int) -> None:
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3, n, 2)) * 10.0 ** rng.integers(-8, 8, (3, n, 2))).astype(np.float32)
    got = core.pairwise_sum(NP, x, 1)
    assert got.shape == (3, 1, 2) and got.dtype == np.float64
    for i, j in itertools.product(range(3), range(2)):
        expected = pairwise_reference([float(v) for v in x[i, :, j]]) if n else 0.0
        assert got[i, 0, j] == expected
    if n == 5:
        a, b, c, d, e = (float(v) for v in x[0, :, 0])
        assert got[0, 0, 0] == ((a + b) + (c + d)) + e


def test_group_scores_reduce_canonical_axes_innermost_first() -> None:
    """Group 0 sums to 1.0 when the inner canonical axis goes first, to 1 + 2**-52 the other
    way round; group 1 is 1 + 2**-52 either way: group 0 alone is pruned only in our order (a
    tie would prune group 1, the later one)."""
    t, up = 2.0 ** -53, 1.0 + 2.0 ** -52
    w = np.zeros((2, 2, 2))  # canonical (out, in, k); channel c = w[:, c, :]
    w[0, 0], w[1, 0], w[0, 1, 0] = [1.0, t], [0.0, t], up
    assert core.channel_mask(NP, w, 0.5)[0, :, 0].tolist() == [False, True]
    blocks = np.zeros((2, 4))  # two 2x2 blocks: [[1, t], [0, t]] and [[up, 0], [0, 0]]
    blocks[:, :2], blocks[0, 2] = [[1.0, t], [0.0, t]], up
    assert core.block_mask(NP, blocks, 0.5, [2, 2])[0].tolist() == [False, False, True, True]


# -- the axis mapping ------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "shape"), [("Dense", (7, 5)), ("Conv1D", (3, 4, 8)),
                                            ("Conv2D", (3, 2, 4, 8)), ("identity", (4, 6))])
def test_canonical_positions(kind: str, shape: tuple[int, ...]) -> None:
    layout = KERAS_LAYOUTS[kind](shape)
    native = np.arange(math.prod(shape)).reshape(shape)
    # the canonical flat position of every native entry, by transposing an index array
    truth = np.empty(native.size, dtype=np.int64)
    truth[canonical(native, layout).ravel()] = np.arange(native.size)
    assert np.array_equal(layout.canonical_positions(np.arange(native.size)), truth)
    assert layout.canonical_positions(5) == truth[5]
    assert layout.canonical_shape == canonical(native, layout).shape
    assert layout.is_identity == (kind == "identity")


def test_layout_split_reorder_and_checks() -> None:
    layout = Layout((3, 3, 4, 8), (3, 2, 0, 1))  # Conv2D (kh, kw, in, out)
    split_shape, left, inner = layout.split({0: 2, 1: 4})
    assert split_shape == (3, 3, 1, 4, 4, 2) and inner == {0: 5, 1: 3}
    assert left == Layout((3, 3, 1, 1, 4, 1), (4, 2, 0, 1))
    assert left.canonical_shape == (4, 1, 3, 3)
    assert left.reorder((0, 2, 3, 1)).axes == (4, 0, 1, 2)
    assert Layout((1, 5, 1), (1,)).is_identity and not Layout((2, 3), (1, 0)).is_identity
    assert strides((4, 1, 3)) == (3, 3, 1)
    for shape, axes in (((2, 3), (0, 0)), ((2, 3), (0,)), ((2, 3), (0, 2))):
        with pytest.raises(ValueError, match="do not map"):
            Layout(shape, axes)


@pytest.mark.parametrize("kind", ["Dense", "Conv2D"])
def test_ties_follow_canonical_order_on_native_arrays(kind: str) -> None:
    shape = (6, 4) if kind == "Dense" else (2, 2, 4, 6)
    layout = KERAS_LAYOUTS[kind](shape)
    kernel = np.full(shape, 0.5, dtype=np.float32)
    mask = core.compute_mask(NP, kernel, 0.5, "unstructured", layout)
    assert mask.shape == shape and int((~mask).sum()) == kernel.size // 2
    # kept: the first half of canonical (out, in, ...) order, i.e. the first half of the outs
    half = shape[-1] // 2
    assert mask[..., :half].all() and not mask[..., half:].any()
    rng = np.random.default_rng(0)
    levels = (rng.integers(0, 3, shape) * 0.25).astype(np.float32)
    for mask_type in ("unstructured", "block4", [2, 2], "channel", "filter"):
        native = core.compute_mask(NP, levels, 0.4, mask_type, layout)
        reference = core.compute_mask(NP, canonical(levels, layout), 0.4, mask_type)
        assert np.array_equal(canonical(native, layout), reference), mask_type


# -- hand-computed cases ---------------------------------------------------------------------
def test_unstructured_and_global_by_hand() -> None:
    w = np.array([[0.9, 0.1, 0.2, 0.5], [0.3, 0.5, 0.8, 0.9], [0.4, 0.6, 0.7, 0.9]])
    assert core.compute_mask(NP, w, 0.5).astype(int).tolist() == [[1, 0, 0, 0], [0, 0, 1, 1], [0, 1, 1, 1]]
    masks = core.global_unstructured_masks(NP, [np.ones(3), np.full((1, 5), 1.0, np.float32)], 0.5)
    assert [m.tolist() for m in masks] == [[True] * 3, [[True, False, False, False, False]]]
    # Dense layout: native (in=2, out=3), canonical (3, 2): ties keep canonical (out 0, out 1)
    masks = core.global_unstructured_masks(NP, [np.ones((2, 3))], 0.5, [Layout((2, 3), (1, 0))])
    assert masks[0].tolist() == [[True, True, False], [True, False, False]]
    assert core.global_unstructured_masks(NP, [], 0.5) == []


def test_blocks_by_hand() -> None:
    w = np.array([[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]])
    assert core.block_mask(NP, w, 0.5, [1, 2]).tolist() == [[False, False, True, True], [True, True, False, False]]
    ones = np.ones((2, 4))
    assert core.block_mask(NP, ones, 0.5, [1, 2]).tolist() == [[True] * 4, [False] * 4]  # later blocks go
    # block4 padding: the padded group scores the mean of its real entries (0.5, not 0.125)
    padded = np.array([[0.4, 0.4, 0.4, 0.4, 0.5]])
    assert core.four_block_mask(NP, padded, 0.5).tolist() == [[False] * 4 + [True]]
    # groups ordered (out, kernel position, group): tied conv groups prune the later positions
    conv = core.four_block_mask(NP, np.ones((1, 8, 1, 2)), 0.5)  # 2 groups x 2 positions
    assert conv[0, :, 0, 0].all() and not conv[0, :, 0, 1].any()


def test_nm_and_slices_by_hand() -> None:
    assert core.nm_mask(NP, np.ones((1, 4)), 2, 4).tolist() == [[True, True, False, False]]
    assert core.nm_mask(NP, np.array([[0.1, -0.5, 0.5, 0.2]]), 2, 4).tolist() == [[False, True, True, False]]
    assert core.nm_mask(NP, np.array([[0.3, 0.3, 0.1, 0.2]]), 1, 4).tolist() == [[True, False, False, False]]
    assert core.nm_mask(NP, np.array([[0.1, 0.2]]), 2, 2).all()
    w = np.array([[1.0, -2.0], [3.0, 0.0], [-1.0, 1.0]])  # channel L1 (5, 3); filter L1 (3, 3, 2)
    assert core.channel_mask(NP, w, 0.5).tolist() == [[True, False]] * 3
    assert core.filter_mask(NP, w, 1 / 3).all(axis=1).tolist() == [True, True, False]
    assert core.filter_mask(NP, w, 2 / 3).all(axis=1).tolist() == [True, False, False]  # tie: later goes


def test_checks_and_messages() -> None:
    with pytest.raises(core.MaskShapeError) as info:
        core.block_mask(NP, np.zeros((3, 3, 3, 8)), 0.5, [1, 4], Layout((3, 3, 3, 8), (3, 2, 0, 1)))
    assert "Invalid block_shape [1, 4, 1, 1] for parameter shape [8, 3, 3, 3]" in str(info.value)
    assert info.value.shape == (8, 3, 3, 3) and info.value.mask_type == [1, 4]
    with pytest.raises(ValueError, match=r"weight of shape \[3, 2\] contains NaN"):
        core.compute_mask(NP, np.array([[1.0, np.inf, 0.0]] * 2), 0.5, "unstructured", Layout((2, 3), (1, 0)))
    with pytest.raises(ValueError, match=r"scores of shape \[2\] contain NaN"):
        core.unstructured_mask(NP, np.array([1.0, np.nan]), 0.5)
    assert core.unstructured_mask(NP, np.array([np.inf, -np.inf]), 0.5).tolist() == [True, False]
    assert core.unstructured_mask(NP, np.array([np.inf, 1.0]), 0.5).tolist() == [True, False]
    with pytest.raises(ValueError, match="within 0.01"):
        core.compute_mask(NP, np.ones((4, 4)), 0.3, "2:4")
    assert core.compute_mask(NP, np.ones((4, 4)), 0.495, "2:4").sum() == 8
    with pytest.raises(ValueError, match="sparsity must be"):
        core.mask_args("unstructured", 1.5)


# -- torch ops against NumPy ops ---------------------------------------------------------------
MASK_TYPES = ["unstructured", "block4", [1, 4], [2, 2], [-1, 2], "2:4", "1:4", "channel", "filter"]
CASES = [("Dense", (12, 8)), ("Dense", (6, 9)), ("Conv1D", (3, 8, 4)), ("Conv2D", (3, 2, 6, 4)),
         ("Conv2D", (2, 2, 3, 8)), ("identity", (8, 8)), ("identity", (4, 8, 3, 3))]


def values(rng: np.random.Generator, shape: tuple[int, ...], kind: str, dtype: type) -> np.ndarray:
    if kind == "random":
        return rng.standard_normal(shape).astype(dtype)
    if kind == "levels":  # many exact ties between entries, groups and slices
        return (rng.integers(-2, 3, shape) * 0.5).astype(dtype)
    base = rng.standard_normal(shape[-1]).astype(dtype)  # permuted rows: near-tie group sums
    return np.stack([rng.permutation(base) for _ in range(math.prod(shape[:-1]))]).reshape(shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["random", "levels", "permuted"])
def test_torch_ops_equal_numpy_ops(dtype: type, kind: str) -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec_torch.masks import TorchOps

    T = TorchOps()
    rng = np.random.default_rng(0)
    for layer, shape in CASES:
        layout = KERAS_LAYOUTS[layer](shape)
        w = values(rng, shape, kind, dtype)
        for mask_type, sparsity in itertools.product(MASK_TYPES, (0.25, 0.5, 0.8)):
            if isinstance(mask_type, str) and ":" in mask_type:
                sparsity = 0.5 if mask_type == "2:4" else 0.75
            try:
                expected = core.compute_mask(NP, w, sparsity, mask_type, layout)
            except core.MaskShapeError as err:
                with pytest.raises(core.MaskShapeError) as info:
                    core.compute_mask(T, torch.from_numpy(w), sparsity, mask_type, layout)
                assert info.value.shape == err.shape
                continue
            got = core.compute_mask(T, torch.from_numpy(w), sparsity, mask_type, layout)
            assert got.dtype == torch.bool and np.array_equal(got.numpy(), expected), (layer, mask_type, sparsity)
        # global, with the tie path on several layouts at once
        scores = [np.abs(w), np.full((4, 3), 0.5, dtype)]
        layouts = [layout, Layout((4, 3), (1, 0))]
        expected = core.global_unstructured_masks(NP, scores, 0.6, layouts)
        got = core.global_unstructured_masks(T, [torch.from_numpy(s) for s in scores], 0.6, layouts)
        assert all(np.array_equal(g.numpy(), e) for g, e in zip(got, expected, strict=True))


def test_torch_group_scores_are_the_same_bits() -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec_torch.masks import TorchOps

    x = np.random.default_rng(1).standard_normal((5, 37, 3)).astype(np.float32) * 1e3
    for axis in range(3):
        ours = core.pairwise_sum(TorchOps(), torch.from_numpy(x), axis).numpy()
        assert ours.tobytes() == core.pairwise_sum(NP, x, axis).tobytes()


def test_torch_sampled_selection_with_native_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec_torch import masks as TM

    monkeypatch.setattr(TM, "_DIRECT_SELECT", 8)
    monkeypatch.setattr(TM, "_SAMPLE", 16)
    monkeypatch.setattr(TM, "_CHUNK", 4)
    rng = np.random.default_rng(2)
    w = (rng.integers(0, 4, (3, 3, 6, 8)) * 0.25).astype(np.float32)
    layout = KERAS_LAYOUTS["Conv2D"](w.shape)
    for sparsity in (0.1, 0.45, 0.9):
        expected = core.compute_mask(NP, w, sparsity, "unstructured", layout)
        got = core.compute_mask(TM.TorchOps(), torch.from_numpy(w), sparsity, "unstructured", layout)
        assert np.array_equal(got.numpy(), expected)


# -- exact selection (recipe_spec.masks.selection) ---------------------------------------------------
class RecordingOps(type(NP)):
    """NumPy ops that record the size of every ``kth_direct`` input."""

    def __init__(self) -> None:
        self.direct_sizes: list[int] = []

    def kth_direct(self, flat: np.ndarray, k: int) -> np.generic:
        self.direct_sizes.append(flat.shape[0])
        return super().kth_direct(flat, k)


def adversarial(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    base = rng.standard_normal(n).astype(np.float32)
    third = n // 3
    return {
        "random": base,
        "sorted": np.sort(base),
        "reversed": np.sort(base)[::-1].copy(),
        "few levels": rng.integers(0, 4, n).astype(np.float32),
        "all equal": np.full(n, 0.5, np.float32),
        "70% zeros": np.where(rng.random(n) < 0.7, 0.0, np.abs(base)).astype(np.float32),
        "zeros first": np.concatenate([np.zeros(n - third, np.float32), np.abs(base[:third])]),
        "signed zeros": np.where(rng.random(n) < 0.5, -0.0, 0.0).astype(np.float32),
        "zeros and inf": np.where(base > 1.0, np.inf, np.where(base < -1.0, -np.inf, 0.0)),
        "inf tail": np.where(base > 0.5, np.inf, base).astype(np.float32),
        "float64 near ties": 1.0 + rng.integers(0, 3, n) * 2.0 ** -52,
        "int64 positions": rng.permutation(n).astype(np.int64) * 3,
    }


def split(x: np.ndarray) -> list[np.ndarray]:
    """Uneven pieces, with an empty one, as a global selection sees its tensors."""
    cuts = [0, 1, len(x) // 5, len(x) // 5, len(x) // 2, len(x)]
    return [x[a:b] for a, b in itertools.pairwise(cuts)]


@pytest.mark.parametrize("name", list(adversarial(8)))
@pytest.mark.parametrize("pieces", [False, True])
def test_kth_smallest_is_the_sorted_value(name: str, pieces: bool) -> None:
    from recipe_spec.masks.selection import kth_smallest

    x = adversarial(3000)[name]
    flats = split(x) if pieces else [x]
    before = [f.copy() for f in flats]
    ordered = np.sort(x)
    for k in (1, 2, 17, 600, 1500, 2100, 2999, 3000):
        for direct, sample in ((1 << 16, 1 << 14), (64, 256), (64, 1)):
            value, n_le = kth_smallest(NP, flats, k, direct=direct, sample=sample)
            assert value == ordered[k - 1] and np.asarray(value).dtype == x.dtype, (k, direct, sample)
            assert n_le is None or n_le == int(np.count_nonzero(x <= value)), (k, direct, sample)
    assert all(np.array_equal(f, b, equal_nan=True) for f, b in zip(flats, before, strict=True))


def test_kth_smallest_takes_every_path() -> None:
    """Direct, bracket (selection among the candidates), run of ties (no selection at all) and
    the exact fallback when the fixed-seed sample misses; every answer the sorted value."""
    from recipe_spec.masks.selection import kth_smallest

    def run(x: np.ndarray, k: int, sample: int = 256) -> list[int]:
        ops = RecordingOps()
        value, _ = kth_smallest(ops, [x], k, direct=64, sample=sample)
        assert value == np.sort(x)[k - 1]
        return ops.direct_sizes

    n = 5000
    x = np.random.default_rng(8).standard_normal(n)
    assert run(x[:64], 10) == [64]  # direct
    sizes = run(x, 2500)  # two selections in the sample, one among the candidates
    assert len(sizes) == 3 and sizes[:2] == [256, 256] and 0 < sizes[2] < n
    ties = np.where(np.arange(n) % 10 < 7, 0.0, np.abs(x))  # 70% zeros, the bracket inside them
    assert run(ties, 1750) == [256, 256]
    assert run(x, 2500, sample=1)[-1] == n  # no room for a bracket: everything
    # the values at the sampled positions are the largest: the bracket lies above the answer
    drawn = np.random.default_rng(0).integers(0, n, 256)  # NumpyOps.random_sample's draws
    rigged = x.copy()
    rigged[drawn] = 100.0 + np.arange(256)
    assert run(rigged, 2500)[-1] == n
    rigged[drawn] = -100.0 - np.arange(256)  # ... below it
    assert run(rigged, 2500)[-1] == n
    with pytest.raises(ValueError, match="k must be in"):
        kth_smallest(NP, [x[:3]], 4, direct=64, sample=256)


@pytest.mark.parametrize("chunk", [1, 4, 7, 64, 1 << 14])
def test_nth_true(chunk: int) -> None:
    from recipe_spec.masks.selection import nth_true

    rng = np.random.default_rng(9)
    for n in (1, 5, 64, 100, 1000):
        for density in (0.02, 0.5, 1.0):
            flags = rng.random(n) < density
            flags[-1] = True  # at least one, and one in the last (maybe partial) block
            positions = np.flatnonzero(flags)
            count = len(positions)
            for nth in sorted({1, min(2, count), count // 2 or 1, count - 1 or 1, count}):
                assert nth_true(NP, flags, nth, chunk=chunk) == positions[nth - 1], (n, nth)


def test_masks_with_numpy_limits_on_every_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """NumPy's own limits govern its selection: masks at 1/64 scale equal the full-size ones."""
    from recipe_spec.masks import numpy_ops
    rng = np.random.default_rng(10)
    w = np.where(rng.random((40, 30, 3)) < 0.7, 0.0, rng.standard_normal((40, 30, 3))).astype(np.float32)
    layouts = [KERAS_LAYOUTS["Conv1D"](w.shape), Layout.identity(w.shape)]
    expected = [[core.compute_mask(NP, w, s, "unstructured", lay) for s in (0.5, 0.8)] for lay in layouts]
    monkeypatch.setattr(numpy_ops, "_DIRECT_SELECT", 1 << 10)
    monkeypatch.setattr(numpy_ops, "_SAMPLE", 1 << 8)
    monkeypatch.setattr(numpy_ops, "_CHUNK", 5)
    assert NP.selection_limits() == (1 << 10, 1 << 8, 5)
    for layout, masks in zip(layouts, expected, strict=True):
        for s, mask in zip((0.5, 0.8), masks, strict=True):
            assert np.array_equal(core.compute_mask(NP, w, s, "unstructured", layout), mask)
            assert int((~mask).sum()) == round(s * w.size)


def test_torch_selection_primitives_equal_numpy() -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec_torch.masks import TorchOps

    from recipe_spec.masks.selection import kth_smallest, nth_true

    T = TorchOps()
    for name, x in adversarial(3000).items():
        flats = split(x)
        for k in (1, 700, 2100, 3000):
            ours, n_le = kth_smallest(T, [torch.from_numpy(f) for f in flats], k, direct=64, sample=256)
            ref, _ = kth_smallest(NP, flats, k, direct=64, sample=256)  # other draws, same value
            assert ours.item() == ref, (name, k)
            assert n_le is None or n_le == int(np.count_nonzero(x <= ref)), (name, k)
        flags = x == x[-1]
        for nth in (1, int(flags.sum())):
            assert nth_true(T, torch.from_numpy(flags), nth, chunk=7) == nth_true(NP, flags, nth, chunk=7)


@pytest.mark.parametrize("shape", [(1536, 512), (512, 1536), (1000, 77), (77, 1000), (3, 5), (16, 4096), (4097, 17)])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float64])
def test_transposed_is_numpys_transpose_copied(shape: tuple[int, int], dtype: type) -> None:
    """The banded copy (used for weights read from and written to Keras kernels, and by
    ``permute`` in the block-wise OBS loop) holds ``x.T``'s entries, C-contiguous, for sizes
    on both sides of the small-array cut, bands that do not divide the rows, and strided
    inputs (a column slice, as the OBS loop takes its blocks)."""
    from recipe_spec.masks.numpy_ops import transposed

    x = (np.random.default_rng(0).standard_normal((shape[0], shape[1] + 3)) * 100).astype(dtype)[:, 2:-1]
    out = transposed(x)
    assert out.flags.c_contiguous and out.dtype == x.dtype
    np.testing.assert_array_equal(out, x.T)
    np.testing.assert_array_equal(NP.permute(x, (1, 0)), x.T)
    with pytest.raises(ValueError, match="2-D"):
        transposed(np.zeros((2, 2, 2)))
