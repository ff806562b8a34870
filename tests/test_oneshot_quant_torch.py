"""``recipe_spec.oneshot`` quantization on PyTorch against llm-compressor 0.14's own runs
(``tests/data/conformance/llmcompressor`` cases 06 GPTQ int8 per channel, 08 FP8_DYNAMIC round to
nearest, 10 SparseGPT 2:4 then GPTQ W4A16) and compressed-tensors 0.19's own functions: the
resolved config, the tensors left on the model, the saved folder and loading it back."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")
ct = pytest.importorskip("compressed_tensors")

from testdata import LLMCOMPRESSOR  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec.diagnostics.base import RecipeError  # noqa: E402
from recipe_spec.oneshot import last_report  # noqa: E402
from recipe_spec.quantization.scheme import PRESET_SCHEMES, resolve_config  # noqa: E402
from recipe_spec.text.frozen import thaw  # noqa: E402

CASES = LLMCOMPRESSOR
QUANT_CASES = ["06_gptq_int8_channel_explicit", "08_rtn_fp8_dynamic", "10_staged_sparse24_gptq_w4a16"]


#: Entries allowed more than one grid step from llm-compressor's stored weight. Case 10's
#: stored run differs from a fresh llm-compressor 0.14 run of its recipe by about 1e-6 in the
#: scales (same versions, one thread); this pipeline gives that fresh run's grid indices
#: exactly, and the stored ones but for a handful of GPTQ rounding decisions that its error
#: feedback carries on (6 of 16384 entries of layer 1's o_proj are two steps away).
_BEYOND_ONE_STEP = {"06_gptq_int8_channel_explicit": 0.0, "08_rtn_fp8_dynamic": 0.0,
                    "10_staged_sparse24_gptq_w4a16": 1e-3}


def _case(name: str) -> dict:
    return json.loads((CASES / name / "case.json").read_text())


def _model(name: str) -> Any:
    torch.set_num_threads(1)
    config = transformers.LlamaConfig(**_case(name)["model_config"])
    model = transformers.LlamaForCausalLM(config).float().eval()
    model.load_state_dict(safetensors_torch.load_file(str(CASES / name / "initial.safetensors")))
    return model


def _samples(name: str) -> list[dict]:
    return [{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in _case(name)["calibration"]["token_ids"]]


def _run(name: str, **options: Any) -> Any:
    model = _model(name)
    recipe_spec.oneshot(model=model, recipe=_case(name)["recipe_yaml"], dataset=_samples(name),
                        num_calibration_samples=16, shuffle_calibration_samples=False, **options)
    return model


def _quant_entry(name: str) -> Any:
    return next(m for m in recipe_spec.loads(_case(name)["recipe_yaml"]).modifiers
                if m.type in ("GPTQModifier", "QuantizationModifier"))


def _weight_args(name: str) -> Any:
    from compressed_tensors.quantization import QuantizationArgs

    config = _case(name)["saved"]["quantization_config"]["config_groups"]["group_0"]["weights"]
    return QuantizationArgs.model_validate(config)


def _ints(weight: Any, scale: Any, zero: Any, args: Any) -> Any:
    """compressed-tensors' own quantize: the grid index of each weight."""
    from compressed_tensors.quantization.lifecycle.forward import quantize

    return quantize(weight, scale, zero.to(scale.dtype) if zero.dtype == torch.int8 else zero, args).float()


@pytest.mark.parametrize("name", QUANT_CASES)
def test_the_resolved_config_is_llm_compressors(name: str) -> None:
    entry = _quant_entry(name)
    want = next(m for m in _case(name)["resolved_recipe"]["modifiers"] if m["type"] == entry.type)
    assert resolve_config(thaw(entry.args), gptq=entry.type == "GPTQModifier") == want["resolved_quantization_config"]


def test_presets_are_compressed_tensors_presets() -> None:
    from compressed_tensors.quantization import preset_name_to_scheme

    for preset in PRESET_SCHEMES:
        ours = resolve_config({"scheme": preset, "targets": ["Linear"]})["config_groups"]["group_0"]
        theirs = preset_name_to_scheme(preset, ["Linear"]).model_dump()
        for slot in ("weights", "input_activations", "output_activations"):
            a, b = ours[slot], theirs[slot]
            assert (a is None) == (b is None), (preset, slot)
            if a is not None:
                # a symmetric grid has no zero point: its dtype is not saved (the MX presets name one)
                b["zp_dtype"] = None if b["symmetric"] else str(b["zp_dtype"])
                a = {**a, "zp_dtype": None if a["symmetric"] else a["zp_dtype"]}
                assert {k: v for k, v in a.items() if k != "observer"} == {k: v for k, v in b.items()
                                                                            if k != "observer"}, (preset, slot)


