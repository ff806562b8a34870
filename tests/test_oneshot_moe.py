"""One-shot on a mixture-of-experts model (Qwen3-MoE, transformers 5's fused experts), against
llm-compressor 0.14's runs (``tests/data/conformance/llmcompressor/moe``): each expert split into
one Linear per projection, every expert fed every token while calibrating, each compressed on
its own and saved as its own tensors.

llm-compressor calibrated these cases with attention left unmasked (its traced pipeline passes no
causal mask to the eager attention of this model: with the mask removed, recipe-spec reproduces
every layer bit for bit; with it, layer 0's q/k/v agree and everything after the first attention
differs). recipe-spec keeps the causal mask; the conformance tests below remove it, as
llm-compressor's run did, to compare the expert machinery itself.
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
from compressed_tensors.compressors.pack_quantized import unpack_from_int32  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from testdata import MOE  # noqa: E402

import recipe_spec  # noqa: E402

GPTQ, SPARSE = "21_qwen3moe_gptq_w4a16", "24_qwen3moe_sparsegpt_50"


def _case(name: str) -> dict[str, Any]:
    return json.loads((MOE / name / "case.json").read_text())


def _model(name: str) -> Any:
    """The case's model, rebuilt from its seed (``torch.manual_seed(1000 + case)``, as made)."""
    case = _case(name)
    config = {k: v for k, v in case["model_config"].items()
              if k not in ("architectures", "transformers_version", "model_type")}
    torch.manual_seed(case["seeds"]["model"])
    return transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**config)).float().eval()


def _samples(name: str) -> list[dict[str, list[int]]]:
    return [{"input_ids": t, "attention_mask": [1] * len(t)} for t in _case(name)["calibration"]["token_ids"]]


def _run(name: str, **kwargs: Any) -> Any:
    model = _model(name)
    torch.set_num_threads(1)
    recipe_spec.oneshot(model=model, recipe=_case(name)["recipe_yaml"], dataset=_samples(name),
                        num_calibration_samples=16, shuffle_calibration_samples=False, progress=False, **kwargs)
    return model


@pytest.fixture()
def unmasked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attention without the causal mask, as llm-compressor's traced run computed it here."""
    import transformers.models.qwen3_moe.modeling_qwen3_moe as qwen3_moe

    monkeypatch.setattr(qwen3_moe, "create_causal_mask", lambda *args, **kwargs: None)


