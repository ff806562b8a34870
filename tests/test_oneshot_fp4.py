"""FP4 and MX one-shot runs on PyTorch against llm-compressor 0.14's own (NVFP4A16, MXFP4A16,
MXFP8A16, NVFP4 with its calibrated input global scale, MXFP4 and MXFP8 with dynamic inputs,
an FP8 + NVFP4 mix; round to nearest and GPTQ; float32 and bfloat16 weights): the folder ``oneshot(output_dir=...)`` saves holds
llm-compressor's tensors bit for bit (packed e2m1 nibbles, FP8 or E8M0 group scales, the global
scales q/k/v and gate/up share) in its format; what cannot run is refused, located, before any
weight changes: a fused set quantized only in part, and every FP4 / MX scheme on Keras.

``tests/fixtures/fp4/`` holds llm-compressor's runs (``make_reference.py`` wrote them by
running it on case ``08_rtn_fp8_dynamic``'s model and samples).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")
safetensors_torch = pytest.importorskip("safetensors.torch")

import recipe_spec  # noqa: E402
from recipe_spec.diagnostics.base import RecipeError  # noqa: E402

HERE = pathlib.Path(__file__).parent
FIXTURE = HERE / "fixtures" / "fp4"
CASE = HERE / "data" / "conformance" / "llmcompressor" / "08_rtn_fp8_dynamic"
REFERENCE = json.loads((FIXTURE / "reference.json").read_text())


def _model(run: str = "") -> Any:
    """Case 08's model; cast to bfloat16 for the runs whose names end in ``_bf16``."""
    torch.set_num_threads(1)
    case = json.loads((CASE / "case.json").read_text())
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**case["model_config"])).float().eval()
    model.load_state_dict(safetensors_torch.load_file(str(CASE / "initial.safetensors")))
    return model.to(torch.bfloat16) if run.endswith("_bf16") else model


def _samples() -> list[dict[str, Any]]:
    case = json.loads((CASE / "case.json").read_text())
    return [{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in case["calibration"]["token_ids"]]


@pytest.mark.parametrize("run", sorted(REFERENCE["runs"]))
def test_the_saved_folder_is_llm_compressors_bit_for_bit(run: str, tmp_path: pathlib.Path) -> None:
    """Every tensor llm-compressor saved for the decoder layers, under its name, shape and
    dtype, with the same bytes; the same format; nothing more."""
    want = REFERENCE["runs"][run]
    recipe_spec.oneshot(model=_model(run), recipe=want["recipe"], dataset=_samples(), num_calibration_samples=16,
                        shuffle_calibration_samples=False, output_dir=str(tmp_path), progress=False)
    ours = safetensors_torch.load_file(str(tmp_path / "model.safetensors"))
    theirs = safetensors_torch.load_file(str(FIXTURE / f"{run}.safetensors"))
    assert sorted(k for k in ours if k.startswith("model.layers.")) == sorted(theirs)
    for name, value in theirs.items():
        assert ours[name].dtype == value.dtype and ours[name].shape == value.shape, name
        assert torch.equal(ours[name].view(torch.uint8), value.view(torch.uint8)), name
    config = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert config["format"] == want["quantization_config"]["format"]
    assert set(config["config_groups"]) == set(want["quantization_config"]["config_groups"])
    for group, body in want["quantization_config"]["config_groups"].items():
        assert config["config_groups"][group]["format"] == body["format"], group
        for slot in ("weights", "input_activations"):
            assert config["config_groups"][group][slot] == body[slot], (group, slot)


def test_q_k_v_and_gate_up_share_their_global_scale_and_the_others_have_their_own() -> None:
    """In llm-compressor's NVFP4 runs (and so in ours, equal to them above): one global scale
    for q/k/v, one for gate/up, each o_proj and down_proj its own."""
    for run in ("rtn_nvfp4a16", "gptq_nvfp4a16"):
        saved = safetensors_torch.load_file(str(FIXTURE / f"{run}.safetensors"))
        for layer in (0, 1):
            g = {n: float(saved[f"model.layers.{layer}.{n}.weight_global_scale"])
                 for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
            assert g["self_attn.q_proj"] == g["self_attn.k_proj"] == g["self_attn.v_proj"]
            assert g["mlp.gate_proj"] == g["mlp.up_proj"]
            assert len({g["self_attn.q_proj"], g["self_attn.o_proj"], g["mlp.gate_proj"], g["mlp.down_proj"]}) == 4


def test_the_fused_global_scale_is_448_times_6_over_the_sets_largest_weight() -> None:
    """By hand on the initial weights: ``448 · 6 / max |W|`` over q, k and v together."""
    model = _model()
    attn = model.model.layers[0].self_attn
    top = max(float(m.weight.detach().abs().max()) for m in (attn.q_proj, attn.k_proj, attn.v_proj))
    saved = safetensors_torch.load_file(str(FIXTURE / "rtn_nvfp4a16.safetensors"))
    want = np.float32(1.0) / np.float32(top) * np.float32(2688.0)
    assert float(saved["model.layers.0.self_attn.k_proj.weight_global_scale"]) == float(want)


def test_a_fused_set_quantized_in_part_is_refused_before_weights_change() -> None:
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    recipe = ("q_stage:\n  q_modifiers:\n    QuantizationModifier:\n      targets: [Linear]\n      scheme: NVFP4A16\n"
              "      ignore: [lm_head, 're:.*k_proj$']\n")
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=recipe, progress=False)
    d = err.value.diagnostics[0]
    assert d.code == "B001" and d.line == 5 and "model.layers.0.self_attn.k_proj is not quantized" in d.message
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize("scheme", ["NVFP4A16", "MXFP4A16", "MXFP8A16", "NVFP4", "MXFP4", "MXFP8"])
def test_keras_refuses_fp4_and_mx_schemes_located_before_weights_change(scheme: str) -> None:
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(1)
    ids = keras.Input(shape=(None,), dtype="int32", name="ids")
    x = keras.layers.Embedding(40, 32, name="embed")(ids)
    x = keras.layers.Dense(64, name="fc1")(x)
    model = keras.Model(ids, keras.layers.Dense(32, name="fc2")(x))
    before = [np.array(keras.ops.convert_to_numpy(v)) for v in model.weights]
    recipe = f"q_stage:\n  q_modifiers:\n    QuantizationModifier:\n      scheme: {scheme}\n      targets: [Dense]\n"
    data = [{"input_ids": [1, 2, 3, 4], "attention_mask": [1, 1, 1, 1]}] * 2  # NVFP4 calibrates its inputs
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=data, progress=False)
    (d,) = err.value.diagnostics
    assert d.code == "B001" and (d.line, d.column) == (4, 7), d
    assert scheme in d.message and "fc1" in d.message and "FP4" in d.message and "PyTorch" in d.message
    assert all(np.array_equal(np.array(keras.ops.convert_to_numpy(v)), b) for v, b in zip(model.weights, before))
