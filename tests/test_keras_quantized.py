"""Keras's own quantized layers holding a one-shot run's integers and scales
(``recipe_spec_keras.quantized``): the integers survive in the layer, its call equals a NumPy
reference computed from them (with Keras's own activation quantization written out by hand),
``model.save`` / ``keras.saving.load_model`` round-trip it, schemes without a Keras layer are
refused. GPTQ and round to nearest through ``recipe_spec.oneshot`` on a keras-hub Llama
(conformance cases 06, 08, 10) are ``test_oneshot_quant_keras.py``'s.

The file runs on the process's Keras backend (TensorFlow in the suite); ``test_keras_backends.py``
runs it again on JAX and torch.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from keras_hub_cases import hf_folder, keras_hub, llama, needs_hub  # noqa: E402

from recipe_spec.masks.numpy_ops import NUMPY_OPS  # noqa: E402
from recipe_spec.quantization import QuantArgs, minmax_qparams  # noqa: E402
from recipe_spec.quantization.args import preset_weights  # noqa: E402
from recipe_spec.quantization.grid import dequantize, quantize  # noqa: E402
from recipe_spec.quantization.scheme import (  # noqa: E402
    PRESET_ACTIVATIONS,
    ActivationArgs,
    preset_activations,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _host(model: object) -> object:
    from recipe_spec_keras.oneshot import KerasCalibrationHost

    return KerasCalibrationHost(model)


def _np(x: object) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


# -- the scheme half a layer's call depends on ---------------------------------------------------
def test_preset_activations_are_compressed_tensors_own() -> None:
    pytest.importorskip("compressed_tensors")  # the oneshot extra; read in a process of its own (it imports torch)
    script = ("import json; from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES as P\n"
              "out = {}\nfor k, v in P.items():\n    a = v.get('input_activations')\n"
              "    out[k] = a and [a.num_bits, str(getattr(a.type, 'value', a.type)), "
              "str(getattr(a.strategy, 'value', a.strategy)), a.symmetric, bool(a.dynamic)]\n"
              "print(json.dumps(out))")
    theirs = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                                       timeout=300, cwd="/").stdout.splitlines()[-1])
    for name, ours in PRESET_ACTIVATIONS.items():
        expected = theirs[name]
        got = ours and [ours.num_bits, ours.type, ours.strategy, ours.symmetric, ours.dynamic]
        assert got == expected, name


# -- a plain functional model ---------------------------------------------------------------------
def _model() -> keras.Model:
    keras.utils.set_random_seed(5)
    x_in = keras.Input(shape=(6, 32), name="x")
    h = keras.layers.EinsumDense("btm,mhk->bthk", output_shape=(None, 2, 16), bias_axes="hk", name="q")(x_in)
    h = keras.layers.EinsumDense("bthk,hkm->btm", output_shape=(None, 32), name="o")(h)
    h = keras.layers.Dense(48, activation="relu", name="up")(h)
    out = keras.layers.Dense(32, name="down")(h)
    return keras.Model(x_in, out)


SCHEMES = {  # name: (weights, activations)
    "W8A8": (preset_weights("W8A8"), preset_activations("W8A8")),
    "int8 channel weight-only": (QuantArgs(8, "int", True, "channel"), None),
    "W4A16 group 16": (QuantArgs(4, "int", True, "group", 16), None),
    "W4A16_ASYM group 16": (QuantArgs(4, "int", False, "group", 16), None),
    "int4 channel": (QuantArgs(4, "int", True, "channel"), None),
    "int4 channel asymmetric": (QuantArgs(4, "int", False, "channel"), None),
    "FP8": (preset_weights("FP8"), preset_activations("FP8")),
}
LAYERS = ("q", "o", "up", "down")
INPUT_SCALE = 0.004  # a static FP8 input scale (|x| up to ~1.8 -> 448 levels)


def _grid(w: np.ndarray, args: QuantArgs) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Our qparams, integers and dequantized weight, spread over the weight."""
    scale, zero = minmax_qparams(NUMPY_OPS, w, args)
    rows, cols = w.shape
    if args.strategy == "group":
        reps = int(args.group_size or 1)
        s_full, z_full = np.repeat(scale, reps, axis=1), np.repeat(zero, reps, axis=1)
    else:
        s_full = np.broadcast_to(np.reshape(scale, (-1, 1)), (rows, cols))
        z_full = np.broadcast_to(np.reshape(zero, (-1, 1)), (rows, cols))
    q = quantize(NUMPY_OPS, w, s_full, z_full, args)
    return scale, zero, q, dequantize(NUMPY_OPS, q, s_full, z_full, args)


