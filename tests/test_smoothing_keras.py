"""SmoothQuant and AWQ on Keras 3: a keras-hub Llama loaded from the Hugging Face checkpoint of
tests/fixtures/smoothing (llm-compressor 0.14's own runs on the same tiny Llama, fed the same
token ids in the same order) and a plain functional model checked against hand formulas and
its own outputs before smoothing.

The file runs on the process's Keras backend (TensorFlow in the suite); ``test_keras_backends.py``
runs it again on JAX and torch.

AWQ's symmetric int4 case is compared more loosely than the asymmetric one: compressed-tensors'
symmetric grid puts each group's largest ``|w|`` exactly on ``±7.5`` steps, a rounding tie, so
which grid step a negative maximum takes depends on the last bit of the scaled weight. The
Keras model's activations differ from transformers' in the last bits (another norm and
attention implementation), so some candidates' losses move by a few percent and a near tie
between two grid points can fall the other way (see docs/oneshot.md).
"""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

keras = pytest.importorskip("keras")

import smoothing_reference as ref  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec import load  # noqa: E402
from recipe_spec.oneshot import last_report  # noqa: E402

try:
    import keras_hub
except ImportError:  # the keras-hub extra: pip install --no-deps keras-hub sentencepiece
    keras_hub = None
needs_hub = pytest.mark.skipif(keras_hub is None, reason="needs keras-hub")

SQ_CASES = ("sq_default", "sq_mlp_alpha08", "sq_log_equalization")
#: How far the activations' last bits move one AWQ candidate's loss on the symmetric int4 grid:
#: a scale vector a few ulps off flips the rounding of the groups' ±7.5-step maxima (the module
#: docstring). Measured here: our loss at llm-compressor's own choice 4.2% from our best at one
#: mapping of eight, under 1% at the others.
TIE_NOISE = 5e-2


def _host(model: object) -> object:
    from recipe_spec_keras.oneshot import KerasCalibrationHost

    return KerasCalibrationHost(model)


def _rel(got: np.ndarray, want: object) -> float:
    w = np.asarray(want.numpy() if hasattr(want, "numpy") else want, dtype=np.float64)
    return float(np.abs(np.asarray(got, np.float64) - w).max() / np.abs(w).max())


# -- a keras-hub Llama from the fixture's checkpoint ---------------------------------------------
@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The fixture model's initial weights and config as a Hugging Face checkpoint folder."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    out = tmp_path_factory.mktemp("smoothing_llama")
    config = transformers.LlamaConfig(**ref.cases()["model_config"])
    config.architectures = ["LlamaForCausalLM"]
    config.save_pretrained(str(out))
    shutil.copy(ref.FIXTURES / "initial.safetensors", out / "model.safetensors")
    return out


def _llama(folder: pathlib.Path) -> object:
    from recipe_spec_keras.hub import load_causal_lm

    return load_causal_lm(folder)


def _weights_agree(host: object, want: dict, limit: float) -> dict[str, float]:
    """Every smoothed tensor llm-compressor wrote (``final.<module>.weight``) against ours;
    every other weight unchanged from the initial checkpoint."""
    initial = ref.tensors("initial")
    errors = {}
    for info in host.modules():
        key = f"{info.name}.weight"
        if key not in initial or not (info.prunable or "Norm" in info.classes[0]):
            continue  # the embeddings
        if f"final.{key}" in want:
            errors[info.name] = _rel(host.weight(info.name), want[f"final.{key}"])
            assert errors[info.name] < limit, (info.name, errors[info.name])
        else:
            np.testing.assert_array_equal(host.weight(info.name), initial[key].numpy(), err_msg=info.name)
    return errors


