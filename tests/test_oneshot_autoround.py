"""AutoRound (``AutoRoundModifier``, through auto-round 0.15.1) against llm-compressor 0.14's own
runs (``tests/fixtures/autoround/reference.json``, made by ``make_reference.py`` there on the tiny
Llama of conformance case 10): every saved tensor by SHA-256, the ``quantization_config``; where
llm-compressor differs (the decoder layers' norms it leaves in bfloat16, the zero points of an
asymmetric scheme it never writes), what recipe-spec saves instead; and the refusals, before
anything changes.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")
pytest.importorskip("auto_round")
from safetensors.torch import load_file  # noqa: E402
from testdata import LLMCOMPRESSOR  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec.diagnostics.base import RecipeError  # noqa: E402

REFERENCE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "autoround" / "reference.json").read_text())["runs"]
CASE = LLMCOMPRESSOR / "10_staged_sparse24_gptq_w4a16"
NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight")


def _model(bfloat16: bool = False) -> Any:
    case = json.loads((CASE / "case.json").read_text())
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**case["model_config"])).float().eval()
    model.load_state_dict(load_file(str(CASE / "initial.safetensors")))
    return model.to(torch.bfloat16) if bfloat16 else model


def _samples() -> list[dict[str, list[int]]]:
    case = json.loads((CASE / "case.json").read_text())
    return [{"input_ids": t, "attention_mask": [1] * len(t)} for t in case["calibration"]["token_ids"]]


def _run(model: Any, recipe: str, **kwargs: Any) -> Any:
    torch.set_num_threads(1)
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples(), num_calibration_samples=16,
                        shuffle_calibration_samples=False, progress=False, **kwargs)
    return model


def _digest(t: Any) -> str:
    return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def _saved(name: str, tmp_path: pathlib.Path) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    want = REFERENCE[name]
    model = _run(_model(want["bfloat16"]), want["recipe"], output_dir=tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]
    assert config == want["quantization_config"]
    return model, load_file(str(tmp_path / "out" / "model.safetensors")), want["tensors"]


@pytest.mark.parametrize("name", ["w4a16_iters20", "w4a16_iters10_batch4_lr", "w8a16_iters10", "group32_iters10",
                                  "w4a16_iters0", "w4a16_iters10_bf16", "mixed_w2_w4_iters10", "fp8_dynamic_iters10",
                                  "fp8_iters10", "nvfp4_iters10", "nvfp4_iters10_bf16", "mxfp4_iters10",
                                  "mxfp8_iters10", "nvfp4a16_iters10", "mxfp4a16_iters10", "mxfp8a16_iters10",
                                  "w8a8_static_iters10"])
def test_autoround_saves_llmcompressors_folder(name: str, tmp_path: pathlib.Path) -> None:
    """Every packed weight, scale, zero point, global scale, static input scale and other tensor
    is llm-compressor's, byte for byte; on a float32 model llm-compressor's decoder norms are
    bfloat16 (auto-round ran the block in bfloat16 and left it so), recipe-spec's keep the
    model's float32, the same values rounded. Static inputs (FP8, int8): llm-compressor also saves
    auto-round's ``act_max_scale`` beside each ``input_scale`` (an attribute of auto-round's left
    behind, which no loader reads); recipe-spec does not. NVFP4A16, MXFP4A16 and MXFP8A16: the
    runs of llm-compressor as its documents promise (``make_reference.py``: 0.14.0.1 stops on the
    first two and gives the third float group scales)."""
    model, ours, want = _saved(name, tmp_path)
    stray = {k for k in want if k.endswith(".act_max_scale")}
    assert set(ours) == set(want) - stray
    assert len(stray) == (14 if name in ("fp8_iters10", "w8a8_static_iters10") else 0)
    cast = []
    for key, (shape, dtype, digest) in want.items():
        if key in stray:
            continue
        got = ours[key]
        assert list(got.shape) == shape, key
        if key.endswith(NORMS) and ".layers." in key and not REFERENCE[name]["bfloat16"]:
            assert (dtype, got.dtype) == ("bfloat16", torch.float32) and _digest(got.to(torch.bfloat16)) == digest, key
            cast.append(key)
        else:
            assert _digest(got) == digest, key
    assert len(cast) == (0 if REFERENCE[name]["bfloat16"] else 4)
    floats = {p.dtype for n, p in model.named_parameters() if n.endswith((".weight", ".bias"))}
    assert floats <= {torch.bfloat16 if REFERENCE[name]["bfloat16"] else torch.float32, torch.float8_e4m3fn, torch.int8}
    assert not any(n.endswith("act_max_scale") for n, _ in model.named_parameters())
    assert all(p.requires_grad for n, p in model.named_parameters() if n.endswith(("weight", "bias"))
               and p.is_floating_point() and p.dtype != torch.float8_e4m3fn)


def test_an_asymmetric_scheme_saves_auto_rounds_zero_points(tmp_path: pathlib.Path) -> None:
    """W4A16_ASYM: llm-compressor saves zero points of 0 (the ones compressed-tensors made before
    tuning; auto-round's are never written back), so the values its tuning moved off centre are
    clamped; recipe-spec saves auto-round's, and the saved grid gives back the tuned weights."""
    from compressed_tensors.compressors.pack_quantized import pack_to_int32, unpack_from_int32

    want = REFERENCE["w4a16_asym_iters10"]
    model = _run(_model(), want["recipe"])
    tuned = {n: m.weight.detach().float().clone() for n, m in model.named_modules()
             if n.startswith("model.layers.") and isinstance(m, torch.nn.Linear)}
    model.save_pretrained(tmp_path / "out", save_compressed=True)  # the folder output_dir= writes
    assert json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"] == \
        want["quantization_config"]
    ours, want = load_file(str(tmp_path / "out" / "model.safetensors")), want["tensors"]
    for name in [n for n in want if n.endswith(".weight_zero_point")]:  # llm-compressor's: all 0
        zeros = torch.zeros(ours[name.replace("zero_point", "scale")].shape, dtype=torch.int8)
        assert want[name][2] == _digest(pack_to_int32(zeros, 4, packed_dim=0)), name
    checked = 0
    for name, weight in tuned.items():
        shape = torch.Size(ours[f"{name}.weight_shape"].tolist())
        grid = unpack_from_int32(ours[f"{name}.weight_packed"], 4, shape).float()
        scale = ours[f"{name}.weight_scale"].float()
        zero = unpack_from_int32(ours[f"{name}.weight_zero_point"], 4, torch.Size(scale.shape), packed_dim=0).float()
        groups = shape[1] // scale.shape[1]
        back = (grid - zero.repeat_interleave(groups, 1)) * scale.repeat_interleave(groups, 1)
        torch.testing.assert_close(back, weight, rtol=1e-2, atol=1e-6)
        assert (zero != 0).any(), name
        checked += 1
        for other in ("weight_packed", "weight_zero_point"):
            assert _digest(ours[f"{name}.{other}"]) != want[f"{name}.{other}"][2], (name, other)
        assert _digest(ours[f"{name}.weight_scale"]) == want[f"{name}.weight_scale"][2], name
    assert checked == 14


@pytest.mark.parametrize(("args", "match", "line"), [
    ("      config_groups:\n        g:\n          targets: [Linear]\n          weights: {num_bits: 8, type: int, "
     "strategy: channel}\n          input_activations: {num_bits: 8, type: int, strategy: tensor, "
     "symmetric: false}\n      ignore: [lm_head]\n", "static input activations", 4),
    ("      config_groups:\n        g:\n          targets: [Linear]\n          weights: {num_bits: 4, type: float, "
     "strategy: group, group_size: 16}\n      ignore: [lm_head]\n", "no tuning", 4),
    ("      scheme: W4A16\n      device_ids: '0,1'\n      targets: [Linear]\n      ignore: [lm_head]\n",
     "device_ids", 5),
    ("      scheme: W4A16\n      iters: 10\n      lr: 0\n      targets: [Linear]\n      ignore: [lm_head]\n",
     "lr", 6),
])
def test_what_autoround_does_not_run_is_refused_located(args: str, match: str, line: int) -> None:
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RecipeError, match=match) as caught:
        _run(model, "quant_stage:\n  quant_modifiers:\n    AutoRoundModifier:\n" + args)
    assert caught.value.diagnostics[0].line == line
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_a_target_outside_the_decoder_blocks_is_refused() -> None:
    """lm_head targeted: llm-compressor attaches its scheme and never tunes it (it is saved with
    the scales made before tuning); refused, naming it, before anything changes."""
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RecipeError, match="lm_head is outside every block") as caught:
        _run(model, "quant_stage:\n  quant_modifiers:\n    AutoRoundModifier:\n      scheme: W4A16\n"
                    "      targets: [Linear]\n      iters: 0\n")
    assert caught.value.diagnostics[0].line == 3 and "Add it to ignore" in caught.value.diagnostics[0].hint
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert not any(hasattr(m, "weight_scale") for m in model.modules())


