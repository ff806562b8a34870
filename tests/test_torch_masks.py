"""Mask creation (``recipe_spec_torch.masks``): exact counts, ties, determinism, the grouped
mask types, and SparseML's own numbers (reference section 3.2, conformance README, checklist
C-54 and C-80)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from recipe_spec_torch import masks as M  # noqa: E402
from recipe_spec_torch.masks import (  # noqa: E402
    MaskShapeError,
    block_mask,
    channel_mask,
    compute_mask,
    filter_mask,
    four_block_mask,
    global_unstructured_masks,
    nm_mask,
    unstructured_mask,
)
from testdata import SPARSEML  # noqa: E402

from recipe_spec.masks.types import parse_mask_type  # noqa: E402

CASES_DIR = SPARSEML
#: The conformance model's prunable weights (README, "How the values were measured").
NET_SHAPES = {
    "conv1.weight": (8, 3, 3, 3),
    "conv2.weight": (16, 8, 3, 3),
    "fc1.weight": (32, 64),
    "fc2.weight": (10, 32),
}
SPARSITIES = [0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.5425925925925925, 0.73, 0.8, 0.95, 0.999, 1.0]
SHAPES = [(1,), (2,), (3,), (7, 5), (10, 32), (8, 3, 3, 3), (16, 8, 3, 3), (64, 65), (5, 3, 4, 2, 2)]


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def zeros(mask: torch.Tensor) -> int:
    return int((~mask).sum())


def reference_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The documented rule, the slow obvious way: prune the k smallest scores; among equal
    scores the later flat positions go first."""
    flat = scores.reshape(-1)
    n = flat.numel()
    order = torch.sort(flat.flip(0), stable=True).indices[:k]  # ties: higher original index first
    keep = torch.ones(n, dtype=torch.bool)
    keep[n - 1 - order] = False
    return keep.view(scores.shape)


@pytest.fixture
def small_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Route small tensors through the sampled selection and the chunked tie search."""
    monkeypatch.setattr(M, "_DIRECT_SELECT", 8)
    monkeypatch.setattr(M, "_SAMPLE", 16)
    monkeypatch.setattr(M, "_CHUNK", 4)


# -- unstructured ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("sparsity", SPARSITIES)
def test_unstructured_exact_count(shape: tuple[int, ...], sparsity: float) -> None:
    w = randn(*shape)
    mask = compute_mask(w, sparsity)
    n = w.numel()
    assert mask.dtype == torch.bool and mask.shape == w.shape
    assert zeros(mask) == round(sparsity * n)
    if 0 < zeros(mask) < n:
        assert w.abs()[~mask].max() <= w.abs()[mask].min()


@pytest.mark.parametrize(("n", "sparsity", "expected"), [
    (2, 0.25, 0), (6, 0.25, 2), (10, 0.25, 2), (10, 0.35, 4), (216, 0.6, 130), (3, 0.5, 2),
])
def test_unstructured_python_round(n: int, sparsity: float, expected: int) -> None:
    assert round(sparsity * n) == expected  # half to even, on the float product
    assert zeros(unstructured_mask(randn(n).abs(), sparsity)) == expected


def test_unstructured_k0_and_all() -> None:
    w = randn(4, 5)
    assert unstructured_mask(w.abs(), 0.0).all()
    assert unstructured_mask(w.abs(), 0.01).all()  # round(0.2) = 0
    assert not unstructured_mask(w.abs(), 1.0).any()
    assert unstructured_mask(torch.empty(0), 0.5).shape == (0,)
    assert unstructured_mask(torch.tensor(3.0), 1.0).tolist() is False


@pytest.mark.parametrize("n", [1, 7, 64, 1000, 70_000])
@pytest.mark.parametrize("sparsity", [0.3, 0.5, 0.9])
def test_unstructured_ties_all_equal(n: int, sparsity: float) -> None:
    mask = unstructured_mask(torch.full((n,), 0.5), sparsity)
    k = round(sparsity * n)
    assert zeros(mask) == k
    # tie rule: the earlier entries are kept, the last k pruned
    assert mask[: n - k].all() and not mask[n - k:].any()


@pytest.mark.parametrize("n", [100, 80_000])
def test_existing_zeros_pruned_first(n: int) -> None:
    w = randn(n).abs() + 0.01
    w[torch.randperm(n, generator=torch.Generator().manual_seed(1))[: int(0.6 * n)]] = 0.0
    is_zero = w == 0
    high = unstructured_mask(w, 0.8)
    assert zeros(high) == round(0.8 * n) and not high[is_zero].any()
    low = unstructured_mask(w, 0.3)  # fewer than the zeros: only zeros go, the last ones
    assert zeros(low) == round(0.3 * n) and low[~is_zero].all()
    assert torch.equal(low, reference_mask(w, round(0.3 * n)))


def test_determinism() -> None:
    w = (randn(50, 60) * 4).round() / 4  # many ties
    first = compute_mask(w, 0.55)
    for _ in range(3):
        assert torch.equal(compute_mask(w.clone(), 0.55), first)
    big = (randn(300, 400) * 8).round()
    assert torch.equal(unstructured_mask(big.abs(), 0.7), unstructured_mask(big.abs().clone(), 0.7))


def adversarial_inputs(n: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(n, generator=gen)
    third = n // 3
    return [
        base.abs(),
        base.abs().sort().values,  # sorted
        base.abs().sort(descending=True).values,
        torch.arange(n) % 7,  # periodic, few distinct values (ints)
        (base * 3).round(),  # negatives, ties, -0.0 and 0.0
        torch.cat([torch.zeros(2 * third), base[: n - 2 * third].abs()]),
        torch.where(base > 1.5, torch.tensor(float("inf")), base),  # infinite scores rank last
        torch.cat([torch.full((third,), -0.0), torch.full((n - third,), 0.0)]),
    ]


@pytest.fixture
def scaled_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampled selection at 1/64 scale, so that small tensors take every path."""
    monkeypatch.setattr(M, "_DIRECT_SELECT", 1 << 10)
    monkeypatch.setattr(M, "_SAMPLE", 1 << 8)
    monkeypatch.setattr(M, "_CHUNK", 1 << 8)


