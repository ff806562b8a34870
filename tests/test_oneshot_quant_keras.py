"""QuantizationModifier (round to nearest) and GPTQModifier through ``recipe_spec.oneshot`` on
Keras 3: a keras-hub Llama built from conformance cases 06 and 10 lands on llm-compressor's grid
points, leaves the run as Keras's own quantized layers and saves as ``model.keras``, which
reloads and predicts the same; round to nearest puts each weight on the grid compressed-tensors
defines (written out by hand); a scheme Keras has no layer for (case 08's FP8_DYNAMIC) is refused
located at the scheme, before any weight changes.

The file runs on the process's Keras backend (TensorFlow in the suite); ``test_keras_backends.py``
runs it again on JAX and torch.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from keras_hub_cases import CASES, hf_folder, llama, needs_hub  # noqa: E402
from keras_hub_cases import case as _case  # noqa: E402
from keras_hub_cases import plain_model as _plain_model  # noqa: E402
from keras_hub_cases import plain_samples as _plain_samples  # noqa: E402
from keras_hub_cases import samples as _samples  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec.diagnostics.base import RecipeError  # noqa: E402


def _np(x: object) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


def _linear_layers(model: object) -> dict[str, object]:
    """Each Linear module's Keras layer, by its name (read before the run: once quantized, a
    layer is no longer a module the host compresses)."""
    from recipe_spec_keras.oneshot import KerasCalibrationHost

    host = KerasCalibrationHost(model)
    return {name: lin.layer for name, lin in host._linear.items() if not lin.reverse}


def _weights(model: object) -> list[np.ndarray]:
    return [_np(v).copy() for v in model.weights]


def _unchanged(model: object, before: list[np.ndarray]) -> bool:
    return all(np.array_equal(_np(v), b) for v, b in zip(model.weights, before, strict=True))


# -- round to nearest on a plain functional model: compressed-tensors' grid by hand ----------------
def _recipe(modifier: str, scheme: str, ignore: str = "[head]") -> str:
    return (f"q_stage:\n  q_modifiers:\n    {modifier}:\n      scheme: {scheme}\n      targets: [Linear]\n"
            f"      ignore: {ignore}\n")


def test_round_to_nearest_w8a8_puts_each_weight_on_compressed_tensors_grid() -> None:
    """W8A8: int8 symmetric per output channel, scale ``absmax / 127.5`` (compressed-tensors:
    ``max(|min|, |max|) / ((qmax - qmin) / 2)``, in float32), integers
    ``clamp(round(w / s), -128, 127)``;
    inputs quantized per token by Keras's own int8 quantizer."""
    from recipe_spec_keras.quantized import keras_weight

    model = _plain_model()
    layers = _linear_layers(model)
    before = {n: _np(layers[n].kernel) for n in ("fc1", "heads", "head")}
    recipe_spec.oneshot(model=model, recipe=_recipe("QuantizationModifier", "W8A8"))
    for name, kernel in before.items():
        layer = layers[name]
        if name == "head":
            assert layer.quantization_mode is None
            np.testing.assert_array_equal(_np(layer.kernel), kernel)
            continue
        w = kernel.reshape(kernel.shape[0], -1).T.astype(np.float32)  # (out, in), float32 as compressed-tensors
        scale = np.abs(w).max(axis=1, keepdims=True) / np.float32(127.5)
        q = np.clip(np.round(w / scale), -128, 127)  # half to even, as torch.round
        assert layer.quantization_mode == "int8" and layer.inputs_quantizer is not None
        ours = keras_weight(layer)
        np.testing.assert_array_equal(np.round(ours / scale), q)
        np.testing.assert_allclose(ours, q * scale, rtol=1e-6, atol=0)


def test_fp8_static_inputs_take_the_calibrated_input_range() -> None:
    """FP8: one weight scale ``absmax / 448`` and one input scale from the ``static_minmax``
    observer, ``max |x| / 448`` over every calibration input of the layer (fc1's inputs are
    the embeddings of the sample ids)."""
    model = _plain_model()
    layers = _linear_layers(model)
    samples = _plain_samples()
    embed = _np(model.get_layer("embed").embeddings)
    fc1 = _np(layers["fc1"].kernel)
    recipe_spec.oneshot(model=model, recipe=_recipe("QuantizationModifier", "FP8"), dataset=samples,
                        num_calibration_samples=len(samples))
    layer = layers["fc1"]
    assert layer.quantization_mode == "float8"
    x = np.concatenate([embed[np.asarray(s["input_ids"])] for s in samples])
    np.testing.assert_allclose(float(_np(layer.inputs_scale)), np.abs(x).max() / 448.0, rtol=1e-6)
    np.testing.assert_allclose(float(_np(layer.kernel_scale)), np.abs(fc1).max() / 448.0, rtol=1e-6)


@pytest.mark.parametrize("modifier", ["QuantizationModifier", "GPTQModifier"])
def test_a_scheme_keras_has_no_layer_for_is_refused_at_the_scheme_before_anything_changes(modifier: str) -> None:
    model = _plain_model()
    before = _weights(model)
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=_recipe(modifier, "FP8_DYNAMIC"), dataset=_plain_samples())
    (d,) = err.value.diagnostics
    assert d.code == "B001" and (d.line, d.column) == (4, 7), d
    assert modifier in d.message and "FP8_DYNAMIC" in d.message and "fc1" in d.message and d.hint
    assert _unchanged(model, before)


