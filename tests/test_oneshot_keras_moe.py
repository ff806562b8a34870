"""One-shot on keras-hub's mixture-of-experts models (``Qwen3MoeCausalLM``, ``MixtralCausalLM``)
loaded from the Hugging Face folders transformers 5 saves: every expert a Linear per projection
under transformers 5's names, against llm-compressor 0.14's Qwen3-MoE run
(``tests/data/conformance/llmcompressor/moe``) and against the PyTorch backend on the same
checkpoint.

As in ``test_oneshot_moe.py``, llm-compressor's run computed attention without the causal mask;
the conformance test removes keras-hub's causal mask the same way to compare the experts."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from keras_hub_cases import needs_hub  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from testdata import MOE  # noqa: E402

import recipe_spec  # noqa: E402

pytestmark = needs_hub
SPARSE = "24_qwen3moe_sparsegpt_50"
IGNORE = ["lm_head", "re:.*mlp.gate$"]


def _case(name: str) -> dict[str, Any]:
    return json.loads((MOE / name / "case.json").read_text())


def _recipe(modifier: str, **args: Any) -> str:
    body = json.dumps({"targets": ["Linear"], "ignore": IGNORE, **args})
    return f"sparse_stage:\n  sparse_modifiers:\n    {modifier}: {body}\n"


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The conformance case's Qwen3-MoE (rebuilt from its seed), saved by transformers 5."""
    case = _case(SPARSE)
    config = {k: v for k, v in case["model_config"].items()
              if k not in ("architectures", "transformers_version", "model_type")}
    torch.manual_seed(case["seeds"]["model"])
    folder = tmp_path_factory.mktemp("qwen3moe")
    transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**config)).float().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A tiny Mixtral (4 experts, top 2), saved by transformers 5 (``block_sparse_moe.experts.<e>.w1``)."""
    torch.manual_seed(7)
    config = transformers.MixtralConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                        num_experts_per_tok=2, rms_norm_eps=1e-6)
    folder = tmp_path_factory.mktemp("mixtral")
    transformers.MixtralForCausalLM(config).save_pretrained(folder)
    return folder


def _samples() -> list[dict[str, list[int]]]:
    rng = np.random.default_rng(0)
    return [{"input_ids": rng.integers(4, 96, n).tolist(), "attention_mask": [1] * n} for n in (20, 24, 17, 30, 22, 26)]


def _keras(folder: pathlib.Path) -> Any:
    from recipe_spec_keras.hub import load_causal_lm

    return load_causal_lm(folder)


def _host(model: Any) -> Any:
    from recipe_spec_keras.oneshot import KerasCalibrationHost

    return KerasCalibrationHost(model)


def _experts(host: Any) -> list[str]:
    return [i.name for i in host.modules() if ".experts." in i.name]


def _pair(folder: pathlib.Path, recipe: str, **kwargs: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """The Keras host after the run, and the PyTorch model's weights after the same run."""
    torch.set_num_threads(1)
    model = _keras(folder)
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples(), progress=False, **kwargs)
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder).float().eval()
    recipe_spec.oneshot(model=reference, recipe=recipe, dataset=_samples(), progress=False, **kwargs)
    return _host(model), {k: v.detach().numpy() for k, v in reference.state_dict().items()}