@pytest.mark.parametrize("index", range(8))
@pytest.mark.parametrize("sparsity", [0.001, 0.4, 0.6667, 0.99])
def test_selection_matches_reference(scaled_paths: None, index: int, sparsity: float) -> None:
    scores = adversarial_inputs(3000)[index]
    k = round(sparsity * scores.numel())
    assert torch.equal(unstructured_mask(scores, sparsity), reference_mask(scores, k))


@pytest.mark.parametrize("index", [1, 4, 5])
def test_selection_matches_reference_full_size(index: int) -> None:
    scores = adversarial_inputs(70_000)[index]  # above _DIRECT_SELECT: the sampled selection
    for sparsity in (0.4, 0.99):
        k = round(sparsity * scores.numel())
        assert torch.equal(unstructured_mask(scores, sparsity), reference_mask(scores, k))


@pytest.mark.parametrize("sample", [1, 16])
def test_selection_paths_agree(small_paths: None, monkeypatch: pytest.MonkeyPatch, sample: int) -> None:
    monkeypatch.setattr(M, "_SAMPLE", sample)  # 1: the bracket always misses -> fallback
    gen = torch.Generator().manual_seed(5)
    for _ in range(30):
        n = int(torch.randint(1, 200, (1,), generator=gen))
        scores = torch.randint(0, 6, (n,), generator=gen).float()
        for sparsity in (0.02, 0.1, 0.5, 0.77, 0.99):
            k = round(sparsity * n)
            assert torch.equal(unstructured_mask(scores, sparsity), reference_mask(scores, k))


# -- C-80 (Keras test_mask_update_explicit) --------------------------------------------------
C80 = [[0.9, 0.1, 0.2, 0.5], [0.3, 0.5, 0.8, 0.9], [0.4, 0.6, 0.7, 0.9]]


