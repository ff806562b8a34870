"""Keras masks (``recipe_spec_keras.masks``) against the reference, the torch backend's masks:
the same values as a torch weight and as a Keras kernel must give the same mask, bit for bit,
for every mask type, including ties and near-ties of group scores."""

from __future__ import annotations

import math
import os
import re
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from recipe_spec_keras import masks as K  # noqa: E402
from recipe_spec_torch import masks as T  # noqa: E402

#: (layer type, Keras kernel shape, torch weight shape)
LAYOUTS = [
    ("Dense", (7, 5), (5, 7)),
    ("Conv1D", (3, 4, 8), (8, 4, 3)),
    ("Conv2D", (3, 2, 4, 8), (8, 4, 3, 2)),
    ("Convolution2D", (3, 3, 2, 6), (6, 2, 3, 3)),
    ("Conv3D", (2, 3, 1, 4, 5), (5, 4, 2, 3, 1)),
    ("Conv1DTranspose", (3, 8, 4), (4, 8, 3)),  # Keras (k, out, in) -> torch (in, out, k)
    ("Conv2DTranspose", (3, 2, 8, 4), (4, 8, 3, 2)),
    ("Conv3DTranspose", (1, 2, 3, 6, 5), (5, 6, 1, 2, 3)),
    ("Embedding", (10, 4), (10, 4)),
    ("Dense", (6,), (6,)),  # a bias is never transposed
    ("BatchNormalization", (6,), (6,)),
    ("EinsumDense", (4, 3, 2), (4, 3, 2)),  # other layers: unchanged
]


def torch_to_keras(w: np.ndarray, layer_type: str) -> np.ndarray:
    """The Keras kernel holding a torch weight's values, written out independently of the
    module under test: Linear (out, in) -> (in, out); Conv (out, in, k...) -> (k..., in, out);
    ConvTranspose (in, out, k...) -> (k..., out, in); everything else unchanged."""
    if w.ndim < 2 or not (layer_type == "Dense" or layer_type.startswith("Conv")):
        return w.copy()
    return np.ascontiguousarray(np.transpose(w, (*range(2, w.ndim), 1, 0)))


def keras_mask_as_torch(w: np.ndarray, layer_type: str, sparsity: float, mask_type: object) -> np.ndarray:
    """The Keras backend's mask for the kernel holding ``w``'s values, back in torch layout."""
    kernel = torch_to_keras(w, layer_type)
    mask = K.compute_mask(kernel, sparsity, mask_type, layer_type)
    assert mask.dtype == np.bool_ and mask.shape == kernel.shape
    return K.to_torch_layout(mask, layer_type)


def normalized(message: str) -> str:
    """torch's messages print ``torch.Size([..])`` where the Keras ones print ``[..]``."""
    return re.sub(r"torch\.Size\((\[[^\]]*\])\)", r"\1", message)


def assert_same(w: np.ndarray, layer_type: str, sparsity: float, mask_type: object) -> None:
    """torch's mask of ``w`` and the Keras mask of the same values are identical, or both
    raise the same exception type with the same message."""
    try:
        expected = T.compute_mask(torch.from_numpy(w), sparsity, mask_type).numpy()
    except ValueError as err:
        with pytest.raises(ValueError) as info:
            keras_mask_as_torch(w, layer_type, sparsity, mask_type)
        expected_type = K.MaskShapeError if isinstance(err, T.MaskShapeError) else type(err)
        assert type(info.value) is expected_type
        assert str(info.value) == normalized(str(err))
        return
    got = keras_mask_as_torch(w, layer_type, sparsity, mask_type)
    if not np.array_equal(got, expected):
        diff = np.argwhere(got != expected)[:5].tolist()
        raise AssertionError(
            f"masks differ for {layer_type} {list(w.shape)} {w.dtype} sparsity={sparsity} "
            f"mask_type={mask_type!r} at {diff} ({int((got != expected).sum())} entries)"
        )


# -- value generators ------------------------------------------------------------------------
def gen_normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def gen_equal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, np.float32(rng.choice([0.1, -0.37, 1.0, 0.0])), dtype=np.float32)


