"""FP4 grids (:mod:`recipe_spec.quantization.fp4` and the grid's ``tensor_group`` and MX
scales) against a hand-written table and against compressed-tensors 0.19's own functions
(``cast_to_fp4``, ``generate_gparam``, ``calculate_qparams``, ``fake_quantize``), on NumPy and
on torch, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec.quantization.args import QuantArgs
from recipe_spec.quantization.fp4 import mx_exponents, round_fp4_e2m1
from recipe_spec.quantization.grid import fake_quantize_weight, minmax_qparams, quantize_weight, weight_global_scale

NVFP4 = QuantArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16, scale_dtype="float8_e4m3fn")
MXFP4 = QuantArgs(num_bits=4, type="float", strategy="group", group_size=32, scale_dtype="uint8")


def _backends() -> list[Any]:
    out: list[Any] = [pytest.param((NUMPY_OPS, np.asarray, np.asarray), id="numpy")]
    try:
        import torch
        from recipe_spec_torch.masks import TORCH_OPS
    except ImportError:
        return out
    out.append(pytest.param((TORCH_OPS, torch.from_numpy, lambda t: t.numpy()), id="torch"))
    return out


BACKENDS = _backends()


# -- rounding to e2m1 ----------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_fp4_rounding_table(backend: Any) -> None:
    """Each band's ends by hand: ties to the even value, beyond 6 to 6, the sign kept."""
    ops, arr, back = backend
    x = np.array([0.0, 0.25, 0.2500001, 0.5, 0.74, 0.75, 1.25, 1.2500001, 1.75, 2.5, 2.51, 3.49, 3.5, 5.0,
                  5.0000005, 6.0, 7.5, 1e30, -0.1, -0.75, -3.5, -9.0], np.float32)
    want = [0.0, 0.0, 0.5, 0.5, 0.5, 1.0, 1.0, 1.5, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0,
            6.0, 6.0, 6.0, 6.0, -0.0, -1.0, -4.0, -6.0]
    assert back(round_fp4_e2m1(ops, arr(x))).tolist() == want
    assert np.isnan(back(round_fp4_e2m1(ops, arr(np.array([np.nan], np.float32))))).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_fp4_rounding_is_compressed_tensors_cast_to_fp4(backend: Any) -> None:
    torch = pytest.importorskip("torch")
    fp4_utils = pytest.importorskip("compressed_tensors.quantization.utils.fp4_utils")
    ops, arr, back = backend
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-8, 8, 4000), np.arange(-7, 7.01, 0.25)]).astype(np.float32)
    want = fp4_utils.cast_to_fp4(torch.from_numpy(x.copy())).numpy()
    np.testing.assert_array_equal(back(round_fp4_e2m1(ops, arr(x))), want)


# -- NVFP4 and MX scales -------------------------------------------------------------------------
def _weight(rows: int, cols: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, cols)) * rng.uniform(0.01, 3.0, (rows, 1))).astype(np.float32)
    w[0, :32] = 0.0  # groups of zeros
    w[1, :32] = rng.uniform(-1e-30, 1e-30, 32).astype(np.float32)  # tiny groups
    w[2, 5] = 200.0  # an outlier
    return w


def _ct(args: QuantArgs) -> Any:
    quant_args = pytest.importorskip("compressed_tensors.quantization.quant_args")
    import torch

    return quant_args.QuantizationArgs(num_bits=args.num_bits, type=args.type, symmetric=True,
                                       strategy=args.strategy, group_size=args.group_size,
                                       scale_dtype=torch.float8_e4m3fn if args.scale_dtype == "float8_e4m3fn"
                                       else torch.uint8)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("args", [NVFP4, MXFP4], ids=["nvfp4", "mxfp4"])