@pytest.mark.parametrize("run", ["w4a16_iters0", "nvfp4_iters10"])
def test_a_failure_while_tuning_leaves_the_model_as_it_was(monkeypatch: pytest.MonkeyPatch, run: str) -> None:
    """auto-round failing in the second block (the first tuned and recorded, the second in
    bfloat16 by then): every tensor back, in its dtype, no attribute of auto-round's left (with
    NVFP4 auto-round sets a ``weight_global_scale`` of its own beside compressed-tensors'
    parameter of that name)."""
    from auto_round.compressors.orchestrator import CompressionOrchestrator

    quantize, calls = CompressionOrchestrator.quantize_block, []

    def failing(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            self.model.to(torch.bfloat16)
            raise RuntimeError("out of memory")
        return quantize(self, *args, **kwargs)

    monkeypatch.setattr(CompressionOrchestrator, "quantize_block", failing)
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="out of memory"):
        _run(model, REFERENCE[run]["recipe"])
    after = model.state_dict()
    assert len(calls) == 2 and after.keys() == before.keys()
    assert all(after[k].dtype == before[k].dtype and torch.equal(after[k], before[k]) for k in before)
    assert not any(hasattr(m, a) for m in model.modules()
                   for a in ("scale", "zp", "weight_scale", "weight_global_scale", "act_max", "global_name"))