def _unpack_nibbles(packed: np.ndarray, n: int) -> np.ndarray:
    """Two signed 4-bit values a byte along the last axis, low nibble first (by hand)."""
    b = packed.astype(np.uint8)
    low, high = (b & 0x0F).astype(np.int16), (b >> 4).astype(np.int16)
    both = np.stack([low, high], axis=-1).reshape(*b.shape[:-1], -1)[..., :n]
    return np.where(both > 7, both - 16, both)


def _kernel_of(w_out_in: np.ndarray, layer: object) -> np.ndarray:
    """An ``(out, in)`` array in the layer's kernel layout (written out per layer)."""
    if layer.name == "q":  # kernel (m, h, k)
        return w_out_in.T.reshape(32, 2, 16)
    if layer.name == "o":  # kernel (h, k, m)
        return w_out_in.T.reshape(2, 16, 32)
    return w_out_in.T


def _reference(layer: object, x: np.ndarray, w_eff: np.ndarray, bias: np.ndarray | None, scheme: str,
               q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The quantized layer's call in NumPy: Keras's activation quantization by hand."""
    lead = x.shape[:2]  # (batch, tokens)
    flat = x.reshape(int(np.prod(lead)), -1).astype(np.float32)
    if scheme == "W8A8":  # AbsMaxQuantizer per token: 127 / (absmax + 1e-7), round half even, clip ±127
        a_scale = np.float32(127.0) / (np.abs(flat).max(axis=1, keepdims=True) + np.float32(1e-7))
        xq = np.clip(np.round(flat * a_scale), -127, 127)
        k_scale = (np.float32(1.0) / np.reshape(scale, (1, -1))).astype(np.float32)
        y = (xq.astype(np.int64) @ q.T.astype(np.int64)).astype(np.float32) / (a_scale * k_scale)
    elif scheme == "FP8":  # one static scale, cast to e4m3 (ml_dtypes); Keras rounds a float32 bias to bf16
        import ml_dtypes

        xq = np.clip(flat / np.float32(INPUT_SCALE), -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
        y = (xq * np.float32(INPUT_SCALE)) @ w_eff.T
        if bias is not None:
            bias = bias.astype(ml_dtypes.bfloat16).astype(np.float32)
    else:
        y = flat @ w_eff.T
    if bias is not None:
        y = y + bias.reshape(1, -1)
    if getattr(layer, "activation", None) is keras.activations.relu:
        y = np.maximum(y, 0)
    return y.reshape(*lead, -1)


def _keras_int4_read(layer: object) -> np.ndarray:
    """The flat ``(in, out)`` kernel of an int4 layer by Keras's own functions."""
    from keras.src.quantizers.quantizers import dequantize_with_sz_map

    columns = int(layer._orig_output_dim if isinstance(layer, keras.layers.Dense)
                  else layer._int4_unpacked_column_size)
    q = keras.quantizers.unpack_int4(layer._kernel.value, columns, axis=-1)
    if getattr(layer, "_int4_block_size", None) in (None, -1):
        return _np(keras.ops.divide(keras.ops.cast(q, "float32"), layer.kernel_scale.value))
    return _np(dequantize_with_sz_map(q, layer.kernel_scale.value, layer.kernel_zero.value, layer.g_idx.value,
                                      group_axis=0))


@pytest.mark.parametrize("length", [1, 2, 7, 128, 513])
def test_int4_packing_in_numpy_is_keras_own(length: int) -> None:
    from recipe_spec_keras.quantized_reads import pack_int4, unpack_int4

    values = np.random.default_rng(length).integers(-8, 8, size=(3, length)).astype(np.int8)
    theirs, _, _ = keras.quantizers.pack_int4(keras.ops.convert_to_tensor(values), axis=-1)
    np.testing.assert_array_equal(pack_int4(values), _np(theirs))
    np.testing.assert_array_equal(unpack_int4(pack_int4(values), length), values)
    np.testing.assert_array_equal(_np(keras.quantizers.unpack_int4(theirs, length, axis=-1)), values)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_a_quantized_layer_holds_our_integers_and_computes_with_them(scheme: str, tmp_path: pathlib.Path) -> None:
    from recipe_spec_keras.quantized import keras_weight, quantize_layer

    args, acts = SCHEMES[scheme]
    model = _model()
    host = _host(model)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 6, 32)).astype(np.float32)
    inputs = {"q": x}
    for name in LAYERS[1:]:  # each layer's float input, from the float model
        prev = model.get_layer(LAYERS[LAYERS.index(name) - 1])
        inputs[name] = _np(prev(inputs[LAYERS[LAYERS.index(name) - 1]]))
    expected_modes = {"W8A8": "int8", "int8 channel weight-only": "int8", "FP8": "float8", "int4 channel": "int4/-1",
                      "int4 channel asymmetric": "int4/in", "W4A16 group 16": "int4/16",
                      "W4A16_ASYM group 16": "int4/16"}
    for name in LAYERS:
        layer = model.get_layer(name)
        w = host.weight(name)
        bias = None if layer.bias is None else _np(layer.bias).reshape(-1)
        scale, zero, q, deq = _grid(w, args)
        row = quantize_layer(layer, w, scale, zero, args, activations=acts, input_scale=INPUT_SCALE, name=name)
        expected = expected_modes[scheme].replace("/in", f"/{w.shape[1]}")  # one group of all columns
        assert row.mode == expected and layer.quantization_mode == row.mode.split("/")[0]
        assert row.drift <= 1e-6 * float(np.abs(deq).max()), row
        assert row.max_error == pytest.approx(float(np.abs(deq - w).max()), rel=1e-3, abs=1e-7)
        kernel = _np(layer._kernel)
        if row.mode == "int8":  # our integers, in the kernel's layout; Keras's scale is 1/s
            np.testing.assert_array_equal(kernel, _kernel_of(q, layer).astype(np.int8))
        elif row.mode.startswith("int4"):  # packed along the output axis of the (in, out) kernel
            np.testing.assert_array_equal(_unpack_nibbles(kernel, w.shape[0]), q.T)
        else:  # float8 keeps the dequantized kernel in float and casts kernel / scale to e4m3
            np.testing.assert_allclose(kernel / _np(layer.kernel_scale), _kernel_of(q, layer), rtol=1e-6)
        np.testing.assert_allclose(keras_weight(layer), deq, rtol=1e-6, atol=1e-7)
        if row.mode.startswith("int4"):  # the NumPy read-back is Keras's own unpack and dequantization
            mine, keras_own = keras_weight(layer).T.reshape(-1), _keras_int4_read(layer).reshape(-1)
            if keras.backend.backend() == "jax":  # XLA divides by multiplying with the reciprocal
                np.testing.assert_allclose(mine, keras_own, rtol=1.2e-7, atol=0)
            else:
                np.testing.assert_array_equal(mine, keras_own)
        got = _np(layer(inputs[name]))
        want = _reference(layer, inputs[name], deq, bias, scheme, q, scale)
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=2e-5, atol=2e-5 * float(np.abs(want).max()))
    y = model.predict(x, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert [loaded.get_layer(n).quantization_mode for n in LAYERS] == [model.get_layer(n).quantization_mode
                                                                      for n in LAYERS]
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), y)


