"""Smoothing followed by quantization, end to end through ``recipe_spec.oneshot`` on PyTorch,
against llm-compressor 0.14's own runs of the same recipes on the same tiny Llama
(``tests/fixtures/smoothing``, written by its ``make_reference.py``):

- AWQ then a W4 group-32 QuantizationModifier (llm-compressor 0.11's split form), symmetric
  with duo scaling and asymmetric with ``duo_scaling: both, n_grid: 10``;
- SmoothQuant (alpha 0.8) then GPTQ W8A8 ("SmoothQuant with GPTQ").

Every tensor llm-compressor's run changed, under its name, dtype and shape: scales and zero
points within 1e-4 relative, smoothed norm weights within 1e-5, quantized weights on the same
grid point (compressed-tensors' own ``quantize``) for at least 99% of the entries; every other
tensor unchanged."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import smoothing_reference as ref

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")

import recipe_spec  # noqa: E402
from recipe_spec.oneshot import last_report  # noqa: E402

CASES = ("awq_w4_sym_g32", "awq_w4_asym_g32_both_n10", "sq_gptq_w8a8")


def _run(name: str, **options: Any) -> Any:
    model = ref.model()
    recipe_spec.oneshot(model=model, recipe=ref.cases()["cases"][name]["recipe_yaml"], dataset=ref.samples(),
                        num_calibration_samples=8, shuffle_calibration_samples=False, **options)
    return model


def _grid(model: Any, state: dict[str, Any], weight: Any, base: str) -> Any:
    from compressed_tensors.quantization.lifecycle.forward import quantize

    args = model.get_submodule(base[:-1]).quantization_scheme.weights
    zero = state[base + "weight_zero_point"]
    scale = state[base + "weight_scale"]
    return quantize(weight, scale, zero.to(scale.dtype), args)


@pytest.mark.parametrize("name", CASES)
def test_smoothing_then_quantization_is_llm_compressors_run(name: str) -> None:
    model = _run(name)
    report = last_report()
    assert report is not None
    events = [e for e in ref.cases()["cases"][name]["events"] if e["event"] in ("awq.best_scale",
                                                                                  "smoothquant.smooth")]
    assert [(s.smooth, list(s.balance)) for s in report.smoothing] == [
        (e["smooth_layer"], e["balance_layers"]) for e in events]
    quantized = [r.module for r in report.layers]
    assert len(quantized) == 14 and "lm_head" not in quantized
    want, initial = ref.tensors(name), ref.tensors("initial")
    state = model.state_dict()
    changed = {k[len("final."):] for k in want if k.startswith("final.")}
    assert set(state) - set(initial) <= changed
    for key, value in state.items():
        if key not in changed:
            assert torch.equal(value, initial[key]), key
            continue
        theirs = want[f"final.{key}"]
        assert (value.dtype, value.shape) == (theirs.dtype, theirs.shape), key
        if key.endswith(("_scale", "_zero_point")):
            err = float((value.double() - theirs.double()).abs().max() / max(float(theirs.double().abs().max()), 1e-30))
            assert err <= 1e-4, (key, err)
        elif key.endswith("proj.weight"):
            base = key[: -len("weight")]
            ours = _grid(model, state, value, base)
            other = _grid(model, {k[len("final."):]: v for k, v in want.items()}, theirs, base)
            assert float((ours == other).float().mean()) >= 0.99, key
        else:  # a smoothed norm weight
            assert ref.relative_error(value, theirs) <= 1e-5, key


def test_awq_then_quantization_saves_a_folder_transformers_loads(tmp_path: pathlib.Path) -> None:
    """The smoothed, quantized model saved compressed (pack-quantized W4, asymmetric) loads back
    through compressed-tensors with llm-compressor's weight grid points. transformers 5.23's
    default route for packed formats reinitialises packed zero points (a shape mismatch: 5.17
    loads the same folder), so the folder is loaded dequantized."""
    import json

    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from transformers import CompressedTensorsConfig

    name = "awq_w4_asym_g32_both_n10"
    model = _run(name, output_dir=tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]
    assert config["format"] == "pack-quantized" and config["ignore"] == ["lm_head"]
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path / "out"), dtype=torch.float32, quantization_config=CompressedTensorsConfig(dequantize=True))
    want = ref.tensors(name)
    for key, theirs in want.items():
        if not key.endswith("proj.weight"):
            continue
        base = key[len("final."): -len("weight")]
        args = model.get_submodule(base[:-1]).quantization_scheme.weights
        scale, zero = want[f"final.{base}weight_scale"], want[f"final.{base}weight_zero_point"]
        expected = fake_quantize(theirs, scale, zero.to(scale.dtype), args)
        got = loaded.get_submodule(base[:-1]).weight.detach()
        step = scale.repeat_interleave(32, dim=1)
        assert float(((got - expected).abs() / step < 1e-3).float().mean()) >= 0.99, key
