"""SparseGPT's one-shot solver and its Hessian (recipe_spec.oneshot.shared.obs and
.hessian), on PyTorch and NumPy: llm-compressor's reference runs reproduced from their stored
Hessians, a dense float64 transcription of the algorithm, llm-compressor's own code transcribed
in torch (bit for bit on the machine running the tests), the Cholesky retries, dead columns,
preserved masks and refused arguments."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from oneshot_conformance import (
    backends,
    case,
    events,
    one_torch_thread,
    relative_error,
    zeros_bitmask,
)

from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec.oneshot.shared.hessian import HessianStats
from recipe_spec.oneshot.shared.obs import SolverError, sparsegpt_prune

__all__ = ["one_torch_thread"]  # the autouse fixture, imported to run here

BACKENDS = backends()
SPARSE24 = "02_sparsegpt_2of4"
STAGED = "10_staged_sparse24_gptq_w4a16"


def _problem(rows: int, cols: int, seed: int, tokens: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """A float32 weight and the Hessian ``(2/n)·XᵀX`` of correlated random inputs."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(tokens, cols)) @ (np.eye(cols) + 0.3 * rng.normal(size=(cols, cols)) / np.sqrt(cols))
    h = (2.0 / 16) * x.T @ x
    return rng.normal(size=(rows, cols)).astype(np.float32), h.astype(np.float32)


# -- llm-compressor's reference runs ---------------------------------------------------------------
def _sparsegpt_events(name: str) -> list[Any]:
    try:
        return [e for e in events(name, "sparsegpt.sparsify_weight") if e["hessian_stored_as"]]
    except BaseException:  # the data is missing: one test that skips says so
        return [None]


def _run_event(ops: Any, arr: Any, name: str, event: dict[str, Any]) -> Any:
    data = case(name)
    return sparsegpt_prune(ops, arr(data["initial"][event["module"] + ".weight"]),
                           arr(data["intermediates"][event["hessian_stored_as"]]),
                           sparsity=event["sparsity"], prune_n=event["prune_n"], prune_m=event["prune_m"],
                           block_size=event["block_size"], dampening_frac=event["dampening_frac"])


@pytest.mark.parametrize("ops, arr", BACKENDS)
@pytest.mark.parametrize("event", _sparsegpt_events(SPARSE24), ids=lambda e: e and e["module"])
def test_reproduces_llm_compressor_sparsegpt_2of4(ops: Any, arr: Any, event: dict[str, Any]) -> None:
    """solver(initial W, stored H) is llm-compressor's pruned weight: the same zeros, the
    weights within 1e-5 of the layer's scale (measured: at most 3.5e-6), the same loss."""
    if event is None:
        case(SPARSE24)
    result = _run_event(ops, arr, SPARSE24, event)
    data = case(SPARSE24)
    got, want = np.asarray(result.weight), data["final"][event["module"] + ".weight"]
    assert zeros_bitmask(got) == data["masks"][event["module"]]["zeros_bitmask_b64"]
    assert np.array_equal(np.asarray(result.mask), want != 0)
    assert relative_error(got, want) < 1e-5
    assert result.loss == pytest.approx(event["loss"], rel=1e-5)
    assert result.report is None and result.dead_columns == 0 and result.dampening_frac == 0.01


@pytest.mark.parametrize("ops, arr", BACKENDS)
@pytest.mark.parametrize("event", _sparsegpt_events(STAGED), ids=lambda e: e and e["module"])
def test_reproduces_the_sparsegpt_stage_of_the_staged_recipe(ops: Any, arr: Any, event: dict[str, Any]) -> None:
    """Stage 1 of SparseGPT 2:4 then GPTQ (GPTQ rewrote the final weights, so the stage's
    record is its loss and the 2:4 pattern GPTQ received)."""
    if event is None:
        case(STAGED)
    result = _run_event(ops, arr, STAGED, event)
    zeros = np.asarray(result.weight) == 0
    gptq = next(e for e in events(STAGED, "gptq.prepare_batch") if e["module"] == event["module"])
    assert zeros.mean() == gptq["input_weight_zero_fraction"] == 0.5
    assert (zeros.reshape(zeros.shape[0], -1, 4).sum(-1) == 2).all()
    assert result.loss == pytest.approx(event["loss"], rel=1e-5)


