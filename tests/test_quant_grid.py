"""The quantization grid (recipe_spec.quantization), on PyTorch and NumPy: compressed-tensors 0.19's
own scales, zero points and fake-quantized weights (tests/fixtures/quant_grid, written by
compressed-tensors itself), the README formulas on the stored qparams of the llm-compressor
reference runs, NumPy's FP8 e4m3 rounding against torch's cast, and the arguments."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from oneshot_conformance import ROOT, backends, case, one_torch_thread

from recipe_spec.masks.numpy_ops import round_fp8_e4m3
from recipe_spec.quantization import QuantArgs, fake_quantize, minmax_qparams, preset_weights
from recipe_spec.quantization.grid import fake_quantize_weight, quantize_weight

__all__ = ["one_torch_thread"]

BACKENDS = backends()
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "quant_grid"


def _reference() -> tuple[Any, dict[str, np.ndarray]]:
    """The fixture's configurations and weights (its module), and compressed-tensors' values."""
    spec = importlib.util.spec_from_file_location("make_reference", FIXTURES / "make_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, dict(np.load(FIXTURES / "compressed_tensors_0.19.npz"))


REF, CT = _reference()


@pytest.mark.parametrize("ops, arr", BACKENDS)
@pytest.mark.parametrize("name", sorted(REF.CONFIGS))
def test_matches_compressed_tensors_bit_for_bit(ops: Any, arr: Any, name: str) -> None:
    """Scales, zero points and fake-quantized weights equal compressed-tensors' own (zero
    rows, one-signed rows, a constant group and every bit width included)."""
    args = QuantArgs.from_config(REF.CONFIGS[name])
    w = arr(REF.weights())
    scale, zp = minmax_qparams(ops, w, args)
    assert np.array_equal(np.asarray(scale), CT[f"{name}.scale"])
    assert np.array_equal(np.asarray(zp), CT[f"{name}.zero_point"])
    fake = np.asarray(fake_quantize_weight(ops, w, scale, zp, args))
    assert np.array_equal(fake, CT[f"{name}.fake"])


def test_the_reference_is_compressed_tensors_own() -> None:
    """Where compressed-tensors 0.19 is installed, the stored reference is what it computes."""
    pytest.importorskip("compressed_tensors")
    torch = pytest.importorskip("torch")
    from compressed_tensors.quantization import QuantizationArgs  # noqa: PLC0415
    from compressed_tensors.quantization import fake_quantize as ct_fake  # noqa: PLC0415

    w = torch.from_numpy(REF.weights())
    for name, fields in REF.CONFIGS.items():
        args = QuantizationArgs(**fields)
        s, z = torch.from_numpy(CT[f"{name}.scale"]), torch.from_numpy(CT[f"{name}.zero_point"])
        assert np.array_equal(ct_fake(w, s, z.to(args.zp_dtype), args).numpy(), CT[f"{name}.fake"]), name


# -- the README formulas on the reference runs' stored qparams ------------------------------------
@pytest.mark.parametrize("name, absmax_over", [("06_gptq_int8_channel_explicit", 127.5)])
def test_stored_channel_scales_are_absmax_over_127_5(name: str, absmax_over: float) -> None:
    data = case(name)
    for key, scale in data["intermediates"].items():
        if key.startswith("gptq.observer_scale."):
            module = key[len("gptq.observer_scale."):]
            w = data["initial"][module + ".weight"]
            want = np.max(np.abs(w), axis=1, keepdims=True) / np.float32(absmax_over)
            assert np.array_equal(scale, want), module
            got, _ = minmax_qparams(_np_ops(), w, QuantArgs(8, "int", True, "channel"))
            assert np.array_equal(got, scale), module


def test_fp8_dynamic_weight_scales_of_the_rtn_case() -> None:
    """Case 08 (FP8_DYNAMIC, round-to-nearest): weight_scale = row absmax / 448, exactly (its
    FP8 zero points need torch to be read)."""
    pytest.importorskip("torch")
    safetensors = pytest.importorskip("safetensors")
    folder = ROOT / "08_rtn_fp8_dynamic"
    args = preset_weights("FP8_DYNAMIC")
    seen = 0
    with safetensors.safe_open(str(folder / "final.safetensors"), framework="pt") as final, \
            safetensors.safe_open(str(folder / "initial.safetensors"), framework="pt") as initial:
        for key in final.keys():
            if key.endswith(".weight_scale"):
                w = initial.get_tensor(key[: -len("_scale")]).numpy()
                scale, zp = minmax_qparams(_np_ops(), w, args)
                assert np.array_equal(scale, final.get_tensor(key).numpy()), key
                assert not np.asarray(zp).any() and not final.get_tensor(key[:-6] + "_zero_point").float().any()
                seen += 1
    assert seen == 14


def _np_ops() -> Any:
    from recipe_spec.masks.numpy_ops import NUMPY_OPS  # noqa: PLC0415

    return NUMPY_OPS


# -- FP8 e4m3 ---------------------------------------------------------------------------------
def test_numpy_fp8_rounding_is_torchs_cast_bit_for_bit() -> None:
    """Every e4m3 value, every midpoint between neighbours and its float32 neighbours, and
    random values over every binade: the same bits as ``torch.float8_e4m3fn`` (signs and
    zeros included)."""
    torch = pytest.importorskip("torch")
    values = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    values = np.unique(values[np.isfinite(values)])
    mids = ((values[1:].astype(np.float64) + values[:-1]) / 2).astype(np.float32)
    rng = np.random.default_rng(3)
    spread = rng.normal(size=50_000) * 10.0 ** rng.uniform(-5, 2.7, 50_000)
    x = np.concatenate([values, mids, np.nextafter(mids, np.float32(np.inf)),
                        np.nextafter(mids, np.float32(-np.inf)), spread, [0.0, -0.0, 1e-30, -1e-30]])
    x = np.clip(x.astype(np.float32), -448, 448)
    want = torch.from_numpy(x).to(torch.float8_e4m3fn).float().numpy()
    got = round_fp8_e4m3(x)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_fp8_grid_values() -> None:
    got = round_fp8_e4m3(np.array([448.0, 300.0, 0.0019531, 0.00097, 0.00098, 1.0625, 1.1875, -3.3], dtype=np.float32))
    assert got.tolist() == [448.0, 288.0, 0.001953125, 0.0, 0.001953125, 1.0, 1.25, -3.25]


# -- integer rounding and the arguments -------------------------------------------------------------
@pytest.mark.parametrize("ops, arr", BACKENDS)
def test_halves_round_to_even_and_clamp(ops: Any, arr: Any) -> None:
    args = QuantArgs(num_bits=4)
    x = arr(np.array([0.5, 1.5, 2.5, -0.5, -2.5, 9.0, -9.0], dtype=np.float32))
    one = arr(np.array([1.0], dtype=np.float32))
    assert np.asarray(fake_quantize(ops, x, one, one * 0, args)).tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 7.0, -8.0]


@pytest.mark.parametrize("ops, arr", BACKENDS)
def test_asymmetric_zero_point_and_integers(ops: Any, arr: Any) -> None:
    """int8 asymmetric over [-1, 3]: scale 4/255, zero point round(-128 + 63.75) = -64."""
    w = arr(np.array([[-1.0, 0.0, 1.0, 3.0]], dtype=np.float32))
    args = QuantArgs(num_bits=8, symmetric=False, strategy="channel")
    scale, zp = minmax_qparams(ops, w, args)
    assert float(np.asarray(scale)[0, 0]) == pytest.approx(4 / 255) and float(np.asarray(zp)[0, 0]) == -64.0
    assert np.asarray(quantize_weight(ops, w, scale, zp, args)).tolist() == [[-128.0, -64.0, 0.0, 127.0]]


@pytest.mark.parametrize("config, strategy, group", [
    ({}, "tensor", None), ({"group_size": 64}, "group", 64), ({"group_size": -1}, "channel", None),
    ({"strategy": "channel"}, "channel", None)])
def test_strategy_is_inferred_as_compressed_tensors_does(config: dict[str, Any], strategy: str, group: Any) -> None:
    args = QuantArgs.from_config(config)
    assert (args.strategy, args.group_size) == (strategy, group)


@pytest.mark.parametrize("kwargs, message", [
    ({"num_bits": 9}, "num_bits from 2 to 8"), ({"type": "float", "num_bits": 6}, "FP8"),
    ({"type": "float", "symmetric": False}, "symmetric"), ({"strategy": "group"}, "positive group_size"),
    ({"strategy": "channel", "group_size": 8}, "needs strategy 'group'"), ({"strategy": "token"}, "one of"),
    ({"type": "uint"}, "'int' or 'float'")])
def test_bad_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        QuantArgs(**kwargs)


def test_group_size_must_divide_the_columns() -> None:
    w = np.zeros((4, 64), dtype=np.float32)
    for size in (48, 128):  # compressed-tensors: ValueError, then a RuntimeError in its observer
        with pytest.raises(ValueError, match=f"group_size {size} does not divide"):
            minmax_qparams(_np_ops(), w, QuantArgs(num_bits=4, strategy="group", group_size=size))


def test_presets() -> None:
    assert preset_weights("W4A16") == QuantArgs(4, "int", True, "group", 128)
    assert preset_weights("W8A8") == QuantArgs(8, "int", True, "channel")
    assert preset_weights("FP8_DYNAMIC") == QuantArgs(8, "float", True, "channel")
    with pytest.raises(ValueError, match="unknown preset"):
        preset_weights("W9A9")