def test_the_split_experts_compute_the_fused_blocks_output() -> None:
    from recipe_spec_torch.experts import fused_experts, linearize, restore

    model = _model(GPTQ)
    ids = torch.tensor([_samples(GPTQ)[0]["input_ids"]])
    with torch.no_grad():
        want = model(ids).logits
        originals = linearize(model, calibrate_all=True)
        assert [n for n, _ in originals] == ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"]
        experts = model.model.layers[0].mlp.experts
        assert len([m for m in experts.modules() if isinstance(m, torch.nn.Linear)]) == 8 * 3
        fused = originals[0][1]
        np.testing.assert_array_equal(experts[3].gate_proj.weight.numpy(), fused.gate_up_proj[3, :128].numpy())
        np.testing.assert_array_equal(experts[3].up_proj.weight.numpy(), fused.gate_up_proj[3, 128:].numpy())
        np.testing.assert_array_equal(experts[3].down_proj.weight.numpy(), fused.down_proj[3].numpy())
        all_tokens = model(ids).logits
        for block in (model.model.layers[0].mlp.experts, model.model.layers[1].mlp.experts):
            block.calibrate_all = False
        routed = model(ids).logits
        restore(model, originals)
        assert len(fused_experts(model)) == 2 and model(ids).logits.equal(want)
    # every expert fed every token changes what each expert sees, not the block's output
    torch.testing.assert_close(all_tokens, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(routed, want, rtol=0, atol=1e-5)


def test_gptq_w4a16_saves_llmcompressors_folder_byte_for_byte(unmasked: None, tmp_path: pathlib.Path) -> None:
    """Every packed weight, scale and shape of the saved folder equals llm-compressor's (56
    quantized layers: 48 experts' projections and the attention), and so does the
    ``quantization_config``; transformers loads the folder back."""
    out = tmp_path / "out"
    model = _run(GPTQ, output_dir=out)
    assert len([n for n, m in model.named_modules() if hasattr(m, "weight_scale")]) == 56
    reference = MOE / GPTQ / "saved"
    with safe_open(str(reference / "model.safetensors"), "np") as ref, safe_open(str(out / "model.safetensors"), "np") as ours:
        assert set(ref.keys()) == set(ours.keys()) and len(ref.keys()) == 181
        assert "model.layers.1.mlp.experts.7.down_proj.weight_packed" in ref.keys()
        different = [k for k in ref.keys() if not np.array_equal(ref.get_tensor(k), ours.get_tensor(k))]
    assert different == []
    want = json.loads((reference / "config.json").read_text())
    got = json.loads((out / "config.json").read_text())
    assert got["quantization_config"] == want["quantization_config"] and got["use_cache"] is True
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert torch.isfinite(loaded(torch.tensor([[5, 6, 7, 8]])).logits).all()


def test_sparsegpt_puts_llmcompressors_zeros_in_every_expert(unmasked: None) -> None:
    """Every expert projection and attention layer has llm-compressor's zero pattern; lm_head,
    which llm-compressor 0.14 prunes although the recipe ignores it (``ignore: [lm_head]`` is
    not matched there: C005), stays dense."""
    model = _run(SPARSE)
    final = load_file(str(MOE / SPARSE / "final.safetensors"))
    state = model.state_dict()
    compared = 0
    for name, want in final.items():
        if want.ndim != 2 or name.startswith(("lm_head", "model.embed_tokens")) or name.endswith("mlp.gate.weight"):
            continue
        assert np.array_equal(state[name].numpy() == 0, want == 0), name
        compared += 1
    assert compared == 2 * (4 + 8 * 3)
    assert not (state["lm_head.weight"] == 0).any()


def test_the_causal_run_differs_from_the_unmasked_one_after_the_first_attention() -> None:
    """recipe-spec calibrates with the model's causal mask: layer 0's q/k/v (fed before any
    attention) land on llm-compressor's grid, its o_proj (fed by the attention) does not."""
    model = _run(GPTQ)
    with safe_open(str(MOE / GPTQ / "saved" / "model.safetensors"), "pt") as ref:
        for proj, same in (("q_proj", True), ("k_proj", True), ("v_proj", True), ("o_proj", False)):
            key = f"model.layers.0.self_attn.{proj}"
            scale = ref.get_tensor(key + ".weight_scale")
            ours = torch.round(getattr(model.model.layers[0].self_attn, proj).weight / scale)
            theirs = unpack_from_int32(ref.get_tensor(key + ".weight_packed"), 4, torch.Size(ours.shape))
            assert torch.equal(ours.to(theirs.dtype), theirs) is same, proj


def test_routed_tokens_only_with_moe_calibrate_all_experts_false() -> None:
    """``moe_calibrate_all_experts=False``: each expert's statistics come from its routed tokens,
    so its GPTQ result differs from the all-tokens run; attention (before the experts) does not."""
    every, routed = _run(GPTQ), _run(GPTQ, moe_calibrate_all_experts=False)
    a, b = every.state_dict(), routed.state_dict()
    assert torch.equal(a["model.layers.0.self_attn.q_proj.weight"], b["model.layers.0.self_attn.q_proj.weight"])
    assert not torch.equal(a["model.layers.0.mlp.experts.0.gate_proj.weight"],
                           b["model.layers.0.mlp.experts.0.gate_proj.weight"])


def test_a_refused_or_failed_run_puts_the_fused_experts_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal inside the run (an unknown ``sequential_targets``) and a failure halfway
    through compression (the tenth GPTQ solve raising) both leave the model as it was: the
    fused experts module itself, every tensor equal."""
    from recipe_spec.oneshot import gptq as quantize

    model = _model(GPTQ)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    experts = model.model.layers[0].mlp.experts
    with pytest.raises(ValueError, match="sequential_targets"):
        recipe_spec.oneshot(model=model, recipe=_case(GPTQ)["recipe_yaml"], dataset=_samples(GPTQ), progress=False,
                            sequential_targets=["NoSuchLayer"])
    solve, calls = quantize.gptq_quantize, []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 10:
            raise RuntimeError("disk full")
        return solve(*args, **kwargs)

    monkeypatch.setattr(quantize, "gptq_quantize", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        recipe_spec.oneshot(model=model, recipe=_case(GPTQ)["recipe_yaml"], dataset=_samples(GPTQ), progress=False,
                            num_calibration_samples=4)
    assert len(calls) == 10 and model.model.layers[0].mlp.experts is experts
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert not any(hasattr(m, "weight_scale") for m in model.modules())


_ARCHITECTURES = {
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {"num_local_experts": 4, "intermediate_size": 64}),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", {"num_experts": 4, "moe_intermediate_size": 64,
                                                            "shared_expert_intermediate_size": 64}),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", {"num_experts": 4, "intermediate_size": 64}),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", {
        "n_routed_experts": 4, "moe_intermediate_size": 64, "first_k_dense_replace": 0, "n_group": 1, "topk_group": 1,
        "q_lora_rank": None, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16}),
}


def _tiny(config_name: str, model_name: str, extra: dict[str, Any]) -> Any:
    config_cls, model_cls = getattr(transformers, config_name, None), getattr(transformers, model_name, None)
    if config_cls is None or model_cls is None:
        pytest.skip(f"transformers {transformers.__version__} has no {model_name}")
    torch.manual_seed(0)
    config = config_cls(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=2, max_position_embeddings=64, num_experts_per_tok=2, **extra)
    return model_cls(config).float().eval()


@pytest.mark.parametrize("arch", sorted(_ARCHITECTURES))
def test_other_fused_expert_architectures_split_and_compress(arch: str) -> None:
    """Mixtral, Qwen2-MoE (with its shared expert), OLMoE and DeepSeek-V3: the split model
    computes the fused one's logits (float32 rounding apart), and a SparseGPT 2:4 run puts
    the pattern in every expert's projections."""
    from recipe_spec_torch.experts import linearize, restore

    model = _tiny(*_ARCHITECTURES[arch])
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids).logits
        originals = linearize(model, calibrate_all=True)
        got = model(ids).logits
        restore(model, originals)
    assert len(originals) == 2
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    recipe = ("s_stage:\n  s_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n      mask_structure: '2:4'\n"
              "      targets: [Linear]\n      ignore: ['re:.*lm_head', 're:.*mlp.gate$', 're:.*shared_expert_gate$']\n")
    samples = [{"input_ids": torch.randint(0, 64, (20,), generator=torch.Generator().manual_seed(s)).tolist()}
               for s in range(4)]
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=samples, num_calibration_samples=4, progress=False)
    experts = [(n, m) for n, m in model.named_modules() if ".experts." in n and isinstance(m, torch.nn.Linear)]
    assert len(experts) == 2 * 4 * 3
    for name, module in experts:
        w = module.weight.reshape(module.weight.shape[0], -1, 4)
        assert ((w == 0).sum(-1) >= 2).all(), name


def test_experts_laid_out_otherwise_are_refused_by_name_before_anything_changes() -> None:
    """gpt-oss interleaves gate and up columns: refused, naming the module, the model as it was."""
    model = _tiny("GptOssConfig", "GptOssForCausalLM", {"num_local_experts": 4, "intermediate_size": 64, "head_dim": 16})
    experts = model.model.layers[0].mlp.experts
    recipe = "s_stage:\n  s_modifiers:\n    SparseGPTModifier: {sparsity: 0.5, targets: [Linear], ignore: ['re:.*lm_head']}\n"
    with pytest.raises(ValueError, match=r"model.layers.0.mlp.experts \(GptOssExperts\).*interleaved"):
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=[{"input_ids": [1, 2, 3, 4]}], progress=False)
    assert model.model.layers[0].mlp.experts is experts
