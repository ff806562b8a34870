"""Per-layer sparsities in ``recipe_spec.oneshot`` (a ``sparsity`` list; the OWL profile), against
llm-compressor 0.14's own runs stored in ``tests/fixtures/owl`` (``make_reference.py`` wrote
them; README.md there names the versions and the two patches its OWL runs needed): the OWL
sparsities and activation norms it computed, the zero pattern of every layer, the final
weights of the SparseGPT OWL run, and the errors it stops with as released."""

from __future__ import annotations

import base64
import importlib.util
import json
import pathlib
from typing import Any

import numpy as np
import pytest
from testdata import LLMCOMPRESSOR

import recipe_spec
from recipe_spec.diagnostics.base import RecipeError
from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec.oneshot.owl.profile import outlier_ratio, owl_sparsities
from recipe_spec.stage_dialect.versions import Compat
from recipe_spec.validation import validate_recipe

FIXTURE = pathlib.Path(__file__).resolve().parent / "fixtures" / "owl"
REFERENCE = json.loads((FIXTURE / "reference.json").read_text())
RUNS = REFERENCE["runs"]
CASES = LLMCOMPRESSOR
CASE = CASES / "02_sparsegpt_2of4"
BLOCKS = ["model.layers.0", "model.layers.1", "model.layers.2", "model.layers.3"]


def _maker() -> Any:
    spec = importlib.util.spec_from_file_location("owl_make_reference", FIXTURE / "make_reference.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


MAKER = _maker()


def _case() -> dict:
    return json.loads((CASE / "case.json").read_text())


def _samples() -> list[dict]:
    return [{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in _case()["calibration"]["token_ids"]]


def _config(which: str) -> dict:
    config = dict(_case()["model_config"])
    if which == "4layers":
        config["num_hidden_layers"] = 4
    return config


def _state(which: str, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    if which == "4layers":
        return MAKER.four_layer_weights(shapes)
    from safetensors.numpy import load_file

    return load_file(str(CASE / "initial.safetensors"))


def _torch_model(which: str) -> Any:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.set_num_threads(1)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**_config(which))).float().eval()
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    model.load_state_dict({k: torch.from_numpy(v) for k, v in _state(which, shapes).items()})
    return model


def _zeros(b64: str, shape: list[int]) -> np.ndarray:
    bits = np.unpackbits(np.frombuffer(base64.b64decode(b64), np.uint8), bitorder="big")
    return bits[: int(np.prod(shape))].reshape(shape).astype(bool)


def _agreement(run: dict, weight: Any) -> dict[str, float]:
    """Per layer, the fraction of entries whose zero/non-zero state matches llm-compressor's."""
    return {k: float(((weight(k) == 0) == _zeros(b64, run["shapes"][k])).mean())
            for k, b64 in run["zeros_bitmask_b64"].items()}


def _oneshot(model: Any, recipe: str) -> None:
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples(), num_calibration_samples=16,
                        shuffle_calibration_samples=False, batch_size=1)


# -- the maths, from llm-compressor's own statistics -----------------------------------------------
def test_owl_sparsities_from_llm_compressors_activation_norms_are_its_sparsities() -> None:
    run = RUNS["sparsegpt_owl_4layers"]
    norms = {k: np.asarray(v, np.float32) for k, v in run["activation_norms"].items()}
    model = _torch_model("4layers")
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    ratios = [outlier_ratio(NUMPY_OPS, [(weights[f"{n}.weight"], a) for n, a in norms.items()
                                        if n.startswith(b + ".")], 5) for b in BLOCKS]
    want = [run["owl_sparsities"][b] for b in BLOCKS]
    np.testing.assert_allclose(owl_sparsities(ratios, 0.5, 0.08), want, rtol=0, atol=1e-12)
    assert abs(np.mean(want) - 0.5) < 1e-12