def test_c80_keras_explicit() -> None:
    w = torch.tensor(C80)
    quarter = compute_mask(w, 0.25)
    assert quarter.int().tolist() == [[1, 0, 0, 1], [0, 1, 1, 1], [1, 1, 1, 1]]  # 0.1, 0.2, 0.3
    half = compute_mask(w, 0.5)
    assert zeros(half) == 6
    assert not half[w < 0.5].any()
    assert half.int().tolist() == [[1, 0, 0, 0], [0, 0, 1, 1], [0, 1, 1, 1]]


# -- global ----------------------------------------------------------------------------------
def test_global_exact_total_and_single_threshold() -> None:
    scores = [randn(64, 32, seed=1).abs(), randn(16, 8, 3, 3, seed=2).abs() * 0.1,
              randn(10, 32, seed=3).abs() * 10, randn(5, seed=4).abs()]
    total = sum(s.numel() for s in scores)
    for sparsity in (0.0, 0.3, 0.8, 1.0):
        masks = global_unstructured_masks(scores, sparsity)
        assert [m.shape for m in masks] == [s.shape for s in scores]
        assert all(m.dtype == torch.bool for m in masks)
        assert sum(zeros(m) for m in masks) == round(sparsity * total)
        pruned = torch.cat([s[~m] for s, m in zip(scores, masks, strict=True)])
        kept = torch.cat([s[m] for s, m in zip(scores, masks, strict=True)])
        if pruned.numel() and kept.numel():
            assert pruned.max() <= kept.min()  # one threshold for all
    per = [zeros(m) / m.numel() for m in global_unstructured_masks(scores, 0.5)]
    assert per[1] > 0.95 and per[2] < 0.05  # small weights go first, large ones stay
    assert len(set(per)) == len(per)


@pytest.mark.parametrize("paths", ["direct", "sampled"])
def test_global_matches_concatenated_reference(paths: str, request: pytest.FixtureRequest) -> None:
    if paths == "sampled":
        request.getfixturevalue("small_paths")
    scores = [(randn(40, 30, seed=s) * 3).round().abs() for s in range(4)] + [torch.zeros(7, 3)]
    flat = torch.cat([s.reshape(-1) for s in scores])
    for sparsity in (0.2, 0.45, 0.9):
        ref = reference_mask(flat, round(sparsity * flat.numel()))
        ours = torch.cat([m.reshape(-1) for m in global_unstructured_masks(scores, sparsity)])
        assert torch.equal(ours, ref)


def test_global_edge_cases() -> None:
    assert global_unstructured_masks([], 0.5) == []
    masks = global_unstructured_masks([torch.ones(3), torch.ones(5)], 0.5)
    assert [m.tolist() for m in masks] == [[True] * 3, [True, False, False, False, False]]
    s = randn(10).abs()
    before = s.clone()
    global_unstructured_masks([s], 0.5)
    assert torch.equal(s, before)


# -- block4 ----------------------------------------------------------------------------------
def test_block4_conv1_padding_example() -> None:
    w = randn(8, 3, 3, 3)
    mask = four_block_mask(w, 0.05)
    assert zeros(mask) == 12 and zeros(mask) / w.numel() == pytest.approx(0.0556, abs=1e-4)
    groups = mask.permute(0, 2, 3, 1).reshape(72, 3)  # one group = 3 real input channels
    assert (groups.all(1) | ~groups.any(1)).all()
    assert int((~groups.any(1)).sum()) == 4 == round(0.05 * 72)
    # score of a padded group = mean |w| of its 3 real entries
    means = w.abs().permute(0, 2, 3, 1).reshape(72, 3).mean(1)
    pruned = ~groups.any(1)
    assert means[pruned].max() <= means[~pruned].min()


@pytest.mark.parametrize("shape", [(16, 32), (8, 64), (12, 8, 3, 3), (4, 4)])
@pytest.mark.parametrize("sparsity", [0.05, 0.3, 0.5, 0.75, 0.9])
def test_block4_equals_block_1x4_when_divisible(shape: tuple[int, ...], sparsity: float) -> None:
    w = randn(*shape, seed=7)
    four = four_block_mask(w, sparsity)
    assert torch.equal(four, block_mask(w, sparsity, [1, 4]))  # C-54
    n_groups = w.numel() // 4
    assert zeros(four) == 4 * round(sparsity * n_groups)