@needs_hub
def test_keras_hub_norms_and_parents_answer_to_their_checkpoint_names(folder: pathlib.Path) -> None:
    """A norm's weight is its ``scale`` (what the converter loads ``...layernorm.weight`` into);
    the attention is a module; the decoder layer has no ``mlp`` module."""
    host = _host(_llama(folder))
    names = {m.name for m in host.modules()}
    assert {"model.layers.0.input_layernorm", "model.layers.0.self_attn", "model.layers.1.mlp.down_proj"} <= names
    assert "model.layers.0.mlp" not in names
    initial = ref.tensors("initial")
    for norm in ("model.layers.0.input_layernorm", "model.layers.1.post_attention_layernorm", "model.norm"):
        np.testing.assert_array_equal(host.weight(norm), initial[f"{norm}.weight"].numpy())
        assert host.bias(norm) is None
    assert host.bias("model.layers.0.self_attn.q_proj") is None


@needs_hub
@pytest.mark.parametrize("name", SQ_CASES)
def test_smoothquant_on_a_keras_hub_llama_is_llm_compressors(folder: pathlib.Path, name: str) -> None:
    """llm-compressor's mappings in its order, its activation ranges, its scales and its
    smoothed weights within 1e-4 relative; nothing else changed."""
    model = _llama(folder)
    recipe_spec.oneshot(model=model, recipe=ref.cases()["cases"][name]["recipe_yaml"], dataset=ref.samples(),
                        num_calibration_samples=8, shuffle_calibration_samples=False, batch_size=1)
    report = last_report()
    assert report.order == ref.cases()["order_of_samples_fed"]
    want = ref.tensors(name)
    events = [e for e in ref.cases()["cases"][name]["events"] if e["event"] == "smoothquant.smooth"]
    assert [(s.smooth, list(s.balance)) for s in report.smoothing] == [
        (e["smooth_layer"], e["balance_layers"]) for e in events]
    for s in report.smoothing:
        assert _rel(s.activation_range, want[f"smoothquant.activation_range.{s.smooth}"]) < 1e-4, s.smooth
        floored = want[f"smoothquant.scales_before_floor.{s.smooth}"].clamp(min=1e-5)
        assert _rel(s.scales, floored) < 1e-4, s.smooth
    _weights_agree(_host(model), want, 1e-4)


def _awq(folder: pathlib.Path, name: str) -> tuple[object, object]:
    from recipe_spec.oneshot.awq import awq_plan
    from recipe_spec.oneshot.calibration import prepare
    from recipe_spec.oneshot.modifiers import OneShotModifier
    from recipe_spec.oneshot.pipeline import run_pipeline

    recipe = load(ref.cases()["cases"][name]["recipe_yaml"])
    errors: list = []
    plan = awq_plan(recipe, recipe.modifiers[0], errors)
    assert not errors
    mod = OneShotModifier("AWQModifier", "awq", recipe.modifiers[0], (), transform=plan)
    model = _llama(folder)
    with _host(model) as host:
        calibration = prepare(host, ref.samples(), num_calibration_samples=8, shuffle=False, batch_size=1)
        report = run_pipeline(host, [mod], calibration)
    return model, report


@needs_hub
def test_awq_on_a_keras_hub_llama_chooses_llm_compressors_scales(folder: pathlib.Path) -> None:
    """Asymmetric int4 groups of 32, ``duo_scaling: both``: every mapping with the parent
    llm-compressor ran (the MLP mapping on the decoder layer, see docs/oneshot.md), its scales
    within 1e-4 relative, the losses of its first and best grid points within 1e-3, and the
    smoothed weights within 1e-4."""
    name = "awq_w4_asym_g32_both_n10"
    model, report = _awq(folder, name)
    want = ref.tensors(name)
    events = ref.cases()["cases"][name]["events"]
    assert [(s.smooth, list(s.balance)) for s in report.smoothing] == [
        (e["smooth_layer"], e["balance_layers"]) for e in events]
    for s, event in zip(report.smoothing, events, strict=True):
        assert _rel(s.scales, want[f"awq.best_scales.{s.smooth}"]) < 1e-4, s.smooth
        assert s.initial_loss == pytest.approx(event["initial_error"], rel=1e-3)
        assert s.best_loss == pytest.approx(event["best_error"], rel=1e-3)
        assert [tuple(g) for g in event["grid"]] == [(r, d) for r, d, _ in s.history]
    _weights_agree(_host(model), want, 1e-4)