def test_a_keras_hub_moe_folder_loads_as_its_task_with_every_expert_a_linear(qwen3: pathlib.Path,
                                                                                mixtral: pathlib.Path) -> None:
    import keras_hub

    qwen = _keras(qwen3)
    assert isinstance(qwen, keras_hub.models.Qwen3MoeCausalLM)  # chosen from config.json; num_local_experts read
    ids = np.array([_case(SPARSE)["calibration"]["token_ids"][0]])
    reference = transformers.AutoModelForCausalLM.from_pretrained(qwen3).float().eval()
    with torch.no_grad():
        want = reference(torch.tensor(ids)).logits.numpy()
    got = keras.ops.convert_to_numpy(qwen({"token_ids": ids, "padding_mask": np.ones_like(ids)}))
    np.testing.assert_allclose(got, want, atol=2e-5)
    host = _host(qwen)
    torch_names = {n for n, m in reference.named_modules() if isinstance(m, torch.nn.Linear)}
    names = {i.name for i in host.modules() if "Linear" in i.classes}
    assert "model.layers.1.self_attn.q_proj" in names  # named past layer 0's expert bank
    assert len(_experts(host)) == 2 * 8 * 3 and "model.layers.1.mlp.experts.7.down_proj" in names
    assert names - set(_experts(host)) == torch_names
    init = load_file(MOE / SPARSE / "final.safetensors")  # the shapes llm-compressor gave each expert
    for name in _experts(host):
        assert host.weight(name).shape == init[name + ".weight"].shape
    fused = reference.model.layers[1].mlp.experts
    np.testing.assert_array_equal(host.weight("model.layers.1.mlp.experts.5.up_proj"),
                                  fused.gate_up_proj[5, 128:].detach().numpy())
    np.testing.assert_array_equal(host.weight("model.layers.1.mlp.experts.5.down_proj"),
                                  fused.down_proj[5].detach().numpy())
    mix = _host(_keras(mixtral))  # Mixtral's block_sparse_moe.experts.<e>.w1 / w3 / w2, under transformers 5's names
    assert {"model.layers.0.mlp.gate", "model.layers.0.mlp.experts.3.gate_proj", "model.layers.0.mlp.experts.3.up_proj",
            "model.layers.0.mlp.experts.3.down_proj"} <= {i.name for i in mix.modules()}


def test_writing_an_expert_changes_its_slice_only(mixtral: pathlib.Path) -> None:
    host = _host(_keras(mixtral))
    before = {n: host.weight(n) for n in _experts(host)}
    host.set_weight("model.layers.1.mlp.experts.2.up_proj", np.zeros_like(before["model.layers.1.mlp.experts.2.up_proj"]))
    for name, value in before.items():
        now = host.weight(name)
        assert (not now.any()) if name == "model.layers.1.mlp.experts.2.up_proj" else np.array_equal(now, value)


def test_sparsegpt_on_a_keras_hub_qwen3_moe_reproduces_llm_compressor(qwen3: pathlib.Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import keras_hub.src.models.qwen3_moe.qwen3_moe_decoder as decoder

    monkeypatch.setattr(decoder, "compute_causal_mask", lambda b, i, o, c=0: keras.ops.ones((b, o, i), dtype="bool"))
    case = _case(SPARSE)
    samples = [{"input_ids": t, "attention_mask": [1] * len(t)} for t in case["calibration"]["token_ids"]]
    model = _keras(qwen3)
    torch.set_num_threads(1)
    recipe_spec.oneshot(model=model, recipe=case["recipe_yaml"], dataset=samples, num_calibration_samples=16,
                        shuffle_calibration_samples=False, progress=False)
    host, final = _host(model), load_file(MOE / SPARSE / "final.safetensors")
    compared = 0
    for info in host.modules():
        if "Linear" not in info.classes or info.name == "lm_head" or info.name.endswith("mlp.gate"):
            continue
        got, want = host.weight(info.name), final[info.name + ".weight"]
        assert np.mean((got == 0) == (want == 0)) >= 0.99, info.name
        kept = (got != 0) & (want != 0)
        np.testing.assert_allclose(got[kept], want[kept], atol=1e-4, err_msg=info.name)
        compared += 1
    assert compared == 2 * (4 + 8 * 3)


@pytest.mark.parametrize("modifier", ["SparseGPTModifier", "WandaPruningModifier"])
def test_pruning_a_keras_hub_mixtral_agrees_with_pytorch(mixtral: pathlib.Path, modifier: str) -> None:
    host, weights = _pair(mixtral, _recipe(modifier, sparsity=0.5))
    for name in [i.name for i in host.modules() if "Linear" in i.classes and i.name != "lm_head"]:
        got, want = host.weight(name), weights[name + ".weight"]
        if name.endswith("mlp.gate"):  # ignored: untouched
            assert np.array_equal(got, want) and not (got == 0).any()
            continue
        assert 0.49 <= np.mean(got == 0) <= 0.51, name
        assert np.mean((got == 0) == (want == 0)) >= 0.99, name


def test_experts_calibrated_on_their_routed_tokens_agree_with_pytorch(qwen3: pathlib.Path) -> None:
    recipe = _recipe("SparseGPTModifier", sparsity=0.5)
    host, weights = _pair(qwen3, recipe, moe_calibrate_all_experts=False)
    every = _host(_keras(qwen3))
    recipe_spec.oneshot(model=every.model, recipe=recipe, dataset=_samples(), progress=False)
    differs = 0
    for name in _experts(host):
        got = host.weight(name)
        assert np.mean((got == 0) == (weights[name + ".weight"] == 0)) >= 0.99, name
        differs += not np.array_equal(got == 0, every.weight(name) == 0)
    assert differs > len(_experts(host)) // 2  # the keyword changes what the experts were calibrated on


def test_quantizing_an_expert_is_refused_by_name_before_any_weight_changes(qwen3: pathlib.Path) -> None:
    model = _keras(qwen3)
    before = [np.array(keras.ops.convert_to_numpy(v)) for v in model.weights]
    recipe = "quant_stage:\n  quant_modifiers:\n    GPTQModifier: {scheme: W4A16, targets: [Linear], ignore: [lm_head, 're:.*mlp.gate$']}\n"
    with pytest.raises(recipe_spec.RecipeError,
                       match=r"model\.layers\.0\.mlp\.experts\.0\.gate_proj: an expert of keras-hub's Qwen3MoeExperts"):
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples(), progress=False)
    assert all(np.array_equal(a, keras.ops.convert_to_numpy(v)) for a, v in zip(before, model.weights, strict=True))
    # the experts left out: the attention layers quantize into Keras's int4 layers
    ignore = "[lm_head, 're:.*mlp.gate$', 're:.*mlp.experts.*']"
    recipe_spec.oneshot(model=model, recipe=recipe.replace("ignore: [lm_head, 're:.*mlp.gate$']", f"ignore: {ignore}"),
                        dataset=_samples(), progress=False)
    query = model.backbone.get_layer("transformer_layer_0")._self_attention_layer._query_dense
    assert query.quantization_mode == "int4"