def test_block4_shapes() -> None:
    w = randn(10, 6)  # 2 groups per row, the second padded (2 real entries)
    mask = four_block_mask(w, 0.5)
    assert torch.equal(mask[:, :4], mask[:, :1].expand(10, 4))
    assert torch.equal(mask[:, 4:], mask[:, 4:5].expand(10, 2))
    full, padded = int((~mask[:, 0]).sum()), int((~mask[:, 4]).sum())
    assert full + padded == round(0.5 * 20) and zeros(mask) == 4 * full + 2 * padded
    conv1d = randn(6, 5, 3)
    m = four_block_mask(conv1d, 0.5)
    assert m.shape == conv1d.shape
    assert torch.equal(m[:, :4, :], m[:, :1, :].expand(6, 4, 3))
    assert four_block_mask(randn(9), 0.5).shape == (9,)  # 1-D: grouped along its only dim
    assert four_block_mask(torch.ones(4, 4), 1.0).sum() == 0
    assert four_block_mask(torch.tensor(2.0), 1.0).tolist() is False  # one group of one
    assert four_block_mask(torch.tensor(2.0), 0.4).tolist() is True
    assert four_block_mask(torch.empty(0, 4), 0.5).shape == (0, 4)


# -- [a, b] blocks ---------------------------------------------------------------------------
@pytest.mark.parametrize(("shape", "block"), [
    ((8, 16), [2, 4]), ((8, 16), [1, 4]), ((8, 16), [4, 1]), ((6, 9), [3, 3]),
    ((16, 8, 3, 3), [2, 2]), ((16, 8, 3, 3), [4, -1]), ((8, 16), [-1, 2]), ((8, 16), [-1, -1]),
])
@pytest.mark.parametrize("sparsity", [0.1, 0.5, 0.8])
def test_block_constant_within_blocks(shape: tuple[int, ...], block: list[int], sparsity: float) -> None:
    w = randn(*shape, seed=11)
    mask = block_mask(w, sparsity, block)
    assert mask.shape == w.shape and mask.dtype == torch.bool
    a = shape[0] if block[0] == -1 else block[0]
    b = shape[1] if block[1] == -1 else block[1]
    kernel = math.prod(shape[2:])
    rows, cols = shape[0] // a, shape[1] // b
    tiles = mask.reshape(rows, a, cols, b, kernel)
    assert (tiles.all(dim=(1, 3)) | ~tiles.any(dim=(1, 3))).all()
    n_blocks = rows * cols * kernel
    assert zeros(mask) == round(sparsity * n_blocks) * a * b
    means = w.abs().reshape(rows, a, cols, b, kernel).mean(dim=(1, 3))
    pruned = ~tiles.any(dim=(1, 3))
    if pruned.any() and (~pruned).any():
        assert means[pruned].max() <= means[~pruned].min()


def test_block_shape_errors() -> None:
    with pytest.raises(MaskShapeError) as info:
        block_mask(randn(8, 3, 3, 3), 0.5, [1, 4])
    text = str(info.value)
    assert ("Invalid block_shape [1, 4, 1, 1] for parameter shape torch.Size([8, 3, 3, 3]). "
            "Elements of block_shape must divide parameter shape evenly") in text
    assert "block4" in text and "[8, 3, 3, 3]" in text  # the shape, the type, the fix
    assert isinstance(info.value, ValueError) and isinstance(info.value, MaskShapeError)
    assert info.value.shape == (8, 3, 3, 3) and info.value.mask_type == [1, 4]
    with pytest.raises(MaskShapeError):
        compute_mask(randn(8, 3, 3, 3), 0.5, [1, 4])
    with pytest.raises(MaskShapeError):
        block_mask(randn(6, 8), 0.5, [4, 4])
    with pytest.raises(MaskShapeError, match="2 or more dimensions"):
        block_mask(randn(8), 0.5, [1, 4])
    with pytest.raises(ValueError, match="Invalid block_shape"):
        block_mask(randn(8, 8), 0.5, [0, 4])
    with pytest.raises(ValueError, match="Invalid block_shape"):
        block_mask(randn(8, 8), 0.5, [1, 4, 2])


