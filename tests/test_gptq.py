"""GPTQ's one-shot solver (recipe_spec.oneshot.gptq.solve) and its Hessian, on PyTorch and
NumPy: llm-compressor's reference runs reproduced from their stored Hessians (case 06 layer by
layer; case 10's W4A16 stage as far as its stored tensors allow), a dense float64
transcription of the algorithm (activation order weight and group, asymmetric groups), the
Cholesky retries, dead columns and refused arguments."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from oneshot_conformance import backends, case, events, one_torch_thread, relative_error

from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec.oneshot.gptq.solve import gptq_quantize
from recipe_spec.oneshot.shared.hessian import GPTQHessianStats
from recipe_spec.oneshot.shared.obs import SolverError, sparsegpt_prune
from recipe_spec.quantization import QuantArgs, minmax_qparams, preset_weights
from recipe_spec.quantization.grid import fake_quantize_weight, quantize_weight

__all__ = ["one_torch_thread"]

BACKENDS = backends()
CHANNEL = "06_gptq_int8_channel_explicit"
STAGED = "10_staged_sparse24_gptq_w4a16"


def _gptq_events(name: str) -> list[Any]:
    """``(prepare_batch, quantize_weight)`` event pairs of a case, in order."""
    try:
        prep, run = events(name, "gptq.prepare_batch"), events(name, "gptq.quantize_weight")
    except BaseException:  # the data is missing: one test that skips says so
        return [None]
    return list(zip(prep, run, strict=True))


def _weight_args(name: str) -> QuantArgs:
    gptq = next(m for m in case(name)["resolved_recipe"]["modifiers"] if m["type"] == "GPTQModifier")
    (group,) = gptq["resolved_quantization_config"]["config_groups"].values()
    return QuantArgs.from_config(group["weights"])


def _integers(weight: np.ndarray, scale: np.ndarray, zp: np.ndarray, args: QuantArgs) -> np.ndarray:
    return np.asarray(quantize_weight(NUMPY_OPS, weight, scale, zp.astype(np.float32), args))


# -- llm-compressor's reference runs ---------------------------------------------------------------
@pytest.mark.parametrize("ops, arr", BACKENDS)
@pytest.mark.parametrize("pair", _gptq_events(CHANNEL), ids=lambda p: p and p[0]["module"])
def test_reproduces_llm_compressor_gptq_int8_channel(ops: Any, arr: Any, pair: Any) -> None:
    """solver(initial W, stored H/n) is llm-compressor's quantized weight: the same scales and
    zero points (bit for bit), the same integers, the weights within 1e-5 of the layer's scale
    (measured: equal), the same loss."""
    if pair is None:
        case(CHANNEL)
    prep, run = pair
    data, module = case(CHANNEL), pair[0]["module"]
    assert run["actorder"] == "None" and not run["used_rtn_fallback"][0]
    args = _weight_args(CHANNEL)
    result = gptq_quantize(ops, arr(data["initial"][module + ".weight"]),
                           arr(data["intermediates"][prep["hessian_stored_as"]]), args=args,
                           block_size=run["blocksize"], dampening_frac=run["percdamp"], actorder=None)
    got, want = np.asarray(result.weight), data["final"][module + ".weight"]
    scale, zp = data["final"][module + ".weight_scale"], data["final"][module + ".weight_zero_point"]
    assert np.array_equal(np.asarray(result.scale), scale)
    assert np.array_equal(np.asarray(result.zero_point), zp.astype(np.float32))
    assert np.array_equal(np.asarray(result.scale), data["intermediates"]["gptq.observer_scale." + module])
    assert np.array_equal(_integers(got, scale, zp, args), _integers(want, scale, zp, args))
    assert relative_error(got, want) < 1e-5
    assert result.loss == pytest.approx(run["losses"][0], rel=1e-5)
    assert result.report is None and result.dead_columns == 0 and result.g_idx is None


def test_every_gptq_layer_of_case_06_has_its_hessian() -> None:
    pairs = _gptq_events(CHANNEL)
    if pairs == [None]:
        case(CHANNEL)
    assert len(pairs) == 14
    assert all(p["hessian_stored_as"] in case(CHANNEL)["intermediates"] for p, _ in pairs)


@pytest.mark.parametrize("pair", _gptq_events(STAGED), ids=lambda p: p and p[0]["module"])
def test_staged_w4a16_weights_are_on_the_grid_of_the_weight_entering_gptq(pair: Any) -> None:
    """Case 10 keeps no GPTQ Hessian: its final weights are on their W4A16 grid
    (``fake_quantize(final) == final``), their scales are the observer's, and for layer 0 (whose
    SparseGPT Hessians are kept) the group-128 scales are the min-max of the weight SparseGPT
    handed to GPTQ, reproduced here from the initial weight."""
    if pair is None:
        case(STAGED)
    data, module = case(STAGED), pair[0]["module"]
    args = preset_weights("W4A16")
    assert _weight_args(STAGED) == args
    final = data["final"][module + ".weight"]
    scale, zp = data["final"][module + ".weight_scale"], data["final"][module + ".weight_zero_point"]
    assert np.array_equal(scale, data["intermediates"]["gptq.observer_scale." + module])
    assert np.array_equal(np.asarray(fake_quantize_weight(NUMPY_OPS, final, scale, zp.astype(np.float32), args)), final)
    stored = {e["module"]: e["hessian_stored_as"] for e in events(STAGED, "sparsegpt.sparsify_weight")}
    if not stored.get(module):
        return
    sgpt = next(e for e in events(STAGED, "sparsegpt.sparsify_weight") if e["module"] == module)
    pruned = sparsegpt_prune(NUMPY_OPS, data["initial"][module + ".weight"], data["intermediates"][stored[module]],
                             sparsity=sgpt["sparsity"], prune_n=sgpt["prune_n"], prune_m=sgpt["prune_m"],
                             block_size=sgpt["block_size"], dampening_frac=sgpt["dampening_frac"]).weight
    want, _ = minmax_qparams(NUMPY_OPS, pruned, args)
    assert np.allclose(scale, want, rtol=1e-5, atol=0)


# -- the Hessian --------------------------------------------------------------------------------------
@pytest.mark.parametrize("ops, arr", BACKENDS)
def test_gptq_hessian_is_the_sum_over_sequences_divided_by_n(ops: Any, arr: Any) -> None:
    rng = np.random.default_rng(5)
    batches = [rng.normal(size=(b, t, 8)).astype(np.float32) for b, t in ((1, 5), (2, 3), (1, 7))]
    stats = GPTQHessianStats(ops, 8, arr(np.zeros(1, dtype=np.float32)))
    for x in batches:
        stats.add(arr(x))
    total = sum(x.reshape(-1, 8).astype(np.float64).T @ x.reshape(-1, 8) for x in batches)
    assert stats.samples == 4
    assert np.allclose(np.asarray(stats.hessian), 2 * total / 4, rtol=1e-5)


def test_torch_gptq_hessian_is_llm_compressors_bit_for_bit() -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec_torch.masks import TORCH_OPS  # noqa: PLC0415

    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(1, t, 16, generator=gen) for t in (9, 4, 13)]
    stats = GPTQHessianStats(TORCH_OPS, 16, torch.zeros(1))
    h, n = torch.zeros(16, 16), torch.zeros(())
    for x in xs:
        stats.add(x)
        inp = x.reshape(-1, 16).t()
        n += 1
        inp = 2 ** 0.5 * inp.to(torch.float32)
        h += inp.matmul(inp.t())
    assert torch.equal(stats.hessian, h / n)


# -- the algorithm: a dense float64 transcription -------------------------------------------------------
def _problem(rows: int, cols: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, cols)) * rng.uniform(0.2, 3.0, cols)
    x = x @ (np.eye(cols) + 0.3 * rng.normal(size=(cols, cols)) / np.sqrt(cols))
    return rng.normal(size=(rows, cols)).astype(np.float32), ((2.0 / 16) * x.T @ x).astype(np.float32)


def _dense_reference(w: np.ndarray, h: np.ndarray, args: QuantArgs, block: int, damp: float,
                     actorder: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int] | None]:
    """GPTQ written out plainly in float64: (weight, scale, zero point, g_idx of 'group')."""
    rows, cols = w.shape
    qmin, qmax = args.q_range
    size = args.group_size or cols

    def qparams(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g = {"group": x.reshape(rows, -1, size), "channel": x.reshape(rows, 1, -1)}.get(args.strategy)
        g = x.reshape(1, 1, -1) if g is None else g
        lo, hi = np.minimum(g.min(2), 0), np.maximum(g.max(2), 0)
        lo, hi = (lo.reshape(1), hi.reshape(1)) if args.strategy == "tensor" else (lo, hi)
        if args.symmetric:
            s = np.maximum(-lo, hi) / np.float32((qmax - qmin) / 2)
            return s.astype(np.float32), np.zeros_like(s, dtype=np.float32)
        s = ((hi - lo) / np.float32(qmax - qmin)).astype(np.float32)
        return s, np.round(np.clip(np.float32(qmin) - lo / s, qmin, qmax)).astype(np.float32)

    scale, zp = qparams(w)
    perm = np.argsort(-np.diag(h), kind="stable") if actorder else np.arange(cols)
    w, h = w[:, perm].astype(np.float64), h[np.ix_(perm, perm)].astype(np.float64)
    groups = (np.arange(cols) // size)[perm] if args.strategy == "group" else np.zeros(cols, int)
    if actorder == "group":
        scale, zp = qparams(w.astype(np.float32))
        groups = np.arange(cols) // size
    h = h + damp * np.mean(np.diag(h)) * np.eye(cols)
    hinv = np.linalg.cholesky(np.linalg.inv(h)).T
    for i1 in range(0, cols, block):
        i2 = min(i1 + block, cols)
        w1, h1, e1 = w[:, i1:i2].copy(), hinv[i1:i2, i1:i2], np.zeros((rows, i2 - i1))
        for i in range(i2 - i1):
            g = groups[i1 + i]
            s, z = (scale, zp) if args.strategy == "tensor" else (scale[:, g], zp[:, g])
            s = s.astype(np.float64)
            q = (np.clip(np.round(w1[:, i] / s + z), qmin, qmax) - z) * s
            e1[:, i] = (w1[:, i] - q) / h1[i, i]
            w1[:, i:] -= np.outer(e1[:, i], h1[i, i:])
            w1[:, i] = q
        w[:, i1:i2] = w1
        w[:, i2:] -= e1 @ hinv[i1:i2, i2:]
    inverse = np.argsort(perm)
    g_idx = [int(g) for g in groups[inverse]] if actorder == "group" else None
    return w[:, inverse], scale, zp, g_idx


@pytest.mark.parametrize("ops, arr", BACKENDS)
@pytest.mark.parametrize("rows, cols, block, args, actorder", [
    (32, 64, 16, QuantArgs(4, "int", True, "channel"), None),
    (32, 64, 16, QuantArgs(4, "int", True, "channel"), "static"),
    (24, 128, 32, QuantArgs(4, "int", True, "group", 32), "weight"),
    (24, 128, 48, QuantArgs(4, "int", False, "group", 32), None),
    (24, 128, 32, QuantArgs(4, "int", False, "group", 32), "weight"),
    (24, 128, 32, QuantArgs(4, "int", True, "group", 32), "group"),
    (16, 96, 64, QuantArgs(3, "int", False, "group", 16), "group"),
    (16, 64, 32, QuantArgs(8, "int", False, "tensor"), "weight")], ids=str)
def test_matches_a_dense_float64_transcription(ops: Any, arr: Any, rows: int, cols: int, block: int,
                                               args: QuantArgs, actorder: str | None) -> None:
    """The same qparams, the same integers (within 1e-4 of a grid step of the float64 values),
    the weights within 1e-6 of the layer's scale, ``g_idx`` for group order; every weight on
    its grid."""
    w, h = _problem(rows, cols, seed=rows + cols + block)
    result = gptq_quantize(ops, arr(w), arr(h), args=args, block_size=block, actorder=actorder)
    want, scale, zp, g_idx = _dense_reference(w, h, args, block, 0.01, actorder)
    got = np.asarray(result.weight)
    assert np.array_equal(np.asarray(result.scale), scale) and np.array_equal(np.asarray(result.zero_point), zp)
    assert result.g_idx == (None if g_idx is None else tuple(g_idx))
    steps = np.abs(got.astype(np.float64) - want) / _per_weight(scale, g_idx, args, rows, cols)
    assert steps.max() < 1e-4 and relative_error(got, want) < 1e-6  # measured: 4.5e-6 and 3.6e-8
    on_grid = _regrouped(got, g_idx, args)
    assert np.array_equal(np.asarray(fake_quantize_weight(NUMPY_OPS, on_grid, scale, zp, args)), on_grid)


def _per_weight(scale: np.ndarray, g_idx: list[int] | None, args: QuantArgs, rows: int, cols: int) -> np.ndarray:
    if args.strategy != "group":
        return np.broadcast_to(scale.reshape(-1, 1) if scale.size > 1 else scale, (rows, cols))
    groups = np.asarray(g_idx) if g_idx is not None else np.arange(cols) // args.group_size
    return scale[:, groups]


def _regrouped(w: np.ndarray, g_idx: list[int] | None, args: QuantArgs) -> np.ndarray:
    """The weight with its columns sorted by group (stable), so that groups are contiguous."""
    return w if g_idx is None else w[:, np.argsort(np.asarray(g_idx), kind="stable")]


# -- the Cholesky retries, dead columns, arguments ------------------------------------------------------
def _indefinite(cols: int, lowest: float) -> np.ndarray:
    """A symmetric matrix with eigenvalues 1 and one ``lowest`` (mean diagonal ~1)."""
    q, _ = np.linalg.qr(np.random.default_rng(7).normal(size=(cols, cols)))
    return ((q * np.r_[np.ones(cols - 1), lowest]) @ q.T).astype(np.float32)


@pytest.mark.parametrize("ops, arr", BACKENDS)
def test_cholesky_failure_retries_with_more_dampening_and_says_so(ops: Any, arr: Any) -> None:
    """Not llm-compressor's silent round-to-nearest: ten times the dampening, reported."""
    w = np.random.default_rng(2).normal(size=(8, 16)).astype(np.float32)
    args = QuantArgs(4, strategy="channel")
    result = gptq_quantize(ops, arr(w), arr(_indefinite(16, -0.05)), args=args)
    assert result.report == "cholesky failed at dampening_frac 0.01; used 0.1" and result.fallback
    direct = gptq_quantize(ops, arr(w), arr(_indefinite(16, -0.05)), args=args, dampening_frac=0.1, retries=0)
    assert np.array_equal(np.asarray(result.weight), np.asarray(direct.weight)) and direct.report is None
    rtn = fake_quantize_weight(NUMPY_OPS, w, np.asarray(result.scale), np.asarray(result.zero_point), args)
    assert not np.array_equal(np.asarray(result.weight), rtn)  # a real update, not round-to-nearest