@pytest.mark.parametrize("symmetric", [True, False])
def test_a_group_grid_in_any_column_order_is_each_column_on_its_group(symmetric: bool) -> None:
    """``g_idx`` (GPTQ's ``actorder: group``) names each column's group in any order: the
    integers and the weight on the grid are each entry's ``round(w / s + z)`` with the scale of
    its own group (written out here per entry), the same as with the groups in column order where
    ``g_idx`` is that order, and the int4 layer computes with that weight."""
    from recipe_spec_keras.quantized import grid_values, keras_weight, quantize_layer

    args = QuantArgs(4, "int", symmetric, "group", group_size=16)
    model = _model()
    layer = model.get_layer("down")  # (48 in, 32 out): 3 groups
    w = _host(model).weight("down")
    g_idx = np.random.default_rng(3).permutation(np.arange(48) // 16)
    rng = np.random.default_rng(4)
    scale = rng.uniform(0.01, 0.05, size=(32, 3)).astype(np.float32)
    zero = (np.zeros((32, 3)) if symmetric else rng.integers(-3, 4, size=(32, 3))).astype(np.float32)
    q, deq = grid_values(w, scale, zero, args, list(g_idx))
    for r in range(32):
        for c in range(48):
            s, z = scale[r, g_idx[c]], (0.0 if symmetric else zero[r, g_idx[c]])
            want = np.clip(np.rint(w[r, c] / s + np.float32(z)), -8, 7)
            assert q[r, c] == want and deq[r, c] == np.float32((want - np.float32(z)) * s)
    ordered = grid_values(w, scale, zero, args, list(np.arange(48) // 16))
    for a, b in zip(ordered, grid_values(w, scale, zero, args), strict=True):
        np.testing.assert_array_equal(a, b)
    row = quantize_layer(layer, w, scale, zero, args, g_idx=list(g_idx), name="down")
    assert row.mode == "int4/16"
    np.testing.assert_allclose(keras_weight(layer), deq, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("scheme", [s for s in SCHEMES if s != "FP8"])
def test_a_layer_built_without_keras_grid_is_the_layer_keras_quantize_builds(scheme: str,
                                                                            tmp_path: pathlib.Path) -> None:
    """``build_quantized`` skips Keras's own grid of the float kernel; every layer then has
    the variables (paths, shapes, dtypes), dtype policy and config ``layer.quantize`` gives it,
    and once both are assigned the same values they save and compute the same."""
    from recipe_spec_keras.quantized import check_quantizable
    from recipe_spec_keras.quantized_build import build_quantized

    args, acts = SCHEMES[scheme]
    ours, theirs = _model(), _model()
    x = np.random.default_rng(2).normal(size=(2, 6, 32)).astype(np.float32)
    for name in LAYERS:
        a, b = ours.get_layer(name), theirs.get_layer(name)
        mode = check_quantizable(a, args, acts, name=name)[0]
        build_quantized(a, mode.mode, mode.config())
        b.quantize(mode.mode, config=mode.config())
        assert [(v.path, tuple(v.shape), str(v.dtype)) for v in a.variables] == \
            [(v.path, tuple(v.shape), str(v.dtype)) for v in b.variables], name
        assert a.dtype_policy.name == b.dtype_policy.name and a.quantization_mode == b.quantization_mode
        assert a.get_config() == b.get_config(), name
        for va, vb in zip(a.variables, b.variables):
            va.assign(np.array(_np(vb.value)))
    np.testing.assert_array_equal(ours.predict(x, verbose=0), theirs.predict(x, verbose=0))
    ours.save(tmp_path / "m.keras")
    np.testing.assert_array_equal(keras.saving.load_model(tmp_path / "m.keras").predict(x, verbose=0),
                                  theirs.predict(x, verbose=0))


@pytest.mark.parametrize("scheme,why", [
    ("FP8_DYNAMIC", "one kernel scale per tensor"),
    ("W8A16", "gptq"),  # int8 group 128: only Keras's 'gptq' mode, which does not save its zero points
    ("W3A16", "gptq"),
    ("W4A8", "only its int8 layer quantizes the inputs"),
    ("W4AFP8", "not float8 per token dynamic"),
])
def test_a_scheme_keras_has_no_layer_for_is_refused_naming_it_and_the_layer(scheme: str, why: str) -> None:
    from recipe_spec_keras.quantized import QuantizationRefused, quantize_layer

    model = _model()
    layer = model.get_layer("up")
    before = [_np(v).copy() for v in layer.weights]
    args, acts = preset_weights(scheme), preset_activations(scheme)
    if args.strategy == "group":
        args = QuantArgs(args.num_bits, args.type, args.symmetric, "group", 16)
    w = _host(model).weight("up")
    scale, zero = minmax_qparams(NUMPY_OPS, w, args)
    with pytest.raises(QuantizationRefused, match=why) as err:
        quantize_layer(layer, w, scale, zero, args, activations=acts, name="block.up")
    assert "block.up" in str(err.value)
    assert layer.quantization_mode is None
    assert all(np.array_equal(_np(v), b) for v, b in zip(layer.weights, before, strict=True))


def test_static_int8_activations_and_int4_einsum_with_contraction_last_are_refused() -> None:
    from recipe_spec_keras.quantized import QuantizationRefused, quantize_layer

    model = _model()
    w = _host(model).weight("up")
    args = QuantArgs(8, "int", True, "channel")
    scale, zero = minmax_qparams(NUMPY_OPS, w, args)
    static = ActivationArgs(8, "int", "tensor", True, False)
    with pytest.raises(QuantizationRefused, match="int8 per tensor static"):
        quantize_layer(model.get_layer("up"), w, scale, zero, args, activations=static)
    x_in = keras.Input(shape=(4, 8))
    layer = keras.layers.EinsumDense("btm,hmk->bthk", output_shape=(None, 2, 4), name="late")
    keras.Model(x_in, layer(x_in))
    w = _np(layer.kernel).transpose(0, 2, 1).reshape(8, 8)  # (h·k, m)
    args = QuantArgs(4, "int", True, "channel")
    scale, zero = minmax_qparams(NUMPY_OPS, w, args)
    with pytest.raises(QuantizationRefused, match="contracted axes first"):
        quantize_layer(layer, w, scale, zero, args)


def test_the_host_calibrates_on_dequantized_weights_and_converts_at_finish(tmp_path: pathlib.Path) -> None:
    model = _model()
    host = _host(model)
    args = QuantArgs(4, "int", True, "group", 16)
    w = host.weight("up")
    scale, zero, q, deq = _grid(w, args)
    host.record_quantized("up", w, scale, zero, args)
    assert model.get_layer("up").quantization_mode is None  # calibration runs in float ...
    np.testing.assert_array_equal(host.weight("up"), deq)  # ... on the weight's grid
    rows = host.finish()
    assert [(r.name, r.mode) for r in rows] == [("up", "int4/16")]
    assert rows[0].bytes_after < rows[0].bytes_before / 4
    assert model.get_layer("up").quantization_mode == "int4"
    written = host.save(str(tmp_path / "out"), "recipe: {}\n")
    assert any(p.endswith("model.keras") for p in written)


def test_the_protocols_attach_and_set_quantized_take_a_resolved_compressed_tensors_config() -> None:
    """The mapping a QuantizationModifier resolves to (compressed-tensors' field names);
    round to nearest hands a weight of None: the float weight stays until finish()."""
    from recipe_spec_keras.quantized import QuantizationRefused

    w4a16 = {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True, "group_size": 16,
                                                "strategy": "group", "dynamic": False, "actorder": None},
             "input_activations": None, "output_activations": None}
    model = _model()
    host = _host(model)
    host.attach_quantization({"config_groups": {"group_0": w4a16}, "ignore": ["q"]})
    assert sorted(host._schemes) == ["down", "o", "up"]
    w = host.weight("down")
    args = QuantArgs(4, "int", True, "group", 16)
    scale, zero, q, deq = _grid(w, args)
    host.set_quantized("down", None, {"weight_scale": scale, "weight_zero_point": zero})
    np.testing.assert_array_equal(host.weight("down"), w)  # round to nearest: float until the end
    (row,) = host.finish()
    assert row.name == "down" and row.mode == "int4/16" and row.scheme == "int4 group 16 symmetric weights, float activations"
    np.testing.assert_array_equal(_unpack_nibbles(_np(model.get_layer("down")._kernel), 32), q.T)
    with pytest.raises(ValueError, match="no quantization scheme"):
        host.set_quantized("q", None, {"weight_scale": scale, "weight_zero_point": zero})
    fp8_dynamic = {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                   "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}
    other = _model()
    before = [_np(v).copy() for v in other.weights]
    with pytest.raises(NotImplementedError, match="q: Keras .* FP8_DYNAMIC"):
        _host(other).attach_quantization({"config_groups": {"group_0": fp8_dynamic}})
    assert all(np.array_equal(_np(v), b) for v, b in zip(other.weights, before, strict=True))
    assert issubclass(QuantizationRefused, ValueError)


# -- keras-hub: why weight-only int8 is not saved ------------------------------------------------
@needs_hub
def test_keras_hub_presets_drop_a_weight_only_int8_config(tmp_path: pathlib.Path) -> None:
    """Why the host refuses to save weight-only int8 in a keras-hub model: reloaded, the layer
    quantizes its inputs (keras-hub's Backbone.get_config keeps dtype policies only); and
    keras-hub 0.32's preset loader does not rebuild quantized layers at all, hence model.keras."""
    model = llama(hf_folder(tmp_path / "06_gptq_int8_channel_explicit", "06_gptq_int8_channel_explicit"))
    layer = model.backbone.transformer_layers[0]._feedforward_gate_dense
    layer.quantize("int8", config=keras.quantizers.Int8QuantizationConfig(activation_quantizer=None))
    assert layer.inputs_quantizer is None
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.backbone.transformer_layers[0]._feedforward_gate_dense.inputs_quantizer is not None
    model.backbone.save_to_preset(str(tmp_path / "preset"))
    with pytest.raises(ValueError, match="feedforward_gate_dense"):
        keras_hub.models.Backbone.from_preset(str(tmp_path / "preset"))


_JAX_WRITES = """
import json, logging, os
os.environ["KERAS_BACKEND"] = "jax"
import jax, keras, numpy as np
from recipe_spec.quantization import QuantArgs, minmax_qparams
from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec_keras.oneshot import KerasCalibrationHost
from recipe_spec_keras.quantized import keras_weight, quantize_layer
compiled = []
class Seen(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("Compiling "):
            compiled.append(record.getMessage().split(" with ")[0])
ids = keras.Input(shape=(None, 37))
model = keras.Model(ids, keras.layers.Dense(23, use_bias=False, name="fc")(ids))
host = KerasCalibrationHost(model)
w = np.random.default_rng(0).standard_normal((23, 37)).astype(np.float32)
jax.config.update("jax_log_compiles", True)
logging.getLogger("jax").addHandler(Seen())
host.set_weight("fc", w)
written = host.weight("fc")
args = QuantArgs(4, "int", True, "channel")
scale, zero = minmax_qparams(NUMPY_OPS, w, args)
quantize_layer(model.get_layer("fc"), w, scale, zero, args, name="fc")
print(json.dumps({"compiled": compiled, "written": bool(np.array_equal(written, w)),
                  "mode": model.get_layer("fc").quantization_mode,
                  "error": float(np.abs(keras_weight(model.get_layer("fc")) - w).max()),
                  "half_step": float(np.max(scale)) / 2}))
"""


def test_jax_variables_take_numpy_values_without_a_program_per_shape() -> None:
    """On JAX, ``jnp.asarray`` of a NumPy array (what Keras's ``assign`` calls) compiles a small
    program for each new shape (``jit(stage)``, about 50 ms each): the host's weight writes and
    the quantized layer's variables go in through ``jax.device_put`` instead. A layer of a shape
    seen nowhere before: written, then made Keras's int4 layer, without compiling anything for
    the values (only Keras's own ``g_idx``-free channel layer: nothing at all)."""
    pytest.importorskip("jax")
    out = subprocess.run([sys.executable, "-c", _JAX_WRITES], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["written"] and found["mode"] == "int4"
    assert found["error"] <= found["half_step"] * (1 + 1e-6)  # on its grid: within half a step of the weight
    assert not [c for c in found["compiled"] if "stage" in c], found["compiled"]