# -- N:M -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("mask_type", "n", "m"), [("2:4", 2, 4), ("1:4", 1, 4), ("4:8", 4, 8), ("tensorrt", 2, 4)])
@pytest.mark.parametrize("shape", [(16, 32), (8, 16, 3, 3), (4, 8, 5)])
def test_nm_exactly_n_per_group(mask_type: str, n: int, m: int, shape: tuple[int, ...]) -> None:
    w = randn(*shape, seed=13)
    mask = compute_mask(w, 1 - n / m, mask_type)
    assert torch.equal(mask, nm_mask(w, n, m))
    moved_mask, moved_w = mask.movedim(1, -1), w.abs().movedim(1, -1)
    groups, scores = moved_mask.reshape(-1, m), moved_w.reshape(-1, m)
    assert (groups.sum(1) == n).all()
    kept_min = torch.where(groups, scores, torch.inf).min(1).values
    pruned_max = torch.where(groups, -torch.inf, scores).max(1).values
    assert (pruned_max <= kept_min).all()


def test_nm_ties_and_errors() -> None:
    assert nm_mask(torch.ones(1, 4), 2, 4).tolist() == [[True, True, False, False]]
    with pytest.raises(MaskShapeError, match=r"multiple of 4.*\[8, 6\]"):
        nm_mask(randn(8, 6), 2, 4)
    with pytest.raises(MaskShapeError, match="dimension 1"):
        compute_mask(randn(8, 3, 3, 3), 0.5, "tensorrt")
    with pytest.raises(MaskShapeError):
        nm_mask(randn(8), 2, 4)
    for n, m in ((0, 4), (5, 4), (2, 0)):
        with pytest.raises(ValueError, match="0 < N <= M"):
            nm_mask(randn(8, 8), n, m)
    with pytest.raises(ValueError, match="within 0.01"):
        compute_mask(randn(8, 8), 0.8, "2:4")  # SparseML: target must match 1 - N/M
    assert compute_mask(randn(8, 8), 0.0, "2:4").all()
    assert zeros(compute_mask(randn(8, 8), 0.505, "2:4")) == 32


def test_parse_mask_type() -> None:
    assert parse_mask_type("unstructured") == ("unstructured", None)
    assert parse_mask_type("block4") == ("block4", None)
    assert parse_mask_type([1, 4]) == ("block", (1, 4))
    assert parse_mask_type((2, -1)) == ("block", (2, -1))
    assert parse_mask_type("2:4") == ("nm", (2, 4))
    assert parse_mask_type("tensorrt") == ("nm", (2, 4))
    assert parse_mask_type("channel") == ("channel", None)
    assert parse_mask_type("filter") == ("filter", None)
    for bad in ("block8", "Unstructured", "3:2", "0:4", "2:4:8", [1], [1, 2, 3], [1.0, 4], [0, 4],
                [True, 4], 5, None, "block"):
        with pytest.raises(ValueError):
            parse_mask_type(bad)


