"""REAP expert pruning (``REAPPruningModifier``) against llm-compressor 0.14's own runs
(``tests/fixtures/reap/reference.json``, made by ``make_reference.py`` there on the tiny Qwen3-MoE
of ``moe/21_qwen3moe_gptq_w4a16``): each layer's saliency per expert, the experts kept, the saved
folder's every tensor (by SHA-256) and its config's expert count; against a plain computation of
the saliency formula and a model pruned by hand; and the refusals, before anything changes.

As in ``test_oneshot_moe.py``, the Qwen3-MoE runs compare with the causal mask removed, as
llm-compressor's traced pipeline calibrated that model; its DeepSeek-V3 run (a group-limited
router) kept the mask, and compares with it.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")
from safetensors.torch import load_file  # noqa: E402
from testdata import MOE  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec.diagnostics.base import RecipeError  # noqa: E402
from recipe_spec.oneshot.reap.saliency import ExpertLayer, Saliency, drop_counts, kept  # noqa: E402

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "reap"
REFERENCE = json.loads((FIXTURES / "reference.json").read_text())["runs"]
CASE = json.loads((MOE / "21_qwen3moe_gptq_w4a16" / "case.json").read_text())


def _model(dtype: str = "float32", folder: pathlib.Path | None = None) -> Any:
    """The case's model from its seed (``deepseek``: the generator's DeepSeek-V3, float32); with
    a ``folder``, saved there in its dtype and read back, as the reference's runs made it
    (transformers then keeps the rotary frequencies in float32, and fills DeepSeek-V3's
    non-persistent buffers anew)."""
    if dtype == "deepseek":
        import make_reference as made

        torch.manual_seed(made.DEEPSEEK_SEED)
        model = transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(**made.DEEPSEEK)).float().eval()
        dtype = "float32"
    else:
        config = {k: v for k, v in CASE["model_config"].items()
                  if k not in ("architectures", "transformers_version", "model_type")}
        torch.manual_seed(CASE["seeds"]["model"])
        model = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**config)).float().eval()
    if folder is None:
        assert dtype == "float32"
        return model
    model.to(getattr(torch, dtype)).save_pretrained(folder)
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()


def _samples() -> list[dict[str, list[int]]]:
    return [{"input_ids": t, "attention_mask": [1] * len(t)} for t in CASE["calibration"]["token_ids"]]


def _run(model: Any, recipe: str, **kwargs: Any) -> Any:
    torch.set_num_threads(1)
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples(), num_calibration_samples=16,
                        shuffle_calibration_samples=False, progress=False, **kwargs)
    return recipe_spec.oneshot.last_report()


def _digest(t: Any) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


@pytest.fixture()
def unmasked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen3-MoE's attention without the causal mask, as llm-compressor's traced run computed it
    here (its DeepSeek-V3 run kept the mask: that one compares with the mask on)."""
    import transformers.models.qwen3_moe.modeling_qwen3_moe as qwen3_moe

    monkeypatch.setattr(qwen3_moe, "create_causal_mask", lambda *args, **kwargs: None)
    monkeypatch.syspath_prepend(str(FIXTURES))


@pytest.mark.parametrize("name", ["reap_25", "reap_50_routed", "reap_40_bf16", "reap_25_gptq", "reap_50_deepseek_groups"])
def test_reap_saves_llmcompressors_folder_byte_for_byte(name: str, unmasked: None, saliencies: list[list[float]],
                                                        tmp_path: pathlib.Path) -> None:
    """The saliency of every expert (the same float64 bits), the experts kept, and every saved
    tensor (experts renumbered, the router's rows, GPTQ's packed weights after it) equal
    llm-compressor's; the config says the new count and transformers loads the folder back to
    the model pruned in memory."""
    want = REFERENCE[name]
    model = _model(want["dtype"], tmp_path / "model")
    out = tmp_path / "out"
    report = _run(model, want["recipe"], output_dir=out, **want["oneshot"])
    assert saliencies == want["saliency"]
    assert report.experts == want["retained"]
    saved = load_file(str(out / "model.safetensors"))
    ours = {k: [list(v.shape), str(v.dtype).removeprefix("torch."), _digest(v)] for k, v in saved.items()}
    assert ours == want["tensors"]
    config = json.loads((out / "config.json").read_text())
    key = "n_routed_experts" if want["dtype"] == "deepseek" else "num_local_experts"
    count = 8 - int(8 * float(want["recipe"].split("sparsity: ")[1].split()[0]))
    assert config[key] == count
    # llm-compressor 0.14 patches only num_experts / num_local_experts / moe_num_experts into the
    # saved config.json: DeepSeek-V3's n_routed_experts stays 8, and its folder does not load
    assert want["config"][key] == (8 if want["dtype"] == "deepseek" else count)
    if want["quantization_config"] is None:  # a dense folder: transformers reads it back as it is in memory
        dtype = torch.bfloat16 if want["dtype"] == "bfloat16" else torch.float32
        loaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=dtype).eval()
        ids = torch.tensor([_samples()[0]["input_ids"]])
        with torch.no_grad():
            torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=1e-5)