@pytest.mark.parametrize("name", QUANT_CASES)
def test_conformance_case_tensors(name: str) -> None:
    """Every tensor llm-compressor left on the model, under its name, dtype and shape; scales
    and zero points within 1e-4; quantized weights on the same grid point for >= 99% of the
    entries and never a step away or more."""
    model = _run(name)
    datafree = all(p == "datafree" for _, p in last_report().pipelines)  # FP8_DYNAMIC needs no data
    assert last_report().order == (None if datafree else _case(name)["calibration"]["order_of_samples_fed"])
    final = safetensors_torch.load_file(str(CASES / name / "final.safetensors"))
    state = model.state_dict()
    assert set(state) == set(final)
    args = _weight_args(name)
    for key, want in final.items():
        got = state[key]
        assert (got.dtype, got.shape) == (want.dtype, want.shape), key
        if key.endswith(("_scale", "_zero_point")):
            rel = float((got.float() - want.float()).abs().max() / max(float(want.float().abs().max()), 1e-30))
            assert rel <= 1e-4, (key, rel)
        elif key.endswith("proj.weight"):
            base = key[: -len("weight")]
            ours = _ints(got, state[base + "weight_scale"], state[base + "weight_zero_point"], args)
            theirs = _ints(want, final[base + "weight_scale"], final[base + "weight_zero_point"], args)
            assert float((ours == theirs).float().mean()) >= 0.99, key
            assert float(((ours - theirs).abs() > 1).float().mean()) <= _BEYOND_ONE_STEP[name], key
        else:
            assert torch.equal(got, want), key