@pytest.mark.parametrize("ops, arr", BACKENDS)
def test_no_dampening_helps_raises_a_clear_error(ops: Any, arr: Any) -> None:
    h = -np.eye(8, dtype=np.float32)
    with pytest.raises(SolverError, match="not positive definite"):
        gptq_quantize(ops, arr(np.ones((4, 8), np.float32)), arr(h), args=QuantArgs(8), retries=2)


@pytest.mark.parametrize("ops, arr", BACKENDS)
def test_dead_columns_are_zeroed_after_the_observer(ops: Any, arr: Any) -> None:
    w, h = _problem(8, 32, seed=1)
    h[:, 5] = h[5, :] = 0.0
    args = QuantArgs(8, strategy="channel")
    result = gptq_quantize(ops, arr(w), arr(h), args=args)
    assert result.dead_columns == 1 and not np.asarray(result.weight)[:, 5].any()
    assert np.array_equal(np.asarray(result.scale), np.asarray(minmax_qparams(NUMPY_OPS, w, args)[0]))


@pytest.mark.parametrize("kwargs, message", [
    ({"actorder": "sideways"}, "actorder must be one of"), ({"block_size": 0}, "block_size"),
    ({"dampening_frac": -1.0}, "dampening_frac"), ({"scale": np.ones((8, 1), np.float32)}, "both scale"),
    ({"args": QuantArgs(4, strategy="group", group_size=24)}, "does not divide"),
    ({"g_idx": [0] * 32}, "needs strategy 'group'")])
