"""SmoothQuantModifier in ``recipe_spec.oneshot`` against llm-compressor 0.14's own runs on a
tiny Llama (tests/fixtures/smoothing: activation ranges, scales and final weights), the
mapping tables and resolution against compressed-tensors' rules, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
import smoothing_reference as ref

from recipe_spec import load
from recipe_spec.diagnostics.base import RecipeError
from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec.oneshot.modifiers import resolve
from recipe_spec.oneshot.shared.mapping_match import SmoothMapping, match_sets, unresolved_mappings
from recipe_spec.oneshot.shared.mappings import default_mappings
from recipe_spec.oneshot.smoothquant.solve import MINIMUM_SMOOTHING_SCALE, smoothing_scales

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SQ_CASES = ("sq_default", "sq_mlp_alpha08", "sq_log_equalization")
#: A tiny Llama's module names (two decoder layers).
LLAMA = ["", "model", "model.embed_tokens", "model.layers"] + [
    f"model.layers.{i}.{leaf}" for i in range(2) for leaf in (
        "", "self_attn", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "mlp.act_fn", "input_layernorm",
        "post_attention_layernorm")] + ["model.norm", "lm_head"]
LLAMA = [n.rstrip(".") for n in LLAMA]


def _run(name: str) -> tuple[torch.nn.Module, object]:
    import recipe_spec
    from recipe_spec.oneshot import last_report

    model = ref.model()
    recipe_spec.oneshot(model=model, recipe=ref.cases()["cases"][name]["recipe_yaml"], dataset=ref.samples(),
                        num_calibration_samples=8, shuffle_calibration_samples=False, batch_size=1)
    return model, last_report()


@pytest.mark.parametrize("name", SQ_CASES)
def test_oneshot_smooths_as_llm_compressor(name: str) -> None:
    """The activation ranges, the scales and every changed weight within 1e-5 relative of
    llm-compressor's; the mappings applied in its order; nothing else changed."""
    want = ref.tensors(name)
    model, report = _run(name)
    events = [e for e in ref.cases()["cases"][name]["events"] if e["event"] == "smoothquant.smooth"]
    assert [(s.smooth, list(s.balance)) for s in report.smoothing] == [
        (e["smooth_layer"], e["balance_layers"]) for e in events]
    assert report.layers == [] and report.pipelines == [("SmoothQuantModifier", "sequential")]
    for s in report.smoothing:
        assert ref.relative_error(s.activation_range, want[f"smoothquant.activation_range.{s.smooth}"]) < 1e-5
        floored = want[f"smoothquant.scales_before_floor.{s.smooth}"].clamp(min=MINIMUM_SMOOTHING_SCALE)
        assert ref.relative_error(s.scales, floored) < 1e-5, s.smooth
    state, initial = model.state_dict(), ref.tensors("initial")
    changed = {k[len("final."):] for k in want if k.startswith("final.")}
    for key, value in state.items():
        if key in changed:
            assert ref.relative_error(value, want[f"final.{key}"]) < 1e-5, key
        else:
            assert torch.equal(value, initial[key]), key


@pytest.mark.parametrize("ops", [NUMPY_OPS, None], ids=["numpy", "torch"])
def test_scales_formula_on_llm_compressor_statistics(ops: object) -> None:
    """Layer 0's scales from llm-compressor's own activation ranges and the initial weights
    (no hooks involved): ``2·max|W|``, ``range^a / w^(1-a)``, the floor."""
    if ops is None:
        from recipe_spec_torch.masks import TORCH_OPS as ops
    convert = (lambda t: t.numpy()) if ops is NUMPY_OPS else (lambda t: t)
    initial = ref.tensors("initial")
    for name, alpha, algorithm in (("sq_default", 0.5, "smoothquant"), ("sq_mlp_alpha08", 0.8, "smoothquant"),
                                   ("sq_log_equalization", 0.5, "log_equalization")):
        want = ref.tensors(name)
        event = next(e for e in ref.cases()["cases"][name]["events"])
        norm = event["smooth_layer"]
        weights = [convert(initial[f"{b}.weight"]) for b in event["balance_layers"]]
        before, _ = smoothing_scales(ops, convert(want[f"smoothquant.activation_range.{norm}"]), weights, alpha,
                                     algorithm)
        expected = want[f"smoothquant.scales_before_floor.{norm}"].numpy()
        np.testing.assert_allclose(np.asarray(before), expected, rtol=1e-6)


def test_default_mappings_follow_llm_compressor_tables() -> None:
    """Hand-copied from llmcompressor 0.14 (smoothquant/utils.py, awq/mappings.py)."""
    llama = default_mappings("smoothquant", "LlamaForCausalLM")
    assert [(m.balance, m.smooth) for m in llama] == [
        (("re:.*q_proj", "re:.*k_proj", "re:.*v_proj"), "re:.*input_layernorm"),
        (("re:.*gate_proj", "re:.*up_proj"), "re:.*post_attention_layernorm")]
    assert [m.smooth for m in default_mappings("smoothquant", "MixtralForCausalLM")] == ["re:.*input_layernorm"]
    assert default_mappings("smoothquant", "UnknownForCausalLM") == llama
    assert [m.smooth for m in default_mappings("awq", "LlamaForCausalLM")] == [
        "re:.*input_layernorm$", "re:.*v_proj$", "re:.*post_attention_layernorm$", "re:.*up_proj$"]
    with pytest.raises(ValueError, match="write `mappings:`"):
        default_mappings("awq", "Qwen3NextForCausalLM")