@pytest.mark.parametrize("name", QUANT_CASES)
def test_saved_folder_is_llm_compressors_and_loads_back(name: str, tmp_path: pathlib.Path) -> None:
    from compressed_tensors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from safetensors import safe_open

    out = tmp_path / "out"
    _run(name, output_dir=out)
    saved = _case(name)["saved"]
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert config == saved["quantization_config"]
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = {k: (list(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in f.keys()}
    assert names == {k: (v["shape"], v["dtype"]) for k, v in saved["tensors"].items()}
    assert (out / "recipe.yaml").read_text() == _case(name)["recipe_yaml"]

    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    ModelCompressor(quantization_config=QuantizationConfig.model_validate(config)).decompress_model(loaded)
    final = safetensors_torch.load_file(str(CASES / name / "final.safetensors"))
    state = loaded.state_dict()
    args = _weight_args(name)
    for key, want in final.items():
        if not key.endswith("proj.weight"):
            continue
        base = key[: -len("weight")]
        scale = final[base + "weight_scale"]
        zero = final[base + "weight_zero_point"]
        theirs = fake_quantize(want, scale, zero.to(scale.dtype) if zero.dtype == torch.int8 else zero, args)
        step = scale.repeat_interleave(args.group_size, dim=1) if args.strategy == "group" else scale
        steps = (state[key] - theirs).abs() / step
        assert float((steps < 1e-3).float().mean()) >= 0.99, key
        assert float((steps > 1.0 + 1e-3).float().mean()) <= _BEYOND_ONE_STEP[name], key


def test_preserve_masks_keeps_the_2of4_pattern_through_gptq() -> None:
    """Without it GPTQ's error feedback fills the pruned zeros in (llm-compressor's case 10:
    sparsity_reached far below 0.5); with it every group of four keeps two zeros."""
    name = "10_staged_sparse24_gptq_w4a16"
    reached = _case(name)["sparsity_reached"]
    plain, kept = _run(name), _run(name, preserve_masks=True)
    for layer in json.loads((CASES / name / "masks.json").read_text())["layers"]:
        w = kept.get_submodule(layer).weight.detach()
        zeros_per_group = (w == 0).reshape(w.shape[0], -1, 4).sum(-1)
        assert int(zeros_per_group.min()) >= 2, layer
        fill = float((plain.get_submodule(layer).weight == 0).float().mean())
        assert fill < 0.5 and abs(fill - float(reached[layer])) < 0.05, (layer, fill, reached[layer])


def test_static_fp8_inputs_take_the_running_extremes_of_every_calibration_input() -> None:
    """FP8's static input activations (observer static_minmax): input_scale = max |x| / 448 over
    every token that reached the layer; round to nearest keeps float weights, so layer inputs
    are the dense model's."""
    name = "08_rtn_fp8_dynamic"
    dense, seen = _model(name), {}
    def hook(module: Any, args: tuple, _out: Any, key: str) -> None:
        seen[key] = max(seen.get(key, 0.0), float(args[0].abs().max()))
    layers = ("model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj")
    for key in layers:
        dense.get_submodule(key).register_forward_hook(lambda m, a, o, key=key: hook(m, a, o, key))
    with torch.no_grad():
        for s in _samples(name):
            dense(input_ids=torch.tensor([s["input_ids"]]))
    model = _model(name)
    recipe = "q_stage:\n  q_modifiers:\n    QuantizationModifier:\n      scheme: FP8\n      ignore: [lm_head]\n"
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples(name), num_calibration_samples=16,
                        shuffle_calibration_samples=False)
    for key in layers:
        got = float(model.get_submodule(key).input_scale)
        assert abs(got - np.float32(seen[key]) / np.float32(448.0)) <= 1e-6 * got, key
        assert model.get_submodule(key).input_zero_point.dtype == torch.float8_e4m3fn


@pytest.mark.parametrize(("sub_case", "code", "line"), [
    ("unknown_preset_scheme", "M006", 4), ("group_size_not_dividing_in_features", "P004", 4),
    ("group_size_48_indivisible", "P004", 8)])
def test_quantization_error_cases_are_located_before_any_weight_changes(sub_case: str, code: str, line: int) -> None:
    recipe = next(s["recipe_yaml"] for s in _case("12_error_cases")["sub_cases"] if s["sub_case"] == sub_case)
    model = _model("12_error_cases")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples("12_error_cases"), num_calibration_samples=2)
    assert [(d.code, d.line) for d in err.value.diagnostics] == [(code, line)]
    state = model.state_dict()
    assert set(state) == set(before) and all(torch.equal(v, before[k]) for k, v in state.items())


@pytest.mark.parametrize(("args", "what"), [
    ("scheme: FP8_BLOCK", "FP8_BLOCK"), ("scheme: W8A8\n      kv_cache_scheme: {num_bits: 8}", "kv_cache_scheme"),
    ("config_groups:\n        g: {targets: [Linear], weights: {num_bits: 8}, output_activations: {num_bits: 8}}",
     "output_activations"), ("scheme: W8A8\n      weight_observer: mse", "weight_observer")])
def test_what_does_not_run_is_refused_with_b001(args: str, what: str) -> None:
    recipe = f"q_stage:\n  q_modifiers:\n    QuantizationModifier:\n      {args}\n"
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=_model("08_rtn_fp8_dynamic"), recipe=recipe)
    assert [d.code for d in err.value.diagnostics] == ["B001"] and what in str(err.value)


@pytest.mark.parametrize("run", ["fp8", "w8a8s"])
def test_static_input_qparams_are_llm_compressors(run: str) -> None:
    """FP8 (static_minmax, round to nearest) and GPTQ with asymmetric static int8 inputs
    (minmax: the running average), against the values llm-compressor 0.14 left on the model
    (tests/fixtures/llmcompressor_static_inputs.json, written by running it)."""
    fixture = pathlib.Path(__file__).parent / "fixtures" / "llmcompressor_static_inputs.json"
    want = json.loads(fixture.read_text())["runs"][run]
    name = "08_rtn_fp8_dynamic"
    model = _model(name)
    recipe_spec.oneshot(model=model, recipe=want["recipe"], dataset=_samples(name), num_calibration_samples=16,
                        shuffle_calibration_samples=False)
    for layer, scale in want["input_scale"].items():
        module = model.get_submodule(layer)
        assert abs(float(module.input_scale) - scale) <= 1e-6 * scale, layer
        assert float(module.input_zero_point.float()) == want["input_zero_point"][layer], layer