def test_owl_sparsities_of_two_blocks_are_the_sparsity_plus_and_minus_lambda() -> None:
    assert owl_sparsities([3.0, 1.0], 0.5, 0.08) == pytest.approx([0.42, 0.58], abs=1e-15)
    with pytest.raises(ValueError, match="same outlier ratio"):
        owl_sparsities([2.0, 2.0], 0.5, 0.08)


def test_the_statistics_pass_collects_llm_compressors_activation_norms() -> None:
    from recipe_spec_torch.oneshot import TorchCalibrationHost

    from recipe_spec.oneshot import prepare
    from recipe_spec.oneshot.owl.profile import ActivationNorms

    run = RUNS["sparsegpt_owl_4layers"]
    model = _torch_model("4layers")
    with TorchCalibrationHost(model) as host:
        cal = prepare(host, _samples(), num_calibration_samples=16, shuffle=False, batch_size=1)
        norms = {n: ActivationNorms(host.ops) for n in run["activation_norms"]}
        host.run_model(cal.batches, {n: s.add for n, s in norms.items()})
    for name, want in run["activation_norms"].items():
        np.testing.assert_allclose(norms[name].value.numpy(), want, rtol=1e-5)


# -- end to end on PyTorch -------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n, r in RUNS.items() if "error" not in r])
def test_oneshot_gives_llm_compressors_per_layer_sparsities_and_zeros(name: str) -> None:
    run = RUNS[name]
    model = _torch_model(run["model"])
    _oneshot(model, run["recipe_yaml"])
    state = model.state_dict()

    def weight(k: str) -> np.ndarray:
        return state[f"{k}.weight"].numpy()

    agreement = _agreement(run, weight)
    assert min(agreement.values()) >= 0.999, agreement
    for k, want in run["sparsity_reached"].items():
        assert float((weight(k) == 0).mean()) == want, k


def test_owl_over_every_linear_prunes_each_decoder_layer_to_its_owl_sparsity() -> None:
    """``targets: [Linear]`` (llm-compressor 0.14 refuses OWL with it: 15 target matches, 2
    sparsities): each layer inside a decoder layer takes that layer's OWL sparsity, which is
    llm-compressor's run with the decoder layers as targets; final weights as it stored them."""
    from safetensors.numpy import load_file

    run = RUNS["sparsegpt_owl"]
    model = _torch_model("02")
    recipe = run["recipe_yaml"].replace(f"'{MAKER.BLOCKS}'", "Linear") + "      ignore: ['re:.*lm_head']\n"
    _oneshot(model, recipe)
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    assert min(_agreement(run, lambda k: state[f"{k}.weight"]).values()) >= 0.999
    final = load_file(str(FIXTURE / "sparsegpt_owl_final.safetensors"))
    for key, ref in final.items():
        ref = ref.astype(np.float32)
        assert float(np.abs(state[key] - ref).max() / np.abs(ref).max()) <= 2e-3, key


# -- errors, located, before any weight changes ------------------------------------------------------
_HEAD = "sparsity_stage:\n  sparsity_modifiers:\n    SparseGPTModifier:\n"