@needs_hub
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="once: the symmetric case takes longest")
def test_awq_symmetric_on_a_keras_hub_llama_differs_only_at_near_ties(folder: pathlib.Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Symmetric int4 groups of 32 (see the module docstring): the unscaled grid point's loss
    as llm-compressor's within 1e-4 and every best loss within 3% of its. Where the scales
    chosen differ from llm-compressor's, the two choices are a near tie: llm-compressor's
    scales are scored again by our own loss (its quantized balance layers through the same
    parent module and calibration tokens), and the two scores lie within ``TIE_NOISE`` of each
    other. The balance weights of the mappings whose scales agree (and that no other mapping
    scaled after them) within 1e-4 of llm-compressor's. No count of agreements: which
    mappings fall on which side of a tie depends on the CPU's float reductions."""
    from recipe_spec.oneshot.awq import search as awq
    from recipe_spec.oneshot.shared import smoothing

    name = "awq_w4_sym_g32"
    want = ref.tensors(name)
    events = ref.cases()["cases"][name]["events"]
    at_theirs: list[float] = []  # our loss at llm-compressor's scales, one a mapping in order
    real_search = smoothing.search

    def search(ops, x_mean, weights, duo_scaling, n_grid, run, to_one=True):  # type: ignore[no-untyped-def]
        result = real_search(ops, x_mean, weights, duo_scaling, n_grid, run, to_one)
        theirs = want[f"awq.best_scales.{events[len(at_theirs)]['smooth_layer']}"].numpy()
        scales = ops.astype(keras.ops.convert_to_tensor(theirs), "float64")
        at_theirs.append(float(run([None if a is None else awq._quantized_over_scales(ops, w, scales, a)
                                    for w, a in weights])))
        return result

    monkeypatch.setattr(smoothing, "search", search)
    model, report = _awq(folder, name)
    assert len(at_theirs) == len(report.smoothing) == len(events)
    same, ties = [], []
    for s, event, theirs in zip(report.smoothing, events, at_theirs, strict=True):
        assert s.smooth == event["smooth_layer"]
        assert s.initial_loss == pytest.approx(event["initial_error"], rel=1e-4)
        assert s.best_loss == pytest.approx(event["best_error"], rel=3e-2)
        assert theirs == pytest.approx(event["best_error"], rel=TIE_NOISE), s.smooth  # the loss scored alike
        if _rel(s.scales, want[f"awq.best_scales.{s.smooth}"]) < 1e-4:
            same.append(s)
        else:  # a near tie: by our own loss, llm-compressor's choice within the noise of ours
            assert abs(theirs - s.best_loss) <= TIE_NOISE * s.best_loss, (s.smooth, s.best_loss, theirs)
            ties.append((s.smooth, theirs / s.best_loss - 1))
    assert same, ties
    host = _host(model)
    moved = {n for o in report.smoothing if o not in same for n in (o.smooth, *o.balance)}
    checked = [n for s in same for n in s.balance if n not in moved]
    for layer in checked:
        assert _rel(host.weight(layer), want[f"final.{layer}.weight"]) < 1e-4, layer


# -- a plain functional model ----------------------------------------------------------------------
def _plain() -> keras.Model:
    keras.utils.set_random_seed(5)
    ids = keras.Input(shape=(None,), dtype="int32", name="ids")
    x = keras.layers.Embedding(40, 16, name="embed")(ids)
    x = keras.layers.LayerNormalization(name="norm", beta_initializer="random_normal",
                                        gamma_initializer="random_uniform")(x)
    x = keras.layers.Dense(24, name="fc", bias_initializer="random_normal")(x)
    x = keras.layers.EinsumDense("btd,dhk->bthk", output_shape=(None, 2, 8), bias_axes="hk", name="heads",
                                 bias_initializer="random_normal")(x)
    x = keras.layers.Reshape((-1, 16))(x)
    return keras.Model(ids, keras.layers.Dense(40, name="head")(x))


def test_smoothquant_on_a_plain_model_keeps_its_outputs_and_follows_the_formula() -> None:
    """A LayerNormalization (gamma and beta) and an EinsumDense with a bias over its output
    axes as smooth layers: the scales ``range^a / (2 max|W[:, j]|)^(1-a)`` from the smooth
    layer's output range over the calibration tokens (computed here with a sub-model), gamma,
    beta and the bias divided by them, the balance kernels' input rows multiplied; the model's
    outputs unchanged within float32 rounding."""
    model = _plain()
    rng = np.random.default_rng(1)
    samples = [{"input_ids": rng.integers(0, 40, 12).tolist(), "attention_mask": [1] * 12} for _ in range(5)]
    ids = np.asarray([s["input_ids"] for s in samples], "int32")
    before = keras.ops.convert_to_numpy(model(ids))
    taps = keras.Model(model.input, [model.get_layer("norm").output, model.get_layer("heads").output])
    norm_out, heads_out = (keras.ops.convert_to_numpy(t) for t in taps(ids))
    old = {v.path: keras.ops.convert_to_numpy(v).copy() for v in model.weights}
    recipe = ("smooth_stage:\n  smooth_modifiers:\n    SmoothQuantModifier:\n      smoothing_strength: 0.6\n"
              "      mappings:\n        - [[fc], norm]\n        - [[head], heads]\n")
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=samples, num_calibration_samples=5,
                        shuffle_calibration_samples=False)

    def scales(act: np.ndarray, kernel: np.ndarray) -> np.ndarray:  # kernel (in, out)
        a = act.reshape(-1, kernel.shape[0]).astype(np.float64)
        span = a.max(0) - a.min(0)
        return np.maximum(span ** 0.6 / (2 * np.abs(kernel).max(1)) ** 0.4, 1e-5)

    s_norm = scales(norm_out, old["fc/kernel"])
    s_heads = scales(heads_out, old["head/kernel"])
    new = {v.path: keras.ops.convert_to_numpy(v) for v in model.weights}
    np.testing.assert_allclose(new["norm/gamma"], old["norm/gamma"] / s_norm, rtol=1e-5)
    np.testing.assert_allclose(new["norm/beta"], old["norm/beta"] / s_norm, rtol=1e-5)
    np.testing.assert_allclose(new["fc/kernel"], old["fc/kernel"] * s_norm[:, None], rtol=1e-5)
    np.testing.assert_allclose(new["heads/kernel"], old["heads/kernel"] / s_heads.reshape(1, 2, 8), rtol=1e-5)
    np.testing.assert_allclose(new["heads/bias"], old["heads/bias"] / s_heads.reshape(2, 8), rtol=1e-5)
    np.testing.assert_allclose(new["head/kernel"], old["head/kernel"] * s_heads[:, None], rtol=1e-5)
    after = keras.ops.convert_to_numpy(model(ids))
    assert float(np.abs(after - before).max() / np.abs(before).max()) < 1e-5
    assert [s.smooth for s in last_report().smoothing] == ["norm", "heads"]


def test_schemas_list_the_smoothing_modifiers_keras_runs() -> None:
    root = pathlib.Path(__file__).resolve().parent.parent
    data = json.loads((root / "schemas" / "backends.json").read_text(encoding="utf-8"))
    assert {"SmoothQuantModifier", "LogarithmicEqualizationModifier", "AWQModifier"} <= set(
        data["backends"]["keras"]["oneshot_modifiers"])