def test_match_sets_groups_by_decoder_layer() -> None:
    named = [(n, ("Linear",) if n.endswith("proj") else ()) for n in LLAMA]
    groups = list(match_sets(named, ["re:.*q_proj", "re:.*k_proj", "re:.*input_layernorm"]))
    assert groups == [[[f"model.layers.{i}.self_attn.q_proj"], [f"model.layers.{i}.self_attn.k_proj"],
                       [f"model.layers.{i}.input_layernorm"]] for i in range(2)]
    with pytest.raises(ValueError, match="several patterns"):
        list(match_sets(named, ["re:.*proj", "re:.*q_proj"]))
    # a class-name target matches too; the last group must be complete
    with pytest.raises(ValueError, match="incomplete"):
        list(match_sets(named + [("extra.q_proj", ())], ["re:.*q_proj", "re:.*input_layernorm"]))


def test_unresolved_mappings_names_the_entries_matching_nothing() -> None:
    mappings = [SmoothMapping("re:.*input_layernorm", ("re:.*q_proj",)),
                SmoothMapping("re:.*final_layer_norm", ("re:.*fc1",)),
                SmoothMapping("re:.*post_attention_layernorm", ("re:.*gate_proj", "re:.*w3"))]
    out = unresolved_mappings(LLAMA, mappings)
    assert [(u.index, u.missing) for u in out] == [(1, ("re:.*final_layer_norm", "re:.*fc1")), (2, ("re:.*w3",))]


def _recipe(body: str) -> object:
    return load("smooth_stage:\n  smooth_modifiers:\n    SmoothQuantModifier:\n" + body)


def test_refused_arguments_are_located() -> None:
    caps = frozenset({"oneshot", "transform:smoothquant"})
    with pytest.raises(RecipeError) as err:
        resolve(_recipe("      smoothing_strength: 0.5\n      num_calibration_steps: 4\n"), caps, "torch")
    (diag,) = err.value.diagnostics
    assert diag.code == "B001" and diag.line == 5 and "num_calibration_steps" in diag.message
    with pytest.raises(RecipeError) as err:
        resolve(_recipe("      mappings: [[\"re:.*q_proj\"]]\n"), caps, "torch")
    assert "mappings[0]" in err.value.diagnostics[0].message
    plan = resolve(_recipe("      smoothing_strength: 0.7\n      ignore: [lm_head]\n"), caps, "torch")[0].transform
    assert (plan.alpha, plan.algorithm, plan.mappings, plan.ignore) == (0.7, "smoothquant", None, ("lm_head",))


def test_a_backend_without_the_transform_refuses_smoothquant_through_its_capabilities() -> None:
    caps = frozenset({"oneshot", "scores:sparsegpt"})
    with pytest.raises(RecipeError) as err:
        resolve(_recipe("      smoothing_strength: 0.5\n"), caps, "other")
    (diag,) = err.value.diagnostics
    assert diag.code == "B001" and "transform:smoothquant" in diag.message and diag.line == 3


def test_a_mapping_whose_layers_are_all_ignored_is_skipped() -> None:
    """llm-compressor skips a mapping only when the smooth layer and every balance layer are
    ignored; ignoring the norm alone still smooths it."""
    from recipe_spec_torch.oneshot import TorchCalibrationHost

    from recipe_spec.oneshot.shared.smoothing import resolve_mappings
    from recipe_spec.oneshot.shared.smoothing_args import SmoothingPlan

    with TorchCalibrationHost(ref.model()) as host:
        modules = host.modules()
    plan = SmoothingPlan("smoothquant", ignore=("re:.*layers.0.input_layernorm", "re:.*layers.0.self_attn"))
    got = [r.smooth for r in resolve_mappings(modules, plan, "SmoothQuantModifier")]
    assert got == ["model.layers.1.input_layernorm", "model.layers.0.post_attention_layernorm",
                   "model.layers.1.post_attention_layernorm"]
    plan = SmoothingPlan("smoothquant", ignore=("model.layers.1.post_attention_layernorm",))
    assert len(resolve_mappings(modules, plan, "SmoothQuantModifier")) == 4


def test_unresolved_for_checks_the_architectures_defaults() -> None:
    """What the lint calls: without ``mappings`` the architecture's defaults are checked."""
    from recipe_spec.oneshot.shared.smoothing import unresolved_for

    caps = frozenset({"oneshot", "transform:smoothquant"})
    mod = resolve(_recipe("      smoothing_strength: 0.5\n"), caps, "torch")[0]
    assert unresolved_for(mod, LLAMA, "LlamaForCausalLM") == []
    whisper = unresolved_for(mod, LLAMA, "WhisperForConditionalGeneration")
    assert [u.index for u in whisper] == [0, 1]