def test_a_scheme_without_weights_is_refused_at_config_groups() -> None:
    model = _plain_model()
    before = _weights(model)
    recipe = ("q_stage:\n  q_modifiers:\n    QuantizationModifier:\n      ignore: [head]\n      config_groups:\n"
              "        g:\n          targets: [Linear]\n          input_activations: {num_bits: 8, type: float, "
              "strategy: tensor}\n")
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=_plain_samples())
    (d,) = err.value.diagnostics
    assert d.code == "B001" and (d.line, d.column) == (5, 7) and "without weights" in d.message, d
    assert _unchanged(model, before)


# -- a keras-hub Llama from conformance cases 06, 08, 10 ----------------------------------------
def _llama(tmp: pathlib.Path, name: str) -> object:
    """The case's initial weights as a Hugging Face checkpoint, loaded by keras-hub."""
    return llama(hf_folder(tmp / name, name))


def _oneshot(model: object, name: str, **kwargs: object) -> None:
    recipe_spec.oneshot(model=model, recipe=_case(name)["recipe_yaml"], dataset=_samples(name),
                        num_calibration_samples=16, shuffle_calibration_samples=False, batch_size=1, **kwargs)


def _same_grid_points(layers: dict[str, object], name: str, group_size: int | None) -> dict[str, float]:
    """Per layer, the share of weights whose integer (read from the Keras layer) is
    llm-compressor's (its final weight over its scale); printed with the share over all of
    them."""
    from recipe_spec_keras.quantized import keras_weight
    from safetensors.numpy import load_file

    final = load_file(str(CASES / name / "final.safetensors"))
    out, same, total = {}, 0, 0
    for module, layer in layers.items():
        scale = final[f"{module}.weight_scale"]
        if group_size:
            scale = np.repeat(scale, group_size, axis=1)
        hit = np.round(keras_weight(layer) / scale) == np.round(final[f"{module}.weight"] / scale)
        out[module] = float(hit.mean())
        same, total = same + int(hit.sum()), total + hit.size
    print(f"{name} on {keras.backend.backend()}: same grid point as llm-compressor {same / total:.4%} of "
          f"{total} weights, worst layer {min(out.values()):.4%}")
    return out


@needs_hub
def test_gptq_int8_channel_case_06_lands_on_llm_compressors_grid_points(tmp_path: pathlib.Path) -> None:
    """Case 06: int8 symmetric per channel, weight-only (Keras int8 without an activation
    quantizer), block_size 32, dampening_frac 0.05; lm_head ignored. Saving a keras-hub model
    with weight-only int8 layers is refused before anything runs."""
    name = "06_gptq_int8_channel_explicit"
    model = _llama(tmp_path, name)
    layers = _linear_layers(model)
    before = _weights(model)
    with pytest.raises(RecipeError) as err:
        _oneshot(model, name, output_dir=tmp_path / "out")
    (d,) = err.value.diagnostics
    assert d.code == "B001" and "weight-only int8" in d.message and "model.layers.0.self_attn.q_proj" in d.message
    assert _unchanged(model, before) and not (tmp_path / "out").exists()
    _oneshot(model, name)
    targets = {n: layer for n, layer in layers.items() if n != "lm_head"}
    assert {layer.quantization_mode for layer in targets.values()} == {"int8"}
    assert all(layer.inputs_quantizer is None for layer in targets.values())
    agreement = _same_grid_points(targets, name, None)
    assert len(agreement) == 14 and min(agreement.values()) >= 0.98, agreement


@needs_hub
def test_sparse_gptq_w4a16_case_10_lands_on_llm_compressors_grid_points_and_reloads(tmp_path: pathlib.Path) -> None:
    """Case 10: SparseGPT 2:4, then GPTQ W4A16 (int4 group 128, activation order static as
    llm-compressor resolves it; Keras int4 sub-channel), in one ``oneshot`` call; ``output_dir``
    holds ``model.keras``, which ``keras.saving.load_model`` restores: it predicts what the
    quantized model in memory predicts."""
    name = "10_staged_sparse24_gptq_w4a16"
    model = _llama(tmp_path, name)
    layers = _linear_layers(model)
    _oneshot(model, name, output_dir=tmp_path / "out")
    targets = {n: layer for n, layer in layers.items() if n != "lm_head"}
    assert {layer.quantization_mode for layer in targets.values()} == {"int4"}
    agreement = _same_grid_points(targets, name, 128)
    assert len(agreement) == 14 and min(agreement.values()) >= 0.98, agreement
    assert (tmp_path / "out" / "recipe.yaml").read_text() == _case(name)["recipe_yaml"]
    loaded = keras.saving.load_model(tmp_path / "out" / "model.keras")
    assert loaded.backbone.transformer_layers[0]._self_attention_layer._query_dense.quantization_mode == "int4"
    ids = np.asarray([_samples(name)[0]["input_ids"][:20], _samples(name)[1]["input_ids"][:20]], "int32")
    x = {"token_ids": ids, "padding_mask": np.ones(ids.shape, "int32")}
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


@needs_hub
def test_rtn_fp8_dynamic_case_08_is_refused_located_before_weights_change(tmp_path: pathlib.Path) -> None:
    """Case 08: FP8 weights per channel with dynamic per-token FP8 inputs; Keras's float8
    layer holds one kernel scale and one static input scale."""
    name = "08_rtn_fp8_dynamic"
    model = _llama(tmp_path, name)
    before = _weights(model)
    with pytest.raises(RecipeError) as err:
        _oneshot(model, name)
    (d,) = err.value.diagnostics
    recipe = _case(name)["recipe_yaml"].splitlines()
    line = next(i for i, text in enumerate(recipe, 1) if text.strip().startswith("scheme:"))
    assert d.code == "B001" and (d.line, d.column) == (line, recipe[line - 1].index("scheme") + 1), d
    assert "FP8_DYNAMIC" in d.message and "model.layers.0.self_attn.q_proj" in d.message and "keras" in d.message
    assert _unchanged(model, before)