def gen_zeros(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    w = rng.standard_normal(shape).astype(np.float32)
    w[rng.random(shape) < 0.6] = 0.0
    w[rng.random(shape) < 0.1] = -0.0
    return w


def gen_levels(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Few distinct magnitudes and signs: many exact ties between entries, blocks, slices."""
    return (rng.integers(-2, 3, size=shape) * 0.5).astype(np.float32)


def gen_permuted(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Every row of dim 0 a permutation of the same random values: group and slice sums equal
    in exact arithmetic, so their float32 ranking depends on the order of the additions."""
    n = math.prod(shape[1:])
    base = (rng.standard_normal(n) * rng.choice([1.0, 1e3, 1e-3])).astype(np.float32)
    return np.stack([rng.permutation(base) for _ in range(shape[0])]).reshape(shape)


def gen_float64(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return gen_permuted(rng, shape).astype(np.float64) * np.float64(1 + 1e-9)


GENERATORS = [gen_normal, gen_equal, gen_zeros, gen_levels, gen_permuted, gen_float64]

#: torch weight shapes per layer kind (dims 0/1 = torch's (out, in) or (in, out))
CASES = [
    ("Dense", (10, 32)), ("Dense", (7, 5)), ("Dense", (16, 8)), ("Dense", (3, 45)),
    ("Dense", (33, 12)), ("Dense", (64, 40)), ("Dense", (1, 8)), ("Dense", (8, 1)),
    ("Conv1D", (8, 4, 3)), ("Conv1D", (6, 16, 1)),
    ("Conv2D", (16, 8, 3, 3)), ("Conv2D", (8, 3, 3, 3)), ("Conv2D", (4, 12, 1, 1)),
    ("Conv2D", (12, 4, 5, 5)), ("Conv2D", (1, 8, 2, 2)),
    ("Conv3D", (4, 8, 2, 2, 2)),
    ("Conv1DTranspose", (8, 4, 3)), ("Conv2DTranspose", (8, 6, 3, 3)),
    ("Embedding", (20, 8)), ("Embedding", (9, 6)),
    ("Dense", (12,)),
]
MASK_TYPES = ["unstructured", "block4", [1, 4], [2, 2], [4, 1], [2, 4], [-1, 2], [3, -1],
              [-1, -1], "2:4", "1:4", "4:8", "tensorrt", "channel", "filter"]
SPARSITIES = [0.0, 0.05, 0.3, 0.5, 0.5425925925925925, 0.73, 0.95, 1.0]


def nm_sparsity(mask_type: object, sparsity: float) -> float:
    """N:M types need their own sparsity (or 0): use it, except when testing 0 / a bad one."""
    if isinstance(mask_type, str) and (":" in mask_type or mask_type == "tensorrt"):
        n, m = (2, 4) if mask_type == "tensorrt" else map(int, mask_type.split(":"))
        if sparsity in (0.0, 0.95):
            return sparsity  # all-True, or a ValueError both must raise
        return 1.0 - n / m
    return sparsity


# -- layouts ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("layer_type", "keras_shape", "torch_shape"), LAYOUTS)
def test_layout_round_trip(layer_type: str, keras_shape: tuple[int, ...], torch_shape: tuple[int, ...]) -> None:
    kernel = np.arange(math.prod(keras_shape), dtype=np.float32).reshape(keras_shape)
    w = K.to_torch_layout(kernel, layer_type)
    assert w.shape == torch_shape
    assert np.array_equal(torch_to_keras(w, layer_type), kernel)
    back = K.from_torch_layout(w, layer_type, keras_shape)
    assert back.shape == keras_shape and np.array_equal(back, kernel)
    if len(keras_shape) >= 2 and layer_type not in ("Embedding", "EinsumDense"):
        # dim 0 of the torch weight is Keras's last axis, dim 1 the one before it
        assert np.array_equal(w[1, 0], kernel[..., 0, 1])


def test_layout_errors() -> None:
    with pytest.raises(ValueError, match="Conv2D kernel has 4 dimensions"):
        K.to_torch_layout(np.zeros((3, 3, 4)), "Conv2D")
    with pytest.raises(ValueError, match="not a Dense kernel"):
        K.from_torch_layout(np.zeros((4, 5)), "Dense", (4, 5))
    with pytest.raises(ValueError, match="Dense kernel has 2 dimensions"):
        K.compute_mask(np.zeros((2, 3, 4)), 0.5, "unstructured", "Dense")


@pytest.mark.slow
def test_layout_matches_the_frameworks() -> None:
    """The layouts are the frameworks' own: a Keras layer and a torch module holding the
    converted weights compute the same outputs (Dense, Conv2D, Conv1DTranspose, Embedding)."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # as the other Keras tests
    keras = pytest.importorskip("keras")
    rng = np.random.default_rng(0)
    cases = [
        (keras.layers.Dense(5, use_bias=False), torch.nn.Linear(7, 5, bias=False), "Dense", (2, 7)),
        (keras.layers.Conv2D(6, (3, 2), use_bias=False), torch.nn.Conv2d(4, 6, (3, 2), bias=False),
         "Conv2D", (2, 8, 7, 4)),
        (keras.layers.Conv1DTranspose(6, 3, use_bias=False),
         torch.nn.ConvTranspose1d(4, 6, 3, bias=False), "Conv1DTranspose", (2, 9, 4)),
    ]
    for klayer, tmodule, layer_type, in_shape in cases:
        x = rng.standard_normal(in_shape).astype(np.float32)
        klayer.build(in_shape)
        kernel = np.asarray(klayer.kernel)
        with torch.no_grad():
            tmodule.weight.copy_(torch.from_numpy(np.ascontiguousarray(K.to_torch_layout(kernel, layer_type))))
            tx = torch.from_numpy(x)
            ty = tmodule(tx.movedim(-1, 1) if x.ndim > 2 else tx)
            ty = ty.movedim(1, -1) if x.ndim > 2 else ty
        np.testing.assert_allclose(keras.ops.convert_to_numpy(klayer(x)), ty.numpy(), rtol=1e-4, atol=1e-5)
    emb = keras.layers.Embedding(10, 4)
    emb.build((None,))
    table = np.asarray(emb.embeddings)
    assert np.array_equal(K.to_torch_layout(table, "Embedding"), table)


# -- identical masks -------------------------------------------------------------------------
@pytest.mark.parametrize("mask_type", MASK_TYPES, ids=str)
def test_masks_identical(mask_type: object) -> None:
    rng = np.random.default_rng(zlib.crc32(str(mask_type).encode()))
    for layer_type, shape in CASES:
        for gen in GENERATORS:
            w = gen(rng, shape)
            for sparsity in SPARSITIES:
                assert_same(w, layer_type, nm_sparsity(mask_type, sparsity), mask_type)


@pytest.mark.parametrize("seed", range(12))
def test_random_shapes_identical(seed: int) -> None:
    """Random layer kinds, shapes (sizes around the torch sum kernel's vector and cascade
    widths), values and sparsities; every mask type."""
    rng = np.random.default_rng(1000 + seed)
    kinds = ["Dense", "Conv1D", "Conv2D", "Conv2DTranspose", "Embedding"]
    sizes = [1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 24, 32, 33, 40, 64]
    for _ in range(6):
        layer_type = kinds[rng.integers(len(kinds))]
        spatial = {"Conv1D": 1, "Conv2D": 2, "Conv2DTranspose": 2}.get(layer_type, 0)
        shape = (int(rng.choice(sizes)), int(rng.choice(sizes)),
                 *(int(rng.integers(1, 4)) for _ in range(spatial)))
        gen = GENERATORS[rng.integers(len(GENERATORS))]
        w = gen(rng, shape)
        sparsity = float(rng.choice([rng.random(), 0.5, 0.25, 0.9]))
        for mask_type in MASK_TYPES:
            assert_same(w, layer_type, nm_sparsity(mask_type, sparsity), mask_type)


@pytest.mark.parametrize("mask_type", [[1, 16], [2, 8], [4, 4], [8, 5], [-1, 1], [1, -1], [40, 4],
                                       "channel", "filter", "block4"], ids=str)
def test_near_tie_group_scores(mask_type: object) -> None:
    """Groups holding the same values in another order: equal sums in exact arithmetic, so the
    ranking (and the mask) is decided by float32 rounding, i.e. by the order of the additions."""
    rng = np.random.default_rng(7)
    for shape in [(40, 64), (64, 40), (16, 48, 3, 3), (48, 16, 3, 3), (80, 33, 2), (33, 80)]:
        layer_type = {2: "Dense", 3: "Conv1D", 4: "Conv2D"}[len(shape)]
        for trial in range(3):
            # permute within every dim-0 row and, for channel masks, along dim 1 too
            w = gen_permuted(rng, shape)
            if trial == 2:
                w = np.ascontiguousarray(np.swapaxes(gen_permuted(rng, (shape[1], shape[0], *shape[2:])), 0, 1))
            for sparsity in (0.25, 0.5, 0.75):
                assert_same(w, layer_type, sparsity, mask_type)


def test_large_weights_take_torchs_sampled_selection() -> None:
    """Above 65,536 entries torch brackets the threshold with a sample; same masks."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((300, 256)).astype(np.float32)
    w[:, :40] = 0.25  # a long run of ties around the threshold
    for sparsity in (0.1, 0.2, 0.6):
        for mask_type in ("unstructured", "block4", [2, 4], "channel", "filter"):
            assert_same(w, "Dense", sparsity, mask_type)
    assert_same(w, "Dense", 0.5, "2:4")


def test_small_selection_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's bracketing and chunked tie search on small tensors give what NumPy gives."""
    monkeypatch.setattr(T, "_DIRECT_SELECT", 8)
    monkeypatch.setattr(T, "_SAMPLE", 16)
    monkeypatch.setattr(T, "_CHUNK", 4)
    rng = np.random.default_rng(4)
    for gen in GENERATORS:
        w = gen(rng, (12, 10))
        for sparsity in (0.1, 0.5, 0.9):
            for mask_type in ("unstructured", "block4", [1, 2], "filter"):
                assert_same(w, "Dense", sparsity, mask_type)


def test_float16_kernels() -> None:
    """16-bit kernels: torch upcasts block means to float32, so those match too."""
    rng = np.random.default_rng(5)
    for gen in (gen_normal, gen_levels, gen_equal):
        w = gen(rng, (16, 24)).astype(np.float16)
        for mask_type in ("unstructured", "block4", [2, 2], [1, 8], "2:4"):
            assert_same(w, "Dense", nm_sparsity(mask_type, 0.5), mask_type)


def test_exact_counts_and_keep_first_ties() -> None:
    kernel = np.full((4, 3), 0.5, dtype=np.float32)  # Dense (in=4, out=3): torch (3, 4)
    mask = K.compute_mask(kernel, 0.5, "unstructured", "Dense")
    assert int((~mask).sum()) == 6
    # torch flat order is (out, in): the first 6 torch entries (out 0, out 1) are kept
    assert K.to_torch_layout(mask, "Dense").tolist() == [[True] * 4, [True, True, False, False], [False] * 4]
    assert K.compute_mask(kernel, 0.0).all() and not K.compute_mask(kernel, 1.0).any()


# -- global ----------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_global_masks_identical(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pool = [("Dense", (10, 32)), ("Conv2D", (8, 3, 3, 3)), ("Conv2D", (16, 8, 3, 3)),
            ("Embedding", (12, 4)), ("Conv1DTranspose", (4, 6, 3)), ("Dense", (7,))]
    for gen in GENERATORS[:5]:
        picks = [pool[i] for i in rng.choice(len(pool), size=rng.integers(1, 5), replace=False)]
        weights = [gen(rng, shape) for _, shape in picks]
        if seed % 2:
            weights[0][...] = 0.5  # a whole tensor tied
        for sparsity in (0.0, 0.1, 0.5, 0.77, 1.0, float(rng.random())):
            expected = T.global_unstructured_masks([torch.from_numpy(w).abs() for w in weights], sparsity)
            kernels = [(torch_to_keras(w, t), t) for w, (t, _) in zip(weights, picks, strict=True)]
            got = K.global_unstructured_masks(kernels, sparsity)
            total = 0
            for g, e, (kernel, t) in zip(got, expected, kernels, strict=True):
                assert g.shape == kernel.shape and g.dtype == np.bool_
                assert np.array_equal(K.to_torch_layout(g, t), e.numpy())
                total += int((~g).sum())
            assert total == round(sparsity * sum(w.size for w in weights))


def test_global_large_and_errors() -> None:
    rng = np.random.default_rng(9)
    weights = [rng.standard_normal((200, 300)).astype(np.float32), np.full((64, 8), 0.3, np.float32)]
    expected = T.global_unstructured_masks([torch.from_numpy(w).abs() for w in weights], 0.4)
    got = K.global_unstructured_masks([(w.T.copy(), "Dense") for w in weights], 0.4)
    for g, e in zip(got, expected, strict=True):
        assert np.array_equal(g.T, e.numpy())
    nan = np.array([[1.0, np.nan]], dtype=np.float32)
    with pytest.raises(ValueError, match="NaN"):
        T.global_unstructured_masks([torch.from_numpy(nan).abs()], 0.5)
    with pytest.raises(ValueError, match="NaN"):
        K.global_unstructured_masks([(nan, "Dense")], 0.5)
    inf = [(np.array([[np.inf, 1.0, 2.0, 0.5]], np.float32), "Embedding")]
    assert K.global_unstructured_masks(inf, 0.5)[0].tolist() == [[True, False, True, False]]
    with pytest.raises(ValueError, match="sparsity"):
        K.global_unstructured_masks(inf, 1.5)


# -- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mask_type", ["unstructured", "block4", [1, 4], "2:4", "channel", "filter"], ids=str)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_weights(mask_type: object, bad: float) -> None:
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    w[3, 5] = bad
    assert_same(w, "Dense", 0.5, mask_type)  # both raise ValueError, same message
    with pytest.raises(ValueError, match="contains NaN or infinite values"):
        K.compute_mask(w, 0.5, mask_type, "Dense")


def test_error_cases_match() -> None:
    rng = np.random.default_rng(1)
    cases = [
        ((8, 3, 3, 3), "Conv2D", 0.5, [1, 4]),  # 3 input channels: not a multiple of 4
        ((6, 8), "Dense", 0.5, [4, 4]),
        ((8,), "Dense", 0.5, [1, 4]),  # block masks need 2 dims
        ((8, 6), "Dense", 0.5, "2:4"),
        ((8, 3, 3, 3), "Conv2D", 0.5, "tensorrt"),
        ((8,), "Dense", 0.5, "2:4"),
        ((8,), "Dense", 0.5, "channel"),
        ((8,), "Dense", 0.5, "filter"),
        ((8, 8), "Dense", 0.8, "2:4"),  # N:M target too far from 1 - N/M
        ((8, 8), "Dense", 0.5, "block8"),
        ((8, 8), "Dense", 0.5, "3:2"),
        ((8, 8), "Dense", 0.5, [0, 4]),
        ((8, 8), "Dense", 0.5, [1, 2, 3]),
        ((8, 8), "Dense", 0.5, None),
        ((8, 8), "Dense", 1.5, "unstructured"),
        ((8, 8), "Dense", float("nan"), "unstructured"),
        ((8, 8), "Dense", True, "unstructured"),
        ((8, 8), "Dense", "0.5", "unstructured"),
    ]
    for shape, layer_type, sparsity, mask_type in cases:
        w = rng.standard_normal(shape).astype(np.float32)
        try:
            T.compute_mask(torch.from_numpy(w), sparsity, mask_type)
        except ValueError:
            pass
        else:
            raise AssertionError(f"torch accepted {shape} {sparsity} {mask_type!r}")
        assert_same(w, layer_type, sparsity, mask_type)


def test_mask_shape_error_details() -> None:
    kernel = np.zeros((3, 3, 3, 8), dtype=np.float32)  # Conv2D: torch (8, 3, 3, 3)
    with pytest.raises(K.MaskShapeError) as info:
        K.compute_mask(kernel, 0.5, [1, 4], "Conv2D")
    err = info.value
    assert isinstance(err, ValueError)
    assert err.shape == (8, 3, 3, 3) and err.keras_shape == (3, 3, 3, 8) and err.mask_type == [1, 4]
    assert "Invalid block_shape [1, 4, 1, 1] for parameter shape [8, 3, 3, 3]" in str(err)


def test_parse_mask_type_mirrors_torch() -> None:
    for value in ("unstructured", "block4", "channel", "filter", "tensorrt", "2:4", " 1 : 8 ",
                  [1, 4], (2, -1), [-1, -1]):
        assert K.parse_mask_type(value) == T.parse_mask_type(value)
    for bad in ("block8", "Unstructured", "3:2", "0:4", "2:4:8", [1], [1, 2, 3], [1.0, 4], [0, 4],
                [True, 4], 5, None, "block"):
        with pytest.raises(ValueError) as expected:
            T.parse_mask_type(bad)
        with pytest.raises(ValueError) as got:
            K.parse_mask_type(bad)
        assert str(got.value) == str(expected.value)


def test_pure_and_layout_preserving() -> None:
    kernel = np.random.default_rng(2).standard_normal((3, 3, 8, 16)).astype(np.float32)
    before = kernel.copy()
    for mask_type in ("unstructured", "block4", [2, 4], "2:4", "channel", "filter"):
        mask = K.compute_mask(kernel, 0.5, mask_type, "Conv2D")
        assert mask.shape == kernel.shape and mask.dtype == np.bool_ and mask.flags.c_contiguous
    assert np.array_equal(kernel, before)
    # channel = torch dim 1 = Keras in-channels (axis -2); filter = Keras out-channels (axis -1)
    channel = K.compute_mask(kernel, 0.5, "channel", "Conv2D")
    assert (channel.all(axis=(0, 1, 3)) == channel.any(axis=(0, 1, 3))).all()
    assert int((~channel.all(axis=(0, 1, 3))).sum()) == 4
    filt = K.compute_mask(kernel, 0.25, "filter", "Conv2D")
    assert int((~filt.all(axis=(0, 1, 2))).sum()) == 4