# -- the Hessian ---------------------------------------------------------------------------------
@pytest.mark.parametrize("ops, arr", BACKENDS)
def test_hessian_is_the_mean_over_sequences(ops: Any, arr: Any) -> None:
    """Batches of unequal size: ``H = (2/n)·Σ XᵀX`` with n the number of sequences."""
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=s).astype(np.float32) for s in [(3, 5, 8), (1, 7, 8), (2, 4, 8), (6, 8)]]
    stats = HessianStats(ops, 8, arr(np.zeros(1, np.float32)))
    for x in batches:
        stats.add(arr(x))
    total = sum(x.reshape(-1, 8).astype(np.float64).T @ x.reshape(-1, 8) for x in batches)
    assert stats.samples == 7
    assert np.allclose(np.asarray(stats.hessian), 2 / 7 * total, rtol=1e-5, atol=1e-5)
    assert str(np.asarray(stats.hessian).dtype) == "float32"
    stats.add(arr(batches[0]), sequences=10)
    assert stats.samples == 17
    with pytest.raises(ValueError, match=r"does not fit a layer with 8 input columns"):
        stats.add(arr(np.zeros((2, 3, 5), np.float32)))


def test_torch_hessian_is_llm_compressors_bit_for_bit() -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec_torch.masks import TORCH_OPS

    gen = torch.Generator().manual_seed(1)
    stats, h, n = HessianStats(TORCH_OPS, 16, torch.zeros(1)), torch.zeros(16, 16), 0
    for b, t in [(1, 40), (3, 17), (2, 9)]:
        x = torch.randn(b, t, 16, generator=gen, dtype=torch.float64).to(torch.bfloat16)
        stats.add(x)
        inp = x.reshape(-1, 16).t()  # llm-compressor's accumulate_hessian
        h *= n / (n + b)
        n += b
        inp = inp.to(dtype=torch.float32)
        inp = np.sqrt(2 / n).item() * inp
        h += inp.matmul(inp.t())
    assert torch.equal(stats.hessian, h) and stats.samples == n