def test_the_pruned_model_computes_what_a_model_pruned_by_hand_does() -> None:
    """The model REAP leaves equals a Qwen3-MoE built with the kept experts' slices of the fused
    weights and the router's kept rows (the causal mask on)."""
    model = _model()
    fused = {k: v.clone() for k, v in model.state_dict().items()}
    report = _run(model, REFERENCE["reap_25"]["recipe"])
    config = transformers.Qwen3MoeConfig(**{**{k: v for k, v in CASE["model_config"].items()
                                               if k not in ("architectures", "transformers_version", "model_type")},
                                            "num_local_experts": 6})
    by_hand = transformers.Qwen3MoeForCausalLM(config).float().eval()
    state = dict(fused)
    for layer, keep in report.experts.items():
        rows = torch.tensor(keep)
        for key in ("experts.gate_up_proj", "experts.down_proj", "gate.weight"):
            state[f"{layer}.{key}"] = fused[f"{layer}.{key}"][rows]
    by_hand.load_state_dict(state)
    ids = torch.tensor([_samples()[3]["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, by_hand(ids).logits, rtol=0, atol=1e-5)
    assert model.config.num_experts == 6 and model.model.layers[1].mlp.gate.weight.shape == (6, 128)


def test_the_saliency_is_the_router_weighted_mean_output_norm() -> None:
    """:class:`Saliency` against the formula computed plainly, token by token: each expert's
    mean over its routed tokens of ``g_j · ||f_j||``; fed every token's norms or only the routed
    tokens' (in the block's slot-by-slot order), the same values."""
    rng = np.random.default_rng(0)
    tokens, experts, top_k = 40, 5, 2
    logits = rng.normal(size=(tokens, experts))
    indices = np.argsort(-logits, axis=1)[:, :top_k]
    weights = rng.uniform(0.1, 1.0, size=(tokens, top_k)).astype(np.float32)
    outputs = rng.normal(size=(experts, tokens, 8)).astype(np.float32)
    sums, counts = np.zeros(experts), np.zeros(experts)
    for t in range(tokens):
        for s in range(top_k):
            j = indices[t, s]
            sums[j] += float(weights[t, s]) * float(np.sqrt(np.sum(outputs[j, t].astype(np.float64) ** 2)))
            counts[j] += 1
    plain = sums / np.maximum(counts, 1)
    every = Saliency(experts)
    every.add(indices, weights, [np.linalg.norm(outputs[j], axis=-1) for j in range(experts)], every_token=True)
    routed = Saliency(experts)
    routed.add(indices, weights, [np.linalg.norm(outputs[j][[t for s in range(top_k) for t in range(tokens)
                                                            if indices[t, s] == j]], axis=-1)
                                  for j in range(experts)], every_token=False)
    np.testing.assert_allclose(every.mean(), plain, rtol=1e-6)
    np.testing.assert_allclose(routed.mean(), plain, rtol=1e-6)
    assert every.seen == routed.seen == tokens * top_k
    with pytest.raises(RuntimeError, match="expert 0 reported 1 output norms"):
        routed.add(indices, weights, [np.ones(1)] * experts, every_token=False)


def test_which_experts_go() -> None:
    """The lowest ``int(count · sparsity)`` go (a group-limited router: the lowest of each group),
    and what cannot be pruned is said with what to write."""
    saliency = np.array([0.5, 0.1, 0.9, 0.3, 0.2, 0.8, 0.7, 0.4])
    assert kept(saliency, 3) == [0, 2, 5, 6, 7]
    assert kept(saliency, 2, per_group=1, n_group=2) == [0, 2, 3, 5, 6, 7]  # groups [0..3], [4..7]
    plain = ExpertLayer("m.layers.0.mlp", "m.layers.0.mlp.experts", 8, 2)
    assert drop_counts(plain, 0.25) == (2, None) and drop_counts(plain, 0.4) == (3, None)
    grouped = ExpertLayer("m", "m.experts", 8, 2, n_group=2, topk_group=1)
    assert drop_counts(grouped, 0.4) == (4, 2)  # round(3 / 2) = 2 of each group of 4
    with pytest.raises(ValueError, match="drops no expert of 8.*at least 0.125"):
        drop_counts(plain, 0.1)
    with pytest.raises(ValueError, match="leaves 1 experts.*top_k=2"):
        drop_counts(plain, 0.9)
    with pytest.raises(ValueError, match="drops no expert of each group"):
        drop_counts(grouped, 0.125)
    with pytest.raises(ValueError, match="leaves 1 expert of each group of 2.*two best"):
        drop_counts(ExpertLayer("m", "m.experts", 8, 2, n_group=4, topk_group=4), 0.5)


def _refused(model: Any, recipe: str, match: str, **kwargs: Any) -> RecipeError:
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RecipeError, match=match) as caught:
        _run(model, recipe, **kwargs)
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    return caught.value


def test_ignore_that_leaves_some_layers_whole_is_refused_where_llmcompressor_saves_an_unloadable_folder() -> None:
    """llm-compressor 0.14 pruned layer 0 only and wrote 6 experts into the config, with layer 1's
    router still 8 rows (transformers refuses the folder: a size mismatch); recipe-spec refuses
    the recipe, located at ``ignore``, before anything changes."""
    want = REFERENCE["reap_25_ignore_layer1"]
    assert list(want["retained"]) == ["model.layers.0.mlp"] and want["config"]["num_local_experts"] == 6
    assert want["tensors"]["model.layers.1.mlp.gate.weight"][0] == [8, 128]
    error = _refused(_model(), want["recipe"], "leaves model.layers.1.mlp with 8 experts")
    assert "ignore" in str(error) and error.diagnostics[0].line == 5


@pytest.mark.parametrize(("sparsity", "match"), [(0.1, "drops no expert of 8"), (0.9, "top_k=2: lower the sparsity")])
def test_a_sparsity_the_layers_cannot_take_is_refused_located(sparsity: float, match: str) -> None:
    error = _refused(_model(), f"s_stage:\n  s_modifiers:\n    REAPPruningModifier:\n      sparsity: {sparsity}\n",
                     match)
    assert error.diagnostics[0].line == 4


def test_a_model_without_experts_is_refused() -> None:
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)).eval()
    _refused(llama, REFERENCE["reap_25"]["recipe"], "does not say its expert count|no mixture-of-experts block")