def test_fp4_qparams_and_fake_quantize_are_compressed_tensors(backend: Any, args: QuantArgs) -> None:
    """The global scale (NVFP4), the group scales (FP8-rounded, or E8M0 powers of two) and the
    weight moved onto the grid are compressed-tensors' ``generate_gparam``,
    ``calculate_qparams`` and ``fake_quantize`` of the same weight, bit for bit."""
    torch = pytest.importorskip("torch")
    helpers = pytest.importorskip("compressed_tensors.quantization.utils.helpers")
    forward = pytest.importorskip("compressed_tensors.quantization.lifecycle.forward")
    ops, arr, back = backend
    w = _weight(6, 64, 1)
    ct_args = _ct(args)
    t = torch.from_numpy(w.copy())
    grouped = t.reshape(6, -1, args.group_size)
    gs = helpers.generate_gparam(t.min(), t.max()) if args.strategy == "tensor_group" else None
    scale, zp = helpers.calculate_qparams(grouped.amin(-1), grouped.amax(-1), ct_args, global_scale=gs)
    want = forward.fake_quantize(t, scale, zp, ct_args, global_scale=gs).numpy()

    ours_scale, _ = minmax_qparams(ops, arr(w), args)
    np.testing.assert_array_equal(back(ours_scale), scale.to(torch.float32).numpy())
    ours_gs = None
    if gs is not None:
        ours_gs = weight_global_scale(ops, arr(w))
        np.testing.assert_array_equal(back(ours_gs), gs.numpy())
    got = back(fake_quantize_weight(ops, arr(w), ours_scale, None, args, ours_gs))
    np.testing.assert_array_equal(got, want)
    q = back(quantize_weight(ops, arr(w), ours_scale, None, args, ours_gs))
    assert np.isin(np.abs(q), [0, 0.5, 1, 1.5, 2, 3, 4, 6]).all() and (np.abs(q) == 6).any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_mx_exponents_by_hand(backend: Any) -> None:
    """``127 + log2(p) - 2`` with ``p`` the power of two a group's absmax rounds to (a mantissa of
    1.75 or more rounds up): 1 -> 125, 1.74 -> 125, 1.75 -> 126, 6 -> 127 (6 = 1.5·4), 7 -> 128,
    0 -> 0, a subnormal -> 0, 2^127 -> 252, inf -> 255; FP8's offset is 8: 448 = 1.75·2^8
    rounds up to 2^9 -> 128."""
    ops, arr, back = backend
    x = np.array([1.0, 1.74, 1.75, 6.0, 7.0, 0.0, 1e-40, 2.0 ** 127, np.inf], np.float32)
    assert back(mx_exponents(ops, arr(x), 4)).tolist() == [125, 125, 126, 127, 128, 0, 0, 252, 255]
    assert back(mx_exponents(ops, arr(np.array([448.0, 447.0], np.float32)), 8)).tolist() == [128, 127]


# -- the arguments ---------------------------------------------------------------------------------
def test_quant_args_read_compressed_tensors_fp4_presets() -> None:
    nv = QuantArgs.from_config({"num_bits": 4, "type": "float", "symmetric": True, "group_size": 16,
                                "strategy": "tensor_group", "scale_dtype": "torch.float8_e4m3fn",
                                "zp_dtype": None, "dynamic": False})
    assert nv == NVFP4 and nv.q_range == (-6.0, 6.0) and not nv.mx
    mx = QuantArgs.from_config({"num_bits": 4, "type": "float", "group_size": 32, "strategy": "group",
                                "scale_dtype": "torch.uint8"})
    assert mx == MXFP4 and mx.mx


@pytest.mark.parametrize("config, message", [
    ({"num_bits": 4, "type": "int", "strategy": "tensor_group", "group_size": 16}, "FP4's"),
    ({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 16, "scale_dtype": "uint8"}, "E8M0"),
    ({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 16, "scale_dtype": "bfloat16"},
     "scale_dtype must be one of"),
    ({"num_bits": 4, "type": "float", "symmetric": False, "strategy": "channel"}, "FP4 grid is symmetric"),
    ({"num_bits": 6, "type": "float"}, "FP8 .* or FP4"),
    ({"num_bits": 4, "type": "float", "strategy": "tensor_group"}, "needs a positive group_size"),
])
def test_bad_fp4_arguments_are_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        QuantArgs.from_config(config)
