"""AWQModifier's combined form (llm-compressor 0.5.2-0.10: AWQ takes the quantization arguments
and quantizes round to nearest itself) run by ``oneshot(compat=...)`` as llm-compressor 0.9 and
0.10 ran it, against those releases' own runs on the tiny Llama of tests/fixtures/smoothing
(``combined.json``, written by ``make_combined_reference.py``): the mappings in their order,
the scales chosen, every tensor the run changed (weights, ``weight_scale``,
``weight_zero_point``); the release's refusals; the refusal where no faithful run exists."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
import smoothing_reference as ref

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")

import recipe_spec  # noqa: E402
from recipe_spec.diagnostics.base import RecipeError  # noqa: E402
from recipe_spec.oneshot import last_report  # noqa: E402
from recipe_spec.oneshot.awq.search import grid  # noqa: E402

#: (release, case) pairs whose every mapping chooses the release's grid point.
EXACT = [("0.10", "w4_asym_g32_both_n10"), ("0.10", "w4_asym_g32_both_n10_ignore_v"),
         ("0.9", "w4_asym_g32_both_n10"), ("0.9", "w4_sym_g32")]


@functools.cache
def _combined() -> dict[str, Any]:
    return json.loads((ref.FIXTURES / "combined.json").read_text())


def _run(release: str, name: str) -> tuple[Any, Any]:
    model = ref.model()
    recipe_spec.oneshot(model=model, recipe=_combined()[release]["cases"][name]["recipe_yaml"],
                        dataset=ref.samples(), num_calibration_samples=8, shuffle_calibration_samples=False,
                        compat=f"llmcompressor=={release}")
    return model, last_report()


def _want(release: str, name: str) -> dict[str, Any]:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    return safetensors_torch.load_file(str(ref.FIXTURES / f"combined_{release.replace('.', '_')}_{name}.safetensors"))


def _relative(got: Any, want: Any) -> float:
    return float((got.double() - want.double()).abs().max() / max(float(want.double().abs().max()), 1e-30))


@pytest.mark.parametrize(("release", "name"), EXACT)
def test_the_combined_form_is_the_releases_run(release: str, name: str) -> None:
    model, report = _run(release, name)
    case = _combined()[release]["cases"][name]
    assert [(s.smooth, list(s.balance)) for s in report.smoothing] == [
        (e["smooth_layer"], e["balance_layers"]) for e in case["events"]]
    want, initial = _want(release, name), ref.tensors("initial")
    for s in report.smoothing:
        assert ref.relative_error(s.scales, want[f"awq.best_scales.{s.smooth}"]) < 1e-5, s.smooth
    for s, event in zip(report.smoothing, case["events"], strict=True):
        if event["best_error"] is not None:  # 0.10 logs its losses
            assert s.best_loss == pytest.approx(event["best_error"], rel=1e-2), s.smooth
    state = model.state_dict()
    changed = {k[len("final."):] for k in want if k.startswith("final.")}
    assert changed == set(case["changed"]) and set(state) - set(initial) <= changed
    for key, value in state.items():
        if key in changed:
            assert _relative(value, want[f"final.{key}"]) <= 1e-5, key
        else:
            assert torch.equal(value, initial[key]), key
    assert report.notes and f"llm-compressor {release}" in report.notes[0]
    assert [m for _, m in report.pipelines] == ["sequential", "datafree"]


def test_the_symmetric_grid_ties_only_in_near_ties() -> None:
    """Symmetric W4 puts each group's largest |w| exactly on a grid point, so a near tie
    between two ratios can fall the other way with the last bits of the activations
    (transformers 4.57 there, 5.x here; docs/oneshot.md): layer 0's mappings choose 0.10's
    ratio, 6 of 8 in all (layer 1's v_proj: 0.45 against 0.35, 0.8% apart in this run's
    losses; its up_proj: 0.25 against 0.2, 0.1% apart); every first loss (no scaling) is
    0.10's within 1e-4, every best loss within 3%."""
    _, report = _run("0.10", "w4_sym_g32")
    case = _combined()["0.10"]["cases"]["w4_sym_g32"]
    want = _want("0.10", "w4_sym_g32")
    same = [ref.relative_error(s.scales, want[f"awq.best_scales.{s.smooth}"]) < 1e-5 for s in report.smoothing]
    assert sum(same) >= 6 and all(same[:4])
    for s, event in zip(report.smoothing, case["events"], strict=True):
        assert s.initial_loss == pytest.approx(event["initial_error"], rel=1e-4), s.smooth
        assert s.best_loss == pytest.approx(event["best_error"], rel=3e-2), s.smooth


def test_in_0_9_ignore_takes_layers_out_of_the_mappings() -> None:
    """0.9 resolved the mappings without the ignored layers: ignoring v_proj leaves the q/k/v
    mapping incomplete and 0.9 stops ("Found a final incomplete set"); 0.10 keeps v_proj in the
    mappings and leaves it unquantized (the test above)."""
    case = _combined()["0.9"]["cases"]["w4_asym_g32_both_n10_ignore_v"]
    assert "incomplete set" in case["error"] and "v_proj" in case["error"]
    model = ref.model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="incomplete") as err:
        recipe_spec.oneshot(model=model, recipe=case["recipe_yaml"], dataset=ref.samples(),
                            num_calibration_samples=8, shuffle_calibration_samples=False,
                            compat="llmcompressor==0.9")
    assert "v_proj" in str(err.value)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_release_grids_by_hand() -> None:
    """``_compute_best_scale`` of 0.9/0.10: ratios i/n, ``both`` with n_grid // 2 of them."""
    assert grid(True, 4, to_one=False) == [(0.0, True), (0.25, True), (0.5, True), (0.75, True)]
    assert grid("both", 6, to_one=False) == [(0.0, False), (0.0, True), (1 / 3, False), (1 / 3, True),
                                            (2 / 3, False), (2 / 3, True)]


@pytest.mark.parametrize(("compat", "words"), [
    (None, "0.5.2-0.10's combined form"), ("llmcompressor==0.14", "0.5.2-0.10's combined form"),
    ("llmcompressor==0.8", "llm-compressor 0.8 ran it is not run"),
    ("llmcompressor==0.5", "llm-compressor 0.5 ran it is not run")])
def test_the_combined_form_is_refused_where_no_faithful_run_exists(compat: str | None, words: str) -> None:
    recipe = _combined()["0.10"]["cases"]["w4_sym_g32"]["recipe_yaml"]
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=ref.model(), recipe=recipe, dataset=ref.samples(), num_calibration_samples=8,
                            compat=compat)
    codes = {d.code for d in err.value.diagnostics}
    if compat is None or compat.endswith("0.14"):  # the release's own rules refuse it first
        assert codes == {"C001", "C004"}
    else:
        (d,) = err.value.diagnostics
        assert d.code == "B001" and words in d.message and "QuantizationModifier:" in d.hint