def test_a_report_path_that_cannot_be_written_is_refused_before_the_run(tmp_path: pathlib.Path) -> None:
    (tmp_path / "file").write_text("")
    for bad in (tmp_path / "file" / "kept.json", tmp_path):
        recipe = REFERENCE["reap_25"]["recipe"] + f"      report_path: '{bad}{'' if bad.suffix else '/x.json'}'\n"
        if bad == tmp_path:  # a folder named like the report
            (tmp_path / "x.json").mkdir()
        error = _refused(_model(), recipe, "report_path")
        assert error.diagnostics[0].line == 5


def test_report_path_lists_the_experts_each_layer_kept(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "deep" / "kept.json"
    report = _run(_model(), REFERENCE["reap_25"]["recipe"] + f"      report_path: {path}\n")
    assert json.loads(path.read_text()) == report.experts and len(report.experts) == 2


def _failing_gptq(monkeypatch: pytest.MonkeyPatch, at: int) -> list[int]:
    from recipe_spec.oneshot import gptq

    solve, calls = gptq.gptq_quantize, []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == at:
            raise RuntimeError("disk full")
        return solve(*args, **kwargs)

    monkeypatch.setattr(gptq, "gptq_quantize", failing)
    return calls


def test_a_run_that_fails_after_removing_experts_leaves_the_model_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """REAP, then GPTQ failing on its tenth layer: every tensor, the fused experts module itself
    and the config's count are back."""
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    experts = model.model.layers[1].mlp.experts
    calls = _failing_gptq(monkeypatch, 10)
    with pytest.raises(RuntimeError, match="disk full"):
        _run(model, REFERENCE["reap_25_gptq"]["recipe"])
    assert len(calls) == 10 and model.model.layers[1].mlp.experts is experts
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert model.config.num_experts == 8 and model.model.layers[0].mlp.gate.weight.shape == (8, 128)
    assert not any(hasattr(m, "weight_scale") for m in model.modules())


def test_a_failed_run_puts_experts_back_under_their_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a model a finished run left with its experts split (6 of 8 kept), REAP keeps 3 of each
    layer's 6 and GPTQ then fails on its 13th layer, layer 0's expert 2 of the 3 (a higher number
    before: GPTQ has just changed its gate and up projections): each kept module goes back to
    the expert it was, every tensor as before the second run."""
    model = _model()
    _run(model, REFERENCE["reap_25"]["recipe"])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert len([k for k in before if k.startswith("model.layers.0.mlp.experts.")]) == 6 * 3
    calls = _failing_gptq(monkeypatch, 13)
    recipe = REFERENCE["reap_25_gptq"]["recipe"].replace("sparsity: 0.25", "sparsity: 0.5")
    with pytest.raises(RuntimeError, match="disk full"):
        _run(model, recipe)
    assert len(calls) == 13
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert model.config.num_experts == 6 and model.model.layers[0].mlp.gate.weight.shape == (6, 128)


def test_validate_reads_ignore_as_the_regular_expressions_reap_searches() -> None:
    """``layers\\.1\\.mlp$`` is a pattern searched in the name (no P008 for a missing ``re:``);
    one that does not compile is P005 at its line."""
    from recipe_spec.validation import validate

    assert [d.code for d in validate(REFERENCE["reap_25_ignore_layer1"]["recipe"])] == []
    bad = validate("s_stage:\n  s_modifiers:\n    REAPPruningModifier:\n      sparsity: 0.25\n"
                   "      ignore: ['layers.(1']\n")
    assert [(d.code, d.line) for d in bad] == [("P005", 5)]


@pytest.mark.parametrize(("args", "said"), [
    ("      sparsity: 0.25\n", ""),
    ("      sparsity: 0.9\n", "leaves 1 experts a token can reach in model.layers.0.mlp, fewer than the router's top_k=2"),
    ("      sparsity: 0.1\n", "drops no expert of 8"),
    ("      sparsity: 0.25\n      ignore: ['layers\\.1\\.mlp$']\n", "leaves model.layers.1.mlp with 8 experts"),
])
def test_lint_says_what_oneshot_would_refuse_from_the_checkpoint(args: str, said: str, tmp_path: pathlib.Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """P015 from the checkpoint's headers (its fused experts, counted as the run splits them) and
    its config.json, at the modifier's line; the estimate counts its MoE layers."""
    from recipe_spec.cli import main

    _model().save_pretrained(tmp_path / "model")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("prune_stage:\n  prune_modifiers:\n    REAPPruningModifier:\n" + args)
    main(["lint", str(recipe), "--model", str(tmp_path / "model"), "--format", "json"])
    found = json.loads(capsys.readouterr().out)["files"][0]["diagnostics"]
    assert [(d["code"], d["line"]) for d in found] == ([("P015", 3)] if said else [])
    assert said in " ".join(d["message"] for d in found)
    main(["lint", str(recipe), "--model", str(tmp_path / "model")])
    assert ":3): 2 mixture-of-experts layers, sequential pipeline" in capsys.readouterr().out


def test_a_checkpoint_folder_is_loaded_whole_and_pruned(tmp_path: pathlib.Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``oneshot(model="folder")`` and ``recipe-spec oneshot --model`` load a checkpoint whole
    for expert pruning (the blocks' modules change), where they stream other recipes block by
    block: the experts kept are the in-memory run's, the folder says 6 experts."""
    from recipe_spec.cli import main

    recipe = REFERENCE["reap_25"]["recipe"]
    want = _run(_model(), recipe).experts
    _model().save_pretrained(tmp_path / "model")
    torch.set_num_threads(1)
    recipe_spec.oneshot(model=str(tmp_path / "model"), recipe=recipe, dataset=_samples(), num_calibration_samples=16,
                        shuffle_calibration_samples=False, progress=False, output_dir=tmp_path / "api")
    assert recipe_spec.oneshot.last_report().experts == want
    (tmp_path / "r.yaml").write_text(recipe)
    (tmp_path / "ids.jsonl").write_text("".join(json.dumps({"input_ids": s["input_ids"]}) + "\n" for s in _samples()))
    assert main(["oneshot", str(tmp_path / "r.yaml"), "--model", str(tmp_path / "model"), "--calibration",
                 str(tmp_path / "ids.jsonl"), "--output", str(tmp_path / "cli")]) == 0
    assert "the model loaded whole (expert pruning" in capsys.readouterr().out
    for out in ("api", "cli"):
        assert json.loads((tmp_path / out / "config.json").read_text())["num_local_experts"] == 6
        assert load_file(str(tmp_path / out / "model.safetensors"))["model.layers.1.mlp.gate.weight"].shape == (6, 128)
