"""AWQModifier's scale search against llm-compressor 0.14's own runs on a tiny Llama
(tests/fixtures/smoothing: AWQ then a W4 group-32 QuantizationModifier, symmetric with duo
scaling, and asymmetric with ``duo_scaling: both, n_grid: 10``): the scales it chose, its
losses and the final weights; the grid, the weight means and the resolution rules by hand.

The pass runs through :func:`recipe_spec.oneshot.pipeline.run_pipeline`: AWQ takes its weight
grids from the quantization modifier after it, and ``oneshot()`` does not run that
QuantizationModifier on this branch yet."""

from __future__ import annotations

import numpy as np
import pytest
import smoothing_reference as ref

from recipe_spec import load
from recipe_spec.diagnostics.base import RecipeError
from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec.oneshot.awq import awq_plan
from recipe_spec.oneshot.awq.search import candidate_scales, grid, layer_means
from recipe_spec.oneshot.host import ModuleInfo
from recipe_spec.oneshot.modifiers import OneShotModifier, resolve
from recipe_spec.oneshot.shared.smoothing import resolve_mappings
from recipe_spec.oneshot.shared.smoothing_args import SmoothingPlan, WeightScheme
from recipe_spec.quantization.args import QuantArgs

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

AWQ_CASES = ("awq_w4_sym_g32", "awq_w4_asym_g32_both_n10")
W4G32 = QuantArgs(4, "int", True, "group", 32)


def _plan(name: str) -> tuple[OneShotModifier, SmoothingPlan]:
    recipe = load(ref.cases()["cases"][name]["recipe_yaml"])
    entry = recipe.modifiers[0]
    errors: list = []
    plan = awq_plan(recipe, entry, errors)
    assert not errors and plan is not None
    return OneShotModifier(entry.type, "awq", entry, (), transform=plan), plan


@pytest.mark.parametrize("name", AWQ_CASES)
def test_awq_chooses_llm_compressors_scales(name: str) -> None:
    """Every mapping in llm-compressor's order with its parent; the scales chosen within 1e-5
    relative (so the same grid point); its first and best losses within 1e-2 relative (the
    attention kernel differs between the transformers releases); every final weight within
    1e-5 relative, the rest unchanged."""
    from recipe_spec_torch.oneshot import TorchCalibrationHost

    from recipe_spec.oneshot.calibration import prepare
    from recipe_spec.oneshot.pipeline import run_pipeline

    mod, plan = _plan(name)
    assert plan.schemes[0].weights == QuantArgs(4, "int", name.endswith("g32"), "group", 32)
    model = ref.model()
    with TorchCalibrationHost(model) as host:
        calibration = prepare(host, ref.samples(), num_calibration_samples=8, shuffle=False, batch_size=1)
        report = run_pipeline(host, [mod], calibration)
    assert calibration.order == ref.cases()["order_of_samples_fed"]
    want = ref.tensors(name)
    events = ref.cases()["cases"][name]["events"]
    assert [(s.smooth, list(s.balance)) for s in report.smoothing] == [
        (e["smooth_layer"], e["balance_layers"]) for e in events]
    for s, event in zip(report.smoothing, events, strict=True):
        assert ref.relative_error(s.scales, want[f"awq.best_scales.{s.smooth}"]) < 1e-5, s.smooth
        assert s.initial_loss == pytest.approx(event["initial_error"], rel=1e-2)
        assert s.best_loss == pytest.approx(event["best_error"], rel=1e-2)
        assert [tuple(g) for g in event["grid"]] == [(r, d) for r, d, _ in s.history]
    state, initial = model.state_dict(), ref.tensors("initial")
    for key, value in state.items():
        if f"final.{key}" in want:
            assert ref.relative_error(value, want[f"final.{key}"]) < 1e-5, key
        else:
            assert torch.equal(value, initial[key]), key


def test_grid_is_llm_compressors() -> None:
    """``_get_grid_search_params`` by hand: True puts the identity first."""
    assert grid(True, 5) == [(0.0, False), (0.0, True), (1 / 3, True), (2 / 3, True), (1.0, True)]
    assert grid(False, 3) == [(0.0, False), (0.5, False), (1.0, False)]
    assert grid("both", 5) == [(0.0, False), (0.0, True), (1.0, False), (1.0, True)]
    with pytest.raises(ValueError):
        grid("yes", 5)


def test_layer_means_and_candidate_scales_by_hand() -> None:
    """Rows normalised by their group's largest |w| (+1e-6), averaged over every row of every
    layer; the scales normalised by sqrt(max·min)."""
    w = np.array([[1.0, -2.0], [0.5, 4.0]], np.float32)
    channel = QuantArgs(4, strategy="channel")
    got = layer_means(NUMPY_OPS, [(w, channel), (w[:1], channel)])
    want = (np.abs(w) / (np.abs(w).max(1, keepdims=True) + 1e-6)).sum(0) + np.array([1.0, 2.0]) / (2 + 1e-6)
    np.testing.assert_allclose(got, want / 3, rtol=1e-7)  # the division is float32, as the weights
    assert got.dtype == np.float64
    x = np.array([4.0, 1.0], np.float32)
    s = candidate_scales(NUMPY_OPS, x, None, 0.5, False)
    np.testing.assert_allclose(s, np.array([2.0, 1.0]) / np.sqrt(2.0), rtol=1e-7)


