"""QuIP and SpinQuant rotations (``QuIPModifier``, ``SpinQuantModifier``) on PyTorch against
llm-compressor 0.14's own runs: Hadamard, random Hadamard and random-matrix rotations of the
inputs (and outputs), a block size; SpinQuant's R1, R2, R4 with its norm fusing and centred
embeddings; then round to nearest or GPTQ W4A16. The saved folder holds llm-compressor's
tensors byte for byte (the rotation matrices, the packed weights and scales, the embeddings,
norms and lm_head) and its ``transform_config``. What cannot run is refused, located, before
any weight changes: a block size that does not divide a layer, randomize, SpinQuant's R3 and
its explicit transform_config, and Keras (no layer applies an online rotation).

``tests/fixtures/quip/`` holds llm-compressor's runs (``make_reference.py`` wrote them by running
it on case ``10_staged_sparse24_gptq_w4a16``'s model and samples).
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
safetensors_torch = pytest.importorskip("safetensors.torch")

import recipe_spec  # noqa: E402
from recipe_spec.diagnostics.base import RecipeError  # noqa: E402

HERE = pathlib.Path(__file__).parent
FIXTURE = HERE / "fixtures" / "quip"
CASE = HERE / "data" / "conformance" / "llmcompressor" / "10_staged_sparse24_gptq_w4a16"
REFERENCE = json.loads((FIXTURE / "reference.json").read_text())


def _model() -> Any:
    torch.set_num_threads(1)
    case = json.loads((CASE / "case.json").read_text())
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**case["model_config"])).float().eval()
    model.load_state_dict(safetensors_torch.load_file(str(CASE / "initial.safetensors")))
    return model


def _samples() -> list[dict[str, Any]]:
    case = json.loads((CASE / "case.json").read_text())
    return [{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in case["calibration"]["token_ids"]]


def _digest(t: Any) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


@pytest.mark.parametrize("run", sorted(REFERENCE["runs"]))
def test_the_saved_folder_is_llm_compressors_byte_for_byte(run: str, tmp_path: pathlib.Path) -> None:
    want = REFERENCE["runs"][run]
    recipe_spec.oneshot(model=_model(), recipe=want["recipe"], dataset=_samples(), num_calibration_samples=16,
                        shuffle_calibration_samples=False, output_dir=str(tmp_path), progress=False)
    ours = safetensors_torch.load_file(str(tmp_path / "model.safetensors"))
    assert sorted(ours) == sorted(want["tensors"])
    for name, (shape, dtype, digest) in want["tensors"].items():
        assert list(ours[name].shape) == shape and str(ours[name].dtype).removeprefix("torch.") == dtype, name
        assert _digest(ours[name]) == digest, name
    config = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert config["transform_config"] == want["quantization_config"]["transform_config"]
    assert config["config_groups"] == want["quantization_config"]["config_groups"]


def test_the_rotation_is_orthogonal_and_folded_into_the_weight() -> None:
    """By hand: after a Hadamard input rotation the layer computes what it computed before
    (``W·x = (W·Hᵀ)·(H·x)`` with ``H`` a Hadamard matrix over ``sqrt(n)``: orthonormal), its
    weight changed."""
    model = _model()
    layer = model.model.layers[0].self_attn.q_proj
    before = layer.weight.detach().clone()
    x = torch.randn(3, layer.in_features, generator=torch.Generator().manual_seed(0))
    want = x @ before.T
    recipe = "q_stage:\n  q_modifiers:\n    QuIPModifier:\n      transform_type: hadamard\n"
    recipe_spec.oneshot(model=model, recipe=recipe, progress=False)
    h = layer.v_input.weight.detach().to(torch.float64)  # a ±1 Hadamard matrix, scaled when applied
    assert set(h.unique().tolist()) == {-1.0, 1.0}
    assert torch.allclose(h @ h.T / h.shape[0], torch.eye(h.shape[0], dtype=torch.float64), atol=1e-12)
    assert not torch.allclose(layer.weight.detach(), before)
    np.testing.assert_allclose(layer(x).detach().numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("modifier, args, words", [
    ("QuIPModifier", "transform_type: hadamard\n      transform_block_size: 48\n", "does not divide its width"),
    ("QuIPModifier", "randomize: true\n", "randomize"),
    ("SpinQuantModifier", "rotations: [R1, R3]\n", "R3"),
    ("SpinQuantModifier", "transform_config: {config_groups: {}}\n", "transform_config"),
    ("SpinQuantModifier", "mappings: {embedding: embed}\n", "mappings"),
    ("SpinQuantModifier", "transform_block_size: 3\n", "does not divide"),
])
def test_what_cannot_rotate_is_refused_located_before_weights_change(modifier: str, args: str, words: str) -> None:
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    recipe = f"q_stage:\n  q_modifiers:\n    {modifier}:\n      {args}"
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=recipe, progress=False)
    d = err.value.diagnostics[0]
    assert d.code == "B001" and d.line >= 3 and words in d.message, d
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_a_run_that_fails_after_rotating_leaves_the_model_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rotation changed the embeddings, norms and layers and added the online rotations; a
    failure in the quantization after it puts every weight back and removes what it added."""
    from recipe_spec.oneshot import pipeline

    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the disk is full (test)")

    monkeypatch.setattr(pipeline, "compress_module", failing)
    recipe = REFERENCE["runs"]["spin_r1r2r4_random_hadamard_rtn"]["recipe"]
    with pytest.raises(RuntimeError, match="disk is full"):
        recipe_spec.oneshot(model=model, recipe=recipe, progress=False)
    after = model.state_dict()
    assert set(after) == set(before) and all(torch.equal(v, before[k]) for k, v in after.items())
    assert not hasattr(model, "transform_config")


@pytest.mark.parametrize("modifier", ["QuIPModifier", "SpinQuantModifier"])
def test_keras_refuses_rotations_located(modifier: str) -> None:
    keras = pytest.importorskip("keras")
    ids = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(40, 32)(ids)
    model = keras.Model(ids, keras.layers.Dense(32, name="fc")(x))
    before = [np.array(keras.ops.convert_to_numpy(v)) for v in model.weights]
    recipe = f"q_stage:\n  q_modifiers:\n    {modifier}:\n      transform_type: hadamard\n"
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=recipe, progress=False)
    (d,) = err.value.diagnostics
    assert d.code == "B001" and d.line == 3 and modifier in d.message, d
    assert all(np.array_equal(np.array(keras.ops.convert_to_numpy(v)), b) for v, b in zip(model.weights, before))