@pytest.mark.parametrize(("body", "code", "line"), [
    ("      sparsity: [0.3, 0.6]\n", "M005", 4),  # targets [Linear]: 15 matches
    ("      sparsity: 0.5\n      sparsity_profile: owl\n      owl_m: 5\n      owl_lmbda: 0.6\n", "M005", 7),
    ("      sparsity: 0.5\n      sparsity_profile: owl\n      owl_m: 5\n", "M003", 3),
    ("      sparsity: 0.5\n      owl_lmbda: 0.1\n", "M003", 3),
    ("      sparsity: 0.5\n      sparsity_profile: owll\n      owl_m: 5\n      owl_lmbda: 0.1\n", "M006", 5),
    ("      sparsity: [0.4, 0.6]\n      sparsity_profile: owl\n      owl_m: 5\n      owl_lmbda: 0.1\n", "M006", 4),
])
def test_per_layer_errors_are_located_and_nothing_changes(body: str, code: str, line: int) -> None:
    torch = pytest.importorskip("torch")
    model = _torch_model("02")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RecipeError) as err:
        _oneshot(model, _HEAD + body)
    found = [(d.code, d.line) for d in err.value.diagnostics]
    assert (code, line) in found, found
    assert all(d.hint for d in err.value.diagnostics)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_reference_runs_record_where_llm_compressor_014_stops() -> None:
    """As released, 0.14 stops in ``on_initialize`` (OWL's forward pass raises a lifecycle
    error); with that pass patched, its length check refuses ``targets: [Linear]``."""
    assert RUNS["owl_as_released"]["error"] == "ValueError: Cannot invoke event before initializing"
    assert RUNS["owl_as_released_forward_patched"]["error"].endswith(
        "was initialized with 2 sparsities values, but model has 2 target layers")
    assert REFERENCE["versions"]["llmcompressor"] == "0.14.0.1"


# -- Keras (a keras-hub Llama loaded from the same checkpoint) ----------------------------------------
def test_owl_on_a_keras_hub_llama_agrees_with_llm_compressor(tmp_path: pathlib.Path) -> None:
    keras_hub = pytest.importorskip("keras_hub")
    pytest.importorskip("transformers")
    from recipe_spec_keras.oneshot import KerasCalibrationHost
    from safetensors.numpy import save_file

    run = RUNS["wanda_owl_4layers"]
    model = _torch_model("4layers")
    config = dict(_config("4layers"), architectures=["LlamaForCausalLM"])
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({k: v.numpy() for k, v in model.state_dict().items()}, str(tmp_path / "model.safetensors"))
    llama = keras_hub.models.LlamaCausalLM.from_preset(str(tmp_path), preprocessor=None)
    _oneshot(llama, run["recipe_yaml"])
    host = KerasCalibrationHost(llama)
    agreement = _agreement(run, host.weight)
    assert min(agreement.values()) >= 0.99, agreement
    reached = {k: float((host.weight(k) == 0).mean()) for k in run["sparsity_reached"]}
    assert reached == run["sparsity_reached"]


# -- validate: the same rules, and what llm-compressor does otherwise -------------------------------
@pytest.mark.parametrize(("body", "compat", "want"), [
    ("      sparsity: 0.5\n      sparsity_profile: owl\n      owl_m: 5\n      owl_lmbda: 0.08\n",
     "llmcompressor==0.14", [("C007", 5)]),
    ("      sparsity: 0.5\n      sparsity_profile: OWL\n      owl_m: 5\n      owl_lmbda: 0.08\n",
     "llmcompressor==0.10", [("C007", 3)]),  # targets [Linear]: its count of target matches
    ("      sparsity: 0.5\n      sparsity_profile: owl\n      owl_m: 5\n      owl_lmbda: 0.08\n"
     "      targets: ['re:model\\.layers\\.\\d+$']\n", "llmcompressor==0.10", []),
    ("      sparsity: 0.5\n      owl_m: 5\n", "llmcompressor==0.14", [("M003", 3)]),
    ("      sparsity: 0.5\n      sparsity_profile: outlier\n", "llmcompressor==0.14", [("M006", 5)]),
    ("      sparsity: [0.3, 0.6]\n      targets: ['re:model\\.layers\\.\\d+$']\n", "llmcompressor==0.14", []),
])
def test_validate_reports_the_per_layer_rules_where_written(body: str, compat: str, want: list) -> None:
    recipe = recipe_spec.loads(_HEAD.replace("SparseGPTModifier", "WandaPruningModifier") + body)
    found = [(d.code, d.line) for d in validate_recipe(recipe, compat=Compat.parse(compat))
             if d.code in ("C007", "M003", "M006", "M005", "M011")]
    assert found == want