def test_a_bank_of_experts_the_backend_does_not_split_is_refused() -> None:
    class Bank(keras.layers.Layer):
        def build(self, shape: Any) -> None:
            self.kernel = self.add_weight(shape=(4, int(shape[-1]), 8), name="kernel")

        def call(self, x: Any) -> Any:
            return keras.ops.einsum("bth,ehm->btm", x, self.kernel)

    ids = keras.Input(shape=(None,), dtype="int32")
    out = Bank(name="experts")(keras.layers.Embedding(16, 8)(ids))
    model = keras.Model(ids, keras.layers.Dense(16, name="head")(out))
    model.num_experts = 4
    with pytest.raises(ValueError, match=r"experts \(Bank\): a bank of 4 experts .* run the Hugging Face checkpoint on PyTorch"):
        _host(model)
    model.num_experts = 0  # a dense model: the same layers are no experts
    assert "head" in [i.name for i in _host(model).modules()]


def test_smoothing_a_keras_hub_moe_uses_its_architectures_mappings(qwen3: pathlib.Path) -> None:
    """llm-compressor maps Qwen3-MoE's SmoothQuant to the attention only (no smoothing of the
    experts' input): the Keras model answers to ``Qwen3MoeForCausalLM`` and is smoothed as on PyTorch."""
    recipe = ("quant_stage:\n  quant_modifiers:\n    SmoothQuantModifier: {smoothing_strength: 0.8}\n"
              "    QuantizationModifier: {scheme: W8A8, targets: [Linear], "
              "ignore: [lm_head, 're:.*mlp.gate$', 're:.*mlp.experts.*']}\n")
    host, weights = _pair(qwen3, recipe)
    assert host.modules()[0].classes[0] == "Qwen3MoeForCausalLM"
    for layer in (0, 1):
        norm = f"model.layers.{layer}.input_layernorm"
        assert not np.allclose(weights[norm + ".weight"], 1.0)  # smoothed on PyTorch
        np.testing.assert_allclose(host.weight(norm), weights[norm + ".weight"], rtol=1e-5)
        assert np.array_equal(host.weight(f"model.layers.{layer}.post_attention_layernorm"),
                              weights[f"model.layers.{layer}.post_attention_layernorm.weight"])
    for name in _experts(host):
        np.testing.assert_array_equal(host.weight(name), weights[name + ".weight"])