def _info(name: str, shape: tuple[int, ...] = (), classes: tuple[str, ...] = ()) -> ModuleInfo:
    return ModuleInfo(name, classes or (("Linear", "Module") if shape else ("Module",)), bool(shape), shape)


def test_grouped_query_v_to_o_is_skipped_and_the_parent_is_the_common_ancestor() -> None:
    """llm-compressor skips v_proj -> o_proj where v_proj's outputs are not o_proj's inputs,
    and runs the lowest common ancestor of the balance layers that is not a ModuleList."""
    modules = [_info("", classes=("LlamaForCausalLM", "Module")), _info("layers", classes=("ModuleList", "Module")),
               _info("layers.0"), _info("layers.0.attn"), _info("layers.0.attn.q_proj", (64, 64)),
               _info("layers.0.attn.k_proj", (32, 64)), _info("layers.0.attn.v_proj", (32, 64)),
               _info("layers.0.attn.o_proj", (64, 64)), _info("layers.0.input_layernorm"),
               _info("layers.0.post_attention_layernorm"), _info("layers.0.mlp"),
               _info("layers.0.mlp.gate_proj", (128, 64)), _info("layers.0.mlp.up_proj", (128, 64)),
               _info("layers.0.mlp.down_proj", (64, 128))]
    plan = SmoothingPlan("awq", schemes=(WeightScheme(("Linear",), (), W4G32),))
    got = [(r.smooth, r.parent, r.observed) for r in resolve_mappings(modules, plan, "AWQModifier")]
    assert got == [("layers.0.input_layernorm", "layers.0.attn", "layers.0.attn.q_proj"),
                   ("layers.0.post_attention_layernorm", "layers.0.mlp", "layers.0.mlp.gate_proj"),
                   ("layers.0.mlp.up_proj", "layers.0.mlp.down_proj", "layers.0.mlp.down_proj")]
    unquantized = SmoothingPlan("awq", schemes=(WeightScheme(("Linear",), ("re:.*mlp",), W4G32),))
    assert len(resolve_mappings(modules, unquantized, "AWQModifier")) == 1
    tensor = SmoothingPlan("awq", schemes=(WeightScheme(("Linear",), (), QuantArgs(8)),))
    with pytest.raises(ValueError, match="duo_scaling"):
        resolve_mappings(modules, tensor, "AWQModifier")


def _awq(body: str, after: str = "") -> object:
    return load("quant_stage:\n  quant_modifiers:\n    AWQModifier:\n" + body + after)


def test_awq_reads_the_weight_grid_of_the_quantization_modifier_after_it() -> None:
    recipe = _awq("      n_grid: 8\n", "    GPTQModifier:\n      scheme: W4A16_ASYM\n      targets: [Linear]\n"
                  "      ignore: [lm_head]\n")
    errors: list = []
    plan = awq_plan(recipe, recipe.modifiers[0], errors)
    assert not errors and plan.n_grid == 8 and plan.duo_scaling is True
    assert plan.schemes == (WeightScheme(("Linear",), ("lm_head",), QuantArgs(4, "int", False, "group", 128)),)


def test_awq_refusals_are_located() -> None:
    caps = frozenset({"oneshot", "transform:awq"})
    with pytest.raises(RecipeError) as err:
        resolve(_awq("      duo_scaling: sometimes\n      n_grid: 1\n      offload_device: cuda:1\n"), caps, "torch")
    assert [(d.code, d.line) for d in err.value.diagnostics] == [("B001", 4), ("B001", 5), ("B001", 6)]
    with pytest.raises(RecipeError) as err:
        resolve(_awq("      n_grid: 8\n"), frozenset({"oneshot", "transform:smoothquant"}), "other")
    assert "transform:awq" in err.value.diagnostics[0].message


@pytest.mark.parametrize("duo, n_grid, ok", [(True, 2, False), (True, 3, True), (False, 1, False), (False, 2, True),
                                             ("both", 3, False), ("both", 4, True)])
def test_validate_and_oneshot_agree_on_the_smallest_grid(duo: object, n_grid: int, ok: bool) -> None:
    """llm-compressor 0.11+ divides by ``n_grid - 2`` with duo scaling, ``n_grid - 1`` without
    and ``n_grid // 2 - 1`` for both (``_get_grid_search_params``): below that, ``validate``
    (the newest release) reports M005 at ``n_grid`` and ``oneshot`` refuses it, both from
    ``quantization.awq.smallest_grid``; at it, both let it run."""
    from recipe_spec.validation import validate_recipe

    text = "'both'" if duo == "both" else str(duo).lower()
    recipe = _awq(f"      duo_scaling: {text}\n      n_grid: {n_grid}\n")
    found = [d for d in validate_recipe(recipe, "torch", compat="llmcompressor") if d.code == "M005"]
    assert bool(found) is not ok
    if found:
        assert found[0].line == 5 and f"n_grid: {3 if duo is True else 2 if duo is False else 4} or more" in found[0].hint
    caps = frozenset({"oneshot", "transform:awq"})
    if ok:
        assert resolve(recipe, caps, "torch")
    else:
        with pytest.raises(RecipeError, match="n_grid"):
            resolve(recipe, caps, "torch")