# -- channel / filter ------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(16, 8, 3, 3), (10, 32)])
@pytest.mark.parametrize("sparsity", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_channel_and_filter(shape: tuple[int, ...], sparsity: float) -> None:
    w = randn(*shape, seed=17)
    for fn, dim in ((channel_mask, 1), (filter_mask, 0)):
        mask = fn(w, sparsity)
        others = [d for d in range(w.dim()) if d != dim]
        whole = mask.all(dim=others)
        assert torch.equal(whole, mask.any(dim=others))  # slices all or nothing
        assert int((~whole).sum()) == round(sparsity * shape[dim])
        l1 = w.abs().sum(dim=others)
        if (~whole).any() and whole.any():
            assert l1[~whole].max() <= l1[whole].min()
        kind = "channel" if dim == 1 else "filter"
        assert torch.equal(compute_mask(w, sparsity, kind), mask)
    with pytest.raises(MaskShapeError, match="channel"):
        channel_mask(randn(8), 0.5)


# -- validation and purity -------------------------------------------------------------------
@pytest.mark.parametrize("mask_type", ["unstructured", "block4", [1, 4], "2:4", "channel", "filter"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_weights(mask_type: object, bad: float) -> None:
    w = randn(8, 8)
    w[3, 5] = bad
    with pytest.raises(ValueError, match="contains NaN or infinite values"):
        compute_mask(w, 0.5, mask_type)


def test_nan_scores_and_bad_sparsity() -> None:
    with pytest.raises(ValueError, match="NaN"):
        unstructured_mask(torch.tensor([1.0, float("nan")]), 0.5)
    with pytest.raises(ValueError, match="NaN"):
        global_unstructured_masks([torch.ones(3), torch.tensor([float("nan")])], 0.5)
    for bad in (-0.1, 1.1, float("nan"), "0.5", True, None):
        with pytest.raises(ValueError, match="sparsity"):
            compute_mask(randn(4, 4), bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="sparsity"):
            unstructured_mask(randn(4), bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Unknown mask_type"):
        compute_mask(randn(4, 4), 0.5, "block8")


def test_pure_functions() -> None:
    param = torch.nn.Parameter(randn(8, 16))
    before = param.detach().clone()
    for mask_type in ("unstructured", "block4", [2, 4], "2:4", "channel", "filter"):
        mask = compute_mask(param, 0.5, mask_type)
        assert mask.dtype == torch.bool and mask.shape == param.shape
        assert not mask.requires_grad and mask.grad_fn is None
    assert torch.equal(param.detach(), before) and param.grad is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dtypes(dtype: torch.dtype) -> None:
    w = randn(30, 40).to(dtype)
    assert zeros(compute_mask(w, 0.37)) == round(0.37 * 1200)
    assert zeros(compute_mask(w, 0.5, "block4")) == 4 * round(0.5 * 300)


def test_large_tensor_sampled_path() -> None:
    w = randn(300, 400, seed=19)  # 120,000 entries: the sampled selection
    for sparsity in (0.0005, 0.05, 0.5, 0.93, 0.999):  # brackets open below and above too
        mask = compute_mask(w, sparsity)
        assert zeros(mask) == round(sparsity * w.numel())
        assert torch.equal(mask, reference_mask(w.abs(), round(sparsity * w.numel())))


# -- SparseML's measured counts (conformance set) ----------------------------------------------
def layerwise_cases() -> list[Path]:
    if not CASES_DIR.is_dir():
        return []
    out = []
    for path in sorted(CASES_DIR.glob("*.json")):
        case = json.loads(path.read_text())
        if set(case["modifiers"]) & {"GMPruningModifier", "MagnitudePruningModifier"} and (
            "leave_enabled: false" not in case["recipe"]
        ) and any(step.get("applied_sparsity") for step in case["steps"]):
            out.append(path)
    return out


@pytest.mark.parametrize("path", layerwise_cases(), ids=lambda p: p.stem)
def test_conformance_layerwise_counts(path: Path) -> None:
    """Every recorded layer-wise target gives exactly SparseML's measured number of zeros."""
    case = json.loads(path.read_text())
    found = re.search(r"mask_type:\s*(\S+)", case["recipe"])
    mask_type = found.group(1) if found else "unstructured"
    seen: set[tuple[str, float]] = set()
    for step in case["steps"]:
        for name, target in (step.get("applied_sparsity") or {}).items():
            if target is None or (name, target) in seen:
                continue
            seen.add((name, target))
            numel = case["param_numel"][name]
            mask = compute_mask(randn(*NET_SHAPES[name], seed=len(seen)), target, mask_type)
            assert zeros(mask) == round(step["sparsity"][name] * numel), (name, target)
    assert seen


def test_conformance_block_1x4_conv1_error() -> None:
    path = CASES_DIR / "12_gmp_block_1x4_list_conv1.json"
    error = json.loads(path.read_text())["error"]
    with pytest.raises(MaskShapeError) as info:
        compute_mask(randn(*NET_SHAPES["conv1.weight"]), 0.05, [1, 4])
    assert error["message"] in str(info.value)
