"""REAP expert pruning (``REAPPruningModifier``) on keras-hub's mixture-of-experts models: the
Qwen3-MoE of ``tests/fixtures/reap`` (llm-compressor 0.14's own runs, made by its
``make_reference.py``) loaded from the folder transformers 5 saves, and a tiny Mixtral against
the PyTorch backend. As in ``test_oneshot_keras_moe.py``, the Qwen3-MoE runs compare with
keras-hub's causal mask removed, as llm-compressor's traced pipeline calibrated that model.
"""

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
from testdata import MOE  # noqa: E402

import recipe_spec  # noqa: E402

pytestmark = needs_hub
FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "reap"
REFERENCE = json.loads((FIXTURES / "reference.json").read_text())["runs"]
CASE = json.loads((MOE / "21_qwen3moe_gptq_w4a16" / "case.json").read_text())


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The fixtures' Qwen3-MoE (8 experts, top 2, from the case's seed), saved by transformers 5."""
    config = {k: v for k, v in CASE["model_config"].items()
              if k not in ("architectures", "transformers_version", "model_type")}
    torch.manual_seed(CASE["seeds"]["model"])
    folder = tmp_path_factory.mktemp("qwen3moe")
    transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**config)).float().save_pretrained(folder)
    return folder


@pytest.fixture()
def unmasked(monkeypatch: pytest.MonkeyPatch) -> None:
    import keras_hub.src.models.qwen3_moe.qwen3_moe_decoder as decoder

    monkeypatch.setattr(decoder, "compute_causal_mask", lambda b, i, o, c=0: keras.ops.ones((b, o, i), dtype="bool"))


def _samples() -> list[dict[str, list[int]]]:
    return [{"input_ids": t, "attention_mask": [1] * len(t)} for t in CASE["calibration"]["token_ids"]]


def _keras(folder: pathlib.Path) -> Any:
    from recipe_spec_keras.hub import load_causal_lm

    return load_causal_lm(folder)


def _host(model: Any) -> Any:
    from recipe_spec_keras.oneshot import KerasCalibrationHost

    return KerasCalibrationHost(model)


def _run(model: Any, recipe: str, **kwargs: Any) -> Any:
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples(), num_calibration_samples=16,
                        shuffle_calibration_samples=False, progress=False, **kwargs)
    return recipe_spec.oneshot.last_report()


def _np(x: Any) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


def _state(model: Any) -> dict[str, np.ndarray]:
    return {v.path: _np(v).copy() for v in model.weights}


def _sparse_blocks(model: Any) -> list[Any]:
    blocks = [getattr(layer, "mlp", None) or getattr(layer, "_sparse_moe_block", None)
              for layer in model.backbone.transformer_layers]
    return [b for b in blocks if hasattr(b, "expert_bank")]


@pytest.mark.parametrize("name", ["reap_25", "reap_50_routed"])
def test_reap_on_a_keras_hub_qwen3_moe_keeps_llmcompressors_experts(name: str, qwen3: pathlib.Path, unmasked: None,
                                                                    saliencies: list[list[float]],
                                                                    tmp_path: pathlib.Path) -> None:
    """Each expert's saliency within 1e-6 (relative) of llm-compressor's float64 number (Keras's
    forward differs from PyTorch's in the last bits), the same experts kept, the bank's and
    the router's slices those of the experts kept, every count (bank, block, router, decoder,
    backbone) the new one, the host's views numbered from 0, and the saved preset loads back
    to the model in memory."""
    import keras_hub

    want = REFERENCE[name]
    model = _keras(qwen3)
    before = [(_np(b.expert_bank._expert_feedforward_gate_dense), _np(b.expert_bank._expert_feedforward_output_dense),
               _np(b._sparse_feedforward_gate_dense._kernel)) for b in _sparse_blocks(model)]
    out = tmp_path / "out"
    report = _run(model, want["recipe"], output_dir=out, **want["oneshot"])
    assert len(saliencies) == len(want["saliency"]) == 2
    for got, expected in zip(saliencies, want["saliency"], strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)
    assert report.experts == want["retained"]
    count = want["config"]["num_local_experts"]
    for (gate_up, down, router), block, kept in zip(before, _sparse_blocks(model), want["retained"].values(), strict=True):
        bank = block.expert_bank
        np.testing.assert_array_equal(_np(bank._expert_feedforward_gate_dense), gate_up[kept])
        np.testing.assert_array_equal(_np(bank._expert_feedforward_output_dense), down[kept])
        np.testing.assert_array_equal(_np(block._sparse_feedforward_gate_dense._kernel), router[:, kept])
        assert bank.num_experts == block.num_experts == block._sparse_feedforward_gate_dense.units == count
    assert model.backbone.num_experts == count
    assert all(layer.num_experts == count for layer in model.backbone.transformer_layers)
    experts = sorted({int(i.name.split(".")[5]) for i in _host(model).modules() if ".mlp.experts." in i.name})
    assert experts == list(range(count))
    assert json.loads((out / "config.json").read_text())["config"]["num_experts"] == count
    loaded = keras_hub.models.CausalLM.from_preset(str(out))
    tokens = np.array([_samples()[0]["input_ids"]])
    ids = {"token_ids": tokens, "padding_mask": np.ones_like(tokens, dtype=bool)}
    np.testing.assert_allclose(loaded.predict(ids, verbose=0), model.predict(ids, verbose=0), rtol=0, atol=1e-5)


def test_a_run_that_fails_after_removing_experts_leaves_the_keras_model_as_it_was(
        qwen3: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """REAP, then SparseGPT failing on its tenth layer: every variable (the banks' and routers'
    own objects), every count and the host's eight experts per layer are back; the same recipe
    then runs whole, SparseGPT pruning the experts kept under their new numbers."""
    from recipe_spec.oneshot import sparsegpt

    model = _keras(qwen3)
    before, banks = _state(model), [(b.expert_bank._expert_feedforward_gate_dense,
                                     b._sparse_feedforward_gate_dense._kernel) for b in _sparse_blocks(model)]
    prune, calls = sparsegpt.sparsegpt_prune, []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 10:
            raise RuntimeError("disk full")
        return prune(*args, **kwargs)

    monkeypatch.setattr(sparsegpt, "sparsegpt_prune", failing)
    recipe = (REFERENCE["reap_25"]["recipe"] + "sparse_stage:\n  sparse_modifiers:\n    SparseGPTModifier:\n"
              "      sparsity: 0.5\n      targets: [Linear]\n      ignore: [lm_head, 're:.*mlp.gate$']\n")
    with pytest.raises(RuntimeError, match="disk full"):
        _run(model, recipe)
    assert len(calls) == 10
    after = _state(model)
    assert after.keys() == before.keys() and all(np.array_equal(after[k], before[k]) for k in before)
    assert [(b.expert_bank._expert_feedforward_gate_dense, b._sparse_feedforward_gate_dense._kernel)
            for b in _sparse_blocks(model)] == banks
    assert model.backbone.num_experts == 8 and all(b.num_experts == 8 for b in _sparse_blocks(model))
    assert len([i for i in _host(model).modules() if i.name.startswith("model.layers.0.mlp.experts.")]) == 8 * 3
    monkeypatch.undo()  # the same recipe now runs whole: SparseGPT on the experts kept, under their new numbers
    assert _run(model, recipe).experts == REFERENCE["reap_25"]["retained"]
    host = _host(model)
    names = {i.name for i in host.modules()}
    assert "model.layers.0.mlp.experts.5.down_proj" in names and "model.layers.0.mlp.experts.6.down_proj" not in names
    for name in ("model.layers.0.mlp.experts.5.down_proj", "model.layers.1.mlp.experts.0.gate_proj"):
        assert np.mean(host.weight(name) == 0) == pytest.approx(0.5, abs=0.01), name


def test_reap_on_a_keras_hub_mixtral_keeps_the_experts_pytorch_keeps(tmp_path: pathlib.Path) -> None:
    """A tiny Mixtral (8 experts, top 2): the Keras backend and the PyTorch backend keep the
    same experts, and the pruned Keras model computes what the pruned PyTorch model computes."""
    torch.manual_seed(11)
    config = transformers.MixtralConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=8,
                                        num_experts_per_tok=2, rms_norm_eps=1e-6)
    transformers.MixtralForCausalLM(config).save_pretrained(tmp_path)
    recipe = "prune_stage:\n  prune_modifiers:\n    REAPPruningModifier:\n      sparsity: 0.5\n"
    samples = [{"input_ids": np.random.default_rng(n).integers(4, 96, n).tolist(), "attention_mask": [1] * n}
               for n in (20, 24, 17, 30, 22, 26)]
    torch.set_num_threads(1)
    model = _keras(tmp_path)
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=samples, progress=False)
    ours = recipe_spec.oneshot.last_report().experts
    reference = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).float().eval()
    recipe_spec.oneshot(model=reference, recipe=recipe, dataset=samples, progress=False)
    assert ours == recipe_spec.oneshot.last_report().experts and all(len(k) == 4 for k in ours.values())
    ids = np.array([samples[0]["input_ids"]])
    logits = model.predict({"token_ids": ids, "padding_mask": np.ones_like(ids, dtype=bool)}, verbose=0)
    with torch.no_grad():
        want = reference(torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(logits, want, rtol=0, atol=1e-4)


def test_keras_runs_expert_pruning_and_still_refuses_autoround() -> None:
    from recipe_spec.validation import validate

    assert not [d for d in validate(REFERENCE["reap_25"]["recipe"], backend="keras") if d.severity.name == "ERROR"]
    autoround = "quant_stage:\n  quant_modifiers:\n    AutoRoundModifier:\n      scheme: W4A16\n      targets: [Linear]\n"
    assert any("quantize:autoround" in d.message for d in validate(autoround, backend="keras"))