def test_bad_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    w, h = _problem(8, 32, seed=2)
    kwargs = {"args": QuantArgs(8, strategy="channel"), **kwargs}
    with pytest.raises(ValueError, match=message):
        gptq_quantize(NUMPY_OPS, w, h, **kwargs)


def test_group_order_on_channel_scales_is_no_order() -> None:
    """As llm-compressor: ``actorder: group`` needs group scales, else the columns keep their order."""
    w, h = _problem(8, 32, seed=3)
    args = QuantArgs(4, strategy="channel")
    a = gptq_quantize(NUMPY_OPS, w, h, args=args, actorder="group")
    b = gptq_quantize(NUMPY_OPS, w, h, args=args, actorder=None)
    assert np.array_equal(a.weight, b.weight) and a.g_idx is None


@pytest.mark.parametrize("symmetric", [True, False])
def test_a_bfloat16_weight_gets_compressed_tensors_bfloat16_scales(symmetric: bool) -> None:
    """llm-compressor's observer reads the weight as the model holds it: on a bfloat16 model
    the scales and zero points are compressed-tensors' ``calculate_qparams`` of the bfloat16
    minima and maxima, computed in bfloat16; GPTQ then runs in float32 with those values and
    returns a bfloat16 weight on that grid."""
    torch = pytest.importorskip("torch")
    ct = pytest.importorskip("compressed_tensors.quantization")
    from compressed_tensors.quantization.utils import calculate_qparams
    from recipe_spec_torch.masks import TORCH_OPS

    gen = torch.Generator().manual_seed(0)
    weight = (torch.randn(16, 256, generator=gen) * 0.05).to(torch.bfloat16)
    x = torch.randn(64, 256, generator=gen)
    hessian = 2 * x.T @ x / 64
    args = QuantArgs(num_bits=4, type="int", symmetric=symmetric, strategy="group", group_size=128)
    result = gptq_quantize(TORCH_OPS, weight, hessian, args=args)
    groups = weight.reshape(16, 2, 128)
    want_scale, want_zero = calculate_qparams(
        groups.amin(dim=-1), groups.amax(dim=-1),
        ct.QuantizationArgs(num_bits=4, type="int", symmetric=symmetric, strategy="group", group_size=128))
    assert want_scale.dtype == torch.bfloat16
    assert torch.equal(result.scale, want_scale.float())
    if not symmetric:
        assert torch.equal(result.zero_point, want_zero.float())
    assert result.weight.dtype == torch.bfloat16
    float32_scales = gptq_quantize(TORCH_OPS, weight.float(), hessian, args=args).scale
    assert not torch.equal(float32_scales, result.scale)  # the bfloat16 rounding is what differs