@pytest.mark.parametrize("columns", [8, 300])
def test_numpy_hessian_sums_half_products_with_the_whole_products_bits(columns: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """NumPy adds BLAS ``syrk`` products (the lower triangle, zeros above) and mirrors the sum
    when read: the Hessian is the one of whole ``matmul`` products, bit for bit, and symmetric."""
    pytest.importorskip("scipy")
    from recipe_spec.masks import numpy_ops

    rng = np.random.default_rng(2)
    batches = [rng.normal(size=(b, t, columns)).astype(np.float32) for b, t in [(1, 40), (3, 17), (2, 9)]]
    half = HessianStats(NUMPY_OPS, columns, np.zeros(1, np.float32))
    for x in batches:
        half.add(x)
    part = NUMPY_OPS.gram(np.ascontiguousarray(batches[0].reshape(-1, columns).T))
    assert not np.triu(part, 1).any() and np.tril(part).any()  # the lower triangle only
    mirrored = half.hessian
    monkeypatch.setattr(numpy_ops, "_scipy", lambda kind, name, like: None)  # no SciPy: whole products
    whole = HessianStats(NUMPY_OPS, columns, np.zeros(1, np.float32))
    for x in batches:
        whole.add(x)
    np.testing.assert_array_equal(mirrored, whole.hessian)
    np.testing.assert_array_equal(mirrored, mirrored.T)


# -- the algorithm: a dense float64 transcription, and llm-compressor's code -----------------------
def _dense_reference(w: np.ndarray, h: np.ndarray, sparsity: float, n: int, m: int, block: int,
                     damp: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """The algorithm written out plainly in float64: (weight, kept mask)."""
    w, h = w.astype(np.float64), h.astype(np.float64)
    rows, cols = w.shape
    for j in range(cols):
        if h[j, j] == 0:
            h[j, j], w[:, j] = 1.0, 0.0
    h = h + damp * np.mean(np.diag(h)) * np.eye(cols)
    hinv = np.linalg.cholesky(np.linalg.inv(h)).T  # upper: hinv.T @ hinv = H⁻¹
    pruned = np.zeros(w.shape, bool)
    for i1 in range(0, cols, block):
        i2 = min(i1 + block, cols)
        w1, h1 = w[:, i1:i2].copy(), hinv[i1:i2, i1:i2]
        p1, q1, e1 = np.zeros(w1.shape, bool), np.zeros_like(w1), np.zeros_like(w1)
        if n == 0:
            tmp = w1 ** 2 / np.diag(h1) ** 2
            p1 = tmp <= np.sort(tmp.ravel())[int(tmp.size * sparsity)]
        for i in range(i2 - i1):
            if n and i % m == 0:
                for r in range(rows):
                    tmp = w1[r, i:i + m] ** 2 / np.diag(h1)[i:i + m] ** 2
                    p1[r, i + np.argsort(tmp, kind="stable")[:n]] = True
            q1[:, i] = np.where(p1[:, i], 0.0, w1[:, i])
            e1[:, i] = (w1[:, i] - q1[:, i]) / h1[i, i]
            for k in range(i, i2 - i1):
                w1[:, k] -= e1[:, i] * h1[i, k]
        w[:, i1:i2], pruned[:, i1:i2] = q1, p1
        w[:, i2:] -= e1 @ hinv[i1:i2, i2:]
    return w, ~pruned


@pytest.mark.parametrize("ops, arr", BACKENDS)
@pytest.mark.parametrize("rows, cols, block, sparsity, n, m", [
    (64, 64, 128, 0.5, 0, 0), (48, 96, 40, 0.5, 0, 0), (32, 100, 32, 0.3, 0, 0),
    (24, 96, 8, 0.5, 2, 4), (16, 64, 64, 0.0, 1, 4)])
def test_matches_a_dense_float64_transcription(ops: Any, arr: Any, rows: int, cols: int, block: int,
                                               sparsity: float, n: int, m: int) -> None:
    w, h = _problem(rows, cols, seed=rows + cols)
    result = sparsegpt_prune(ops, arr(w), arr(h), sparsity=sparsity, prune_n=n, prune_m=m, block_size=block)
    want_w, want_keep = _dense_reference(w, h, sparsity, n, m, block)
    assert np.array_equal(np.asarray(result.mask), want_keep)
    assert np.array_equal(np.asarray(result.weight) == 0, ~want_keep)
    assert relative_error(np.asarray(result.weight), want_w) < 2e-5


@pytest.mark.parametrize("ops, arr", BACKENDS)
@pytest.mark.parametrize("rows, cols, block, zeros", [(64, 64, 128, 2049), (64, 96, 40, 1281 + 1281 + 513)])
def test_unstructured_prunes_one_extra_weight_per_tile(ops: Any, arr: Any, rows: int, cols: int,
                                                       block: int, zeros: int) -> None:
    """llm-compressor's ``tmp <= thresh`` with ``thresh`` the ``int(numel·s)``-th smallest
    (0-based): a 64 x 64 tile at 0.5 keeps 2047 weights."""
    w, h = _problem(rows, cols, seed=3)
    result = sparsegpt_prune(ops, arr(w), arr(h), sparsity=0.5, block_size=block)
    assert int((np.asarray(result.weight) == 0).sum()) == zeros
    assert int((~np.asarray(result.mask)).sum()) == zeros


def _llm_compressor(W: Any, H: Any, sparsity: float, n: int, m: int, block: int, preserve: bool) -> Any:
    """llm-compressor 0.14's ``sparsify_weight`` for a Linear, transcribed (no identity fallback)."""
    import torch

    W, H = W.clone().float(), H.clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    damp = 0.01 * torch.mean(torch.diag(H))
    diag = torch.arange(H.shape[0])
    H[diag, diag] += damp
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    mask = (W == 0) if preserve else None
    for i1 in range(0, W.shape[1], block):
        i2 = min(i1 + block, W.shape[1])
        W1, Hinv1 = W[:, i1:i2].clone(), Hinv[i1:i2, i1:i2]
        Q1, Err1 = torch.zeros_like(W1), torch.zeros_like(W1)
        if n == 0:
            if mask is not None:
                mask1 = mask[:, i1:i2]
                if int(W1.numel() * sparsity) > mask1.sum():
                    tmp = (~mask[:, i1:i2]) * W1 ** 2 / (torch.diag(Hinv1).reshape((1, -1))) ** 2
                    mask1 = tmp <= torch.sort(tmp.flatten())[0][int(tmp.numel() * sparsity)]
            else:
                tmp = W1 ** 2 / (torch.diag(Hinv1).reshape((1, -1))) ** 2
                mask1 = tmp <= torch.sort(tmp.flatten())[0][int(tmp.numel() * sparsity)]
        else:
            mask1 = mask[:, i1:i2] if mask is not None else torch.zeros_like(W1) == 1
        for i in range(i2 - i1):
            w, d = W1[:, i], Hinv1[i, i]
            if n != 0 and i % m == 0:
                tmp = W1[:, i:i + m] ** 2 / (torch.diag(Hinv1)[i:i + m].reshape((1, -1))) ** 2
                if mask is not None:
                    tmp = tmp * (~mask[:, i:i + m])
                mask1.scatter_(1, i + torch.topk(tmp, n, dim=1, largest=False)[1], True)
            q = w.clone()
            q[mask1[:, i]] = 0
            Q1[:, i] = q
            err1 = (w - q) / d
            W1[:, i:] -= err1.unsqueeze(1).matmul(Hinv1[i, i:].unsqueeze(0))
            Err1[:, i] = err1
        W[:, i1:i2] = Q1
        if mask is not None:
            W[:, i2:] -= (~mask[:, i2:]) * Err1.matmul(Hinv[i1:i2, i2:])
        else:
            W[:, i2:] -= Err1.matmul(Hinv[i1:i2, i2:])
    return W


@pytest.mark.parametrize("cols, block, sparsity, n, m, preserve, dead", [
    (96, 32, 0.5, 0, 0, False, ()), (96, 32, 0.6, 2, 4, False, (5, 40)), (64, 64, 0.7, 0, 0, True, ()),
    (64, 128, 0.5, 2, 4, True, (3,)), (80, 16, 0.25, 0, 0, False, (0, 17, 79))])
def test_torch_is_llm_compressors_code_bit_for_bit(cols: int, block: int, sparsity: float, n: int, m: int,
                                                   preserve: bool, dead: tuple[int, ...]) -> None:
    """Unstructured, N:M, several blocks, dead columns, a preserved mask (within one block,
    where llm-compressor reads the right columns)."""
    torch = pytest.importorskip("torch")
    from recipe_spec_torch.masks import TORCH_OPS

    w, h = _problem(32, cols, seed=cols + block)
    w[np.random.default_rng(1).random(w.shape) < (0.2 if preserve else 0.0)] = 0
    h[list(dead), :] = 0
    h[:, list(dead)] = 0
    W, H = torch.from_numpy(w), torch.from_numpy(h)
    w0, h0 = w.copy(), h.copy()
    result = sparsegpt_prune(TORCH_OPS, W, H, sparsity=sparsity, prune_n=n, prune_m=m, block_size=block,
                             preserve_mask=preserve)
    assert torch.equal(result.weight, _llm_compressor(W, H, sparsity, n, m, block, preserve))
    assert result.dead_columns == len(dead)
    assert not result.mask[:, list(dead)].any()
    assert np.array_equal(W.numpy(), w0) and np.array_equal(H.numpy(), h0)  # inputs untouched


# -- Cholesky failures: retried with more dampening and reported, never the identity ----------------
def _indefinite(cols: int, lowest: float) -> np.ndarray:
    """A symmetric matrix with eigenvalues 1 and one ``lowest`` (mean diagonal ~1)."""
    q, _ = np.linalg.qr(np.random.default_rng(7).normal(size=(cols, cols)))
    return ((q * np.r_[np.ones(cols - 1), lowest]) @ q.T).astype(np.float32)


@pytest.mark.parametrize("ops, arr", BACKENDS)
def test_cholesky_failure_retries_with_more_dampening_and_says_so(ops: Any, arr: Any) -> None:
    w = np.random.default_rng(2).normal(size=(8, 16)).astype(np.float32)
    h = _indefinite(16, -0.05)  # damp 0.01·mean(diag) leaves it indefinite, 0.1 does not
    result = sparsegpt_prune(ops, arr(w), arr(h), sparsity=0.5)
    assert result.report == "cholesky failed at dampening_frac 0.01; used 0.1" and result.fallback
    assert result.dampening_frac == pytest.approx(0.1)
    direct = sparsegpt_prune(ops, arr(w), arr(h), sparsity=0.5, dampening_frac=0.1, retries=0)
    assert np.array_equal(np.asarray(result.weight), np.asarray(direct.weight)) and direct.report is None
    kept = np.asarray(result.mask)
    assert not np.allclose(np.asarray(result.weight)[kept], w[kept])  # a real update, not magnitude pruning


@pytest.mark.parametrize("ops, arr", BACKENDS)
def test_no_dampening_helps_raises_a_clear_error(ops: Any, arr: Any) -> None:
    w = np.ones((4, 8), np.float32)
    with pytest.raises(SolverError, match=r"not positive definite even with dampening_frac 10 "
                                          r"\(tried 0.01, 0.1, 1, 10\).*calibration"):
        sparsegpt_prune(ops, arr(w), arr(-np.eye(8, dtype=np.float32)), sparsity=0.5)
    with pytest.raises(SolverError, match=r"tried 0.01\)"):
        sparsegpt_prune(ops, arr(w), arr(_indefinite(8, -0.05)), sparsity=0.5, retries=0)
    h = np.eye(8, dtype=np.float32)
    h[2, 3] = np.nan
    with pytest.raises(SolverError, match=r"Hessian holds 1 NaN or infinite"):
        sparsegpt_prune(ops, arr(w), arr(h), sparsity=0.5)


@pytest.mark.parametrize("ops, arr", BACKENDS)
def test_a_singular_hessian_is_fine_once_dampened(ops: Any, arr: Any) -> None:
    """Fewer tokens than columns: H is singular but positive semidefinite."""
    x = np.random.default_rng(4).normal(size=(5, 16))
    result = sparsegpt_prune(ops, arr(np.ones((4, 16), np.float32)), arr((x.T @ x).astype(np.float32)),
                             sparsity=0.5)
    assert result.report is None and np.isfinite(np.asarray(result.weight)).all()


# -- dead columns, preserved masks, dtypes ---------------------------------------------------------
@pytest.mark.parametrize("ops, arr", BACKENDS)
@pytest.mark.parametrize("n, m", [(0, 0), (2, 4)])
def test_dead_columns_are_zeroed_and_masked(ops: Any, arr: Any, n: int, m: int) -> None:
    w, h = _problem(16, 32, seed=5)
    h[[3, 9], :] = 0
    h[:, [3, 9]] = 0
    result = sparsegpt_prune(ops, arr(w), arr(h), sparsity=0.5, prune_n=n, prune_m=m)
    got = np.asarray(result.weight)
    assert result.dead_columns == 2 and np.isfinite(got).all()
    assert (got[:, [3, 9]] == 0).all() and not np.asarray(result.mask)[:, [3, 9]].any()
    assert np.array_equal(got == 0, ~np.asarray(result.mask))


@pytest.mark.parametrize("ops, arr", BACKENDS)
@pytest.mark.parametrize("n, m, sparsity", [(0, 0, 0.5), (2, 4, 0.5)])
def test_preserved_zeros_stay_pruned_in_every_block(ops: Any, arr: Any, n: int, m: int, sparsity: float) -> None:
    w, h = _problem(16, 64, seed=6)
    w[np.random.default_rng(6).random(w.shape) < 0.3] = 0
    before = w == 0
    result = sparsegpt_prune(ops, arr(w), arr(h), sparsity=sparsity, prune_n=n, prune_m=m, block_size=16,
                             preserve_mask=True)
    got, keep = np.asarray(result.weight), np.asarray(result.mask)
    assert (got[before] == 0).all() and not keep[before].any()
    if n:
        assert ((~keep).reshape(16, -1, 4).sum(-1) >= 2).all()
    same = sparsegpt_prune(ops, arr(w), arr(h), sparsity=sparsity, prune_n=n, prune_m=m, block_size=16,
                           preserve_mask=arr(~before))
    assert np.array_equal(np.asarray(same.weight), got)
    with pytest.raises(ValueError, match=r"already 0.2861 sparse, more than the target sparsity 0.2"):
        sparsegpt_prune(ops, arr(w), arr(h), sparsity=0.2, preserve_mask=True)


def test_result_has_the_weights_dtype_and_device() -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec_torch.masks import TORCH_OPS

    w, h = _problem(8, 16, seed=8)
    result = sparsegpt_prune(TORCH_OPS, torch.from_numpy(w).half(), torch.from_numpy(h), sparsity=0.5)
    assert result.weight.dtype == torch.float16 and result.mask.dtype == torch.bool
    single = sparsegpt_prune(NUMPY_OPS, w.astype(np.float16), h, sparsity=0.5)
    assert single.weight.dtype == np.float16


@pytest.mark.parametrize("kwargs, message", [
    ({"sparsity": 1.0}, r"sparsity must be a number in \[0, 1\), got 1.0"),
    ({"sparsity": -0.1}, r"sparsity must be"),
    ({"sparsity": float("nan")}, r"sparsity must be"),
    ({"sparsity": 0.5, "prune_n": 5, "prune_m": 4}, r"5:4 .* N must not exceed M"),
    ({"sparsity": 0.5, "prune_n": 2, "prune_m": 3}, r"multiple of 3; this weight has 16"),
    ({"sparsity": 0.5, "prune_n": 2, "prune_m": 4, "block_size": 6}, r"block_size 6 must be a multiple of M = 4"),
    ({"sparsity": 0.5, "block_size": 0}, r"block_size must be a whole number >= 1"),
    ({"sparsity": 0.5, "dampening_frac": -1.0}, r"dampening_frac must be a finite number >= 0"),
])
def test_bad_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    w, h = _problem(4, 16, seed=9)
    with pytest.raises(ValueError, match=message):
        sparsegpt_prune(NUMPY_OPS, w, h, **kwargs)


def test_bad_shapes_are_refused() -> None:
    w, h = _problem(4, 16, seed=9)
    with pytest.raises(ValueError, match=r"Hessian has shape \[8, 8\], but a weight with 16 input columns"):
        sparsegpt_prune(NUMPY_OPS, w, h[:8, :8], sparsity=0.5)
    with pytest.raises(ValueError, match=r"takes a 2-D weight \(out, in\), got shape \[16\]"):
        sparsegpt_prune(NUMPY_OPS, w[0], h, sparsity=0.5)
    w[1, 2] = np.inf
    with pytest.raises(SolverError, match=r"weight holds 1 NaN or infinite"):
        sparsegpt_prune(NUMPY_OPS, w, h, sparsity=0.5)


def test_both_backends_supply_every_solver_operation() -> None:
    from recipe_spec.pruning.second_order.ops import FisherOps, SolverOps

    names = {n for cls in (SolverOps, FisherOps) for n in vars(cls) if not n.startswith("_")}
    for param in BACKENDS:
        ops = param.values[0]
        assert not {n for n in names if not callable(getattr(ops, n, None))}, type(ops).__name__


def test_numpy_scalars_are_numbers_and_bools_are_not() -> None:
    w, h = _problem(4, 16, seed=9)
    result = sparsegpt_prune(NUMPY_OPS, w, h, sparsity=np.float32(0.5), prune_n=np.int64(2), prune_m=4,
                             dampening_frac=np.float64(0.01))
    assert ((~result.mask).reshape(4, -1, 4).sum(-1) == 2).all()
    with pytest.raises(ValueError, match=r"whole numbers N, M >= 0, got True:4"):
        sparsegpt_prune(NUMPY_OPS, w, h, sparsity=0.5, prune_n=True, prune_m=4)