def test_each_recorded_scale_is_the_parameter_that_is_saved() -> None:
    """NVFP4: auto-round leaves its ``weight_global_scale`` as a plain attribute; removed, it no
    longer shadows compressed-tensors' parameter of the same name, so what was recorded (fused
    q/k/v and gate/up share one global scale) is what the module's state holds and saves."""
    model = _run(_model(), REFERENCE["nvfp4_iters10"]["recipe"])
    linears = [m for n, m in model.named_modules() if ".layers." in n and isinstance(m, torch.nn.Linear)]
    assert len(linears) == 14
    for m in linears:
        assert not set(vars(m)) & set(m._parameters)
        assert m.weight_global_scale is m._parameters["weight_global_scale"]
        assert float(m.weight_global_scale) > 1.0  # 448 * 6 / max |w|: the tiny model's weights are ~0.02
    attn = model.model.layers[0].self_attn
    assert attn.q_proj.weight_global_scale == attn.k_proj.weight_global_scale == attn.v_proj.weight_global_scale


def test_validate_agrees_with_what_autoround_runs() -> None:
    from recipe_spec.validation import validate

    for name in ("nvfp4_iters10", "mxfp4_iters10", "fp8_iters10", "mxfp8a16_iters10", "w8a8_static_iters10"):
        assert not [d for d in validate(REFERENCE[name]["recipe"], backend="torch") if d.severity.name == "ERROR"], name
    asymmetric = ("quant_stage:\n  quant_modifiers:\n    AutoRoundModifier:\n      config_groups:\n        g:\n"
                  "          targets: [Linear]\n          weights: {num_bits: 8, type: int, strategy: channel}\n"
                  "          input_activations: {num_bits: 8, type: int, strategy: tensor, symmetric: false}\n"
                  "      ignore: [lm_head]\n")
    found = [d for d in validate(asymmetric, backend="torch") if d.severity.name == "ERROR"]
    assert [d.line for d in found] == [4] and "static input activations" in found[0].message


def test_without_auto_round_the_recipe_is_refused_located(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "auto_round", None)
    with pytest.raises(RecipeError, match=r"recipe-spec\[autoround\]") as caught:
        _run(_model(), REFERENCE["w4a16_iters0"]["recipe"])
    assert caught.value.diagnostics[0].line == 3


def test_keras_does_not_run_autoround() -> None:
    from recipe_spec.validation import validate

    assert any("quantize:autoround" in d.message for d in validate(REFERENCE["w4a16_iters20"]["recipe"], backend="keras"))
    assert not [d for d in validate(REFERENCE["w4a16_iters20"]["recipe"], backend="torch") if d.severity.name == "ERROR"]
