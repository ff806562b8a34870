"""QuIP and SpinQuant rotations (``QuIPModifier``, ``SpinQuantModifier``) on PyTorch against
llm-compressor 0.14's own runs: Hadamard, random Hadamard and random-matrix rotations of the
inputs (and outputs), a block size; SpinQuant's R1, R2, R3, R4 with its norm fusing and centred
embeddings; then round to nearest or GPTQ W4A16. The saved folder holds llm-compressor's
tensors byte for byte (the rotation matrices, the packed weights and scales, the embeddings,
norms and lm_head) and its ``transform_config``. What cannot run is refused, located, before
any weight changes: a block size that does not divide a layer, randomize, an unknown rotation
and SpinQuant's explicit transform_config. On Keras, SpinQuant's R1 and R2 (fused into the
weights) give the PyTorch run's weights bit for bit on a keras-hub Llama; QuIP, R3 and R4 (online
rotations, which no Keras layer applies) are refused, located.

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


def test_r3_rotates_queries_and_keys_online_and_the_model_computes_what_it_did() -> None:
    """R3 rotates the queries (after RoPE) and the key cache by one orthogonal matrix per head,
    through compressed-tensors' attention hooks: no weight changes (the saved folder is the R1+R2
    run's plus the rotation, test above), the scores ``(qR)(kR)ᵀ = qkᵀ`` are unchanged, and the
    model keeps the hooks after the run, around its own attention implementation."""
    runs = REFERENCE["runs"]
    with_r3, without = _model(), _model()
    impl = with_r3.config._attn_implementation
    for model, run in ((with_r3, "spin_r1r2r3_rtn"), (without, "spin_r1r2_rtn")):
        recipe_spec.oneshot(model=model, recipe=runs[run]["recipe"], dataset=_samples(), num_calibration_samples=16,
                            shuffle_calibration_samples=False, progress=False)
    from compressed_tensors.modeling.attention import QuantizedAttentionImpl

    assert with_r3.config._attn_implementation == "ct_hooked_attention" and QuantizedAttentionImpl._original_impl == impl
    assert without.config._attn_implementation == impl
    seen = []
    hook = with_r3.model.layers[0].self_attn.R3_q_attn.register_forward_hook(lambda *a: seen.append(1))
    ids = torch.tensor([_samples()[0]["input_ids"]])
    got, want = with_r3(ids).logits, without(ids).logits
    hook.remove()
    assert seen and torch.allclose(got, want, rtol=1e-4, atol=1e-5)


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
    ("SpinQuantModifier", "learnable: true\n", "learnable"),
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


@pytest.mark.parametrize("modifier, args, at, words", [
    ("QuIPModifier", "transform_type: hadamard", 3, "needs transform:online-rotations"),
    ("SpinQuantModifier", "rotations: [R1, R2, R4]", 4, "rotation R4 rotates down_proj's inputs"),
    ("SpinQuantModifier", "rotations: [R1, R2, R3]", 4, "rotation R3 rotates the queries and the key cache"),
    ("SpinQuantModifier", "transform_type: hadamard", 3, "R2 rotates each attention head"),
    ("SpinQuantModifier", "rotations: [R1]", 3, "no re:.*input_layernorm$ feeding"),
])
def test_keras_refuses_what_it_cannot_rotate_located(modifier: str, args: str, at: int, words: str) -> None:
    """Keras has no layer that rotates activations while the model runs (QuIP, SpinQuant's R4),
    and a model without Llama-style norms cannot have them fused: refused, located, before any
    weight changes (``validate --backend keras`` refuses the first two the same way)."""
    keras = pytest.importorskip("keras")
    ids = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(40, 32)(ids)
    model = keras.Model(ids, keras.layers.Dense(32, name="fc")(x))
    before = [np.array(keras.ops.convert_to_numpy(v)) for v in model.weights]
    recipe = f"q_stage:\n  q_modifiers:\n    {modifier}:\n      {args}\n"
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=recipe, progress=False)
    (d,) = err.value.diagnostics
    assert d.code == "B001" and d.line == at and modifier in d.message and words in d.message, d
    assert all(np.array_equal(np.array(keras.ops.convert_to_numpy(v)), b)
               for v, b in zip(model.weights, before, strict=True))
    if modifier == "SpinQuantModifier" and "R4" not in args:
        return  # the model's layers decide: only oneshot sees them
    from recipe_spec.loader import loads
    from recipe_spec.validation import validate_recipe

    found = validate_recipe(loads(recipe), backend="keras")
    assert any(f.code == "B001" and f.line == at and words in f.message for f in found), found


def _keras_llama(tmp: pathlib.Path, dtype: str = "float32") -> Any:
    keras_hub = pytest.importorskip("keras_hub")
    from keras_hub_cases import hf_folder

    return keras_hub.models.LlamaCausalLM.from_preset(str(hf_folder(tmp / "hf", CASE.name)), preprocessor=None,
                                                     dtype=dtype)


def _keras_weights(model: Any) -> dict[str, np.ndarray]:
    """Every weight a rotation touches, under the checkpoint's names, in its layout."""
    keras = pytest.importorskip("keras")
    from recipe_spec_keras.oneshot import KerasCalibrationHost

    host = KerasCalibrationHost(model)
    names = [i.name for i in host.modules() if i.prunable or "norm" in i.name.rsplit(".", 1)[-1]]
    out = {f"{n}.weight": host.weight(n) for n in names}
    out["model.embed_tokens.weight"] = np.asarray(keras.ops.convert_to_numpy(model.backbone.token_embedding.embeddings))
    return out


def _initial() -> dict[str, np.ndarray]:
    return {k: v.float().numpy() for k, v in safetensors_torch.load_file(str(CASE / "initial.safetensors")).items()}


@pytest.mark.parametrize("args, dtype", [
    ("transform_type: hadamard", "float32"), ("transform_type: random-hadamard", "float32"),
    ("transform_type: random-matrix\n      transform_block_size: 64", "float32"),
    ("transform_type: random-hadamard", "bfloat16"),
])
def test_keras_spinquant_r1_r2_is_the_pytorch_rotation_bit_for_bit(args: str, dtype: str,
                                                                   tmp_path: pathlib.Path) -> None:
    """SpinQuant's R1 and R2 on a keras-hub Llama (case 10's, loaded from its checkpoint, in
    float32 and in bfloat16): every embedding, norm and Linear weight is the PyTorch run's on
    the same model (llm-compressor's byte for byte, above) bit for bit, and the model computes
    what the rotated PyTorch model computes."""
    keras = pytest.importorskip("keras")
    model = _keras_llama(tmp_path, dtype)
    ids = np.array([_samples()[0]["input_ids"]])
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    logits = np.asarray(keras.ops.convert_to_numpy(model(inputs)))
    recipe = f"r_stage:\n  r_modifiers:\n    SpinQuantModifier:\n      rotations: [R1, R2]\n      {args}\n"
    recipe_spec.oneshot(model=model, recipe=recipe, progress=False)
    torch_model = _model().to(getattr(torch, dtype))
    recipe_spec.oneshot(model=torch_model, recipe=recipe, progress=False)
    want = {k: v.float().numpy() for k, v in torch_model.state_dict().items()}
    got, initial = _keras_weights(model), _initial()
    assert str(model.backbone.token_embedding.embeddings.dtype) == dtype
    assert len(got) == 3 + 2 * 9  # embeddings, lm_head, model.norm; per layer 7 Linear layers and 2 norms
    for name, value in got.items():
        np.testing.assert_array_equal(value, want[name], err_msg=name)
        if "norm" in name:  # fused into the layers they feed: ones
            assert (value == 1).all(), name
        else:
            assert not np.allclose(value, initial[name], atol=1e-3), name  # rotated
    # the rotations keep the function; centring the embeddings (llm-compressor's) does not
    # under an RMS norm: the logits are the PyTorch model's after the same steps, not the first
    if dtype != "float32":
        return  # bfloat16 forwards of two frameworks: the weights above are the check
    after = np.asarray(keras.ops.convert_to_numpy(model(inputs)))
    torch_logits = torch_model(torch.tensor(ids)).logits.detach().numpy()
    np.testing.assert_allclose(after, torch_logits, rtol=0, atol=5e-3 * np.abs(torch_logits).max())
    assert not np.allclose(after, logits, atol=1e-3 * np.abs(logits).max())


@pytest.mark.parametrize("run", ["spin_r1r2_rtn", "spin_r1_gptq"])
def test_keras_spinquant_then_w4a16_lands_on_the_pytorch_runs_grid(run: str, tmp_path: pathlib.Path) -> None:
    """llm-compressor's recipes of SpinQuant then W4A16 (round to nearest; GPTQ) on the
    keras-hub twin fed the case's samples: every Linear layer but lm_head is Keras's int4
    layer, on the PyTorch run's grid point (llm-compressor's byte for byte) for >= 98% of its
    weights, at its values within 1e-3 there."""
    keras = pytest.importorskip("keras")
    from recipe_spec_keras.oneshot import KerasCalibrationHost

    from recipe_spec.masks.numpy_ops import NUMPY_OPS
    from recipe_spec.quantization import QuantArgs
    from recipe_spec.quantization.grid import fake_quantize_weight

    recipe = REFERENCE["runs"][run]["recipe"]
    model = _keras_llama(tmp_path)
    layers = {name: lin.layer for name, lin in KerasCalibrationHost(model)._linear.items() if not lin.reverse}
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples(), num_calibration_samples=16,
                        shuffle_calibration_samples=False, progress=False)
    torch_model = _model()
    recipe_spec.oneshot(model=torch_model, recipe=recipe, dataset=_samples(), num_calibration_samples=16,
                        shuffle_calibration_samples=False, progress=False)
    from recipe_spec_keras.quantized import keras_weight

    modules = dict(torch_model.named_modules())
    names = [n for n, m in modules.items() if n.startswith("model.layers.") and isinstance(m, torch.nn.Linear)]
    assert len(names) == 14 and set(names) <= set(layers)
    args = QuantArgs(4, "int", True, "group", 128)
    same = []
    for name in names:
        layer = layers[name]
        assert str(layer.quantization_mode).startswith("int4"), (name, layer.quantization_mode)
        module = modules[name]
        w, scale = module.weight.detach().float().numpy(), module.weight_scale.detach().float().numpy()
        want = fake_quantize_weight(NUMPY_OPS, w, scale, None, args)
        spread = np.repeat(scale, 128, axis=1)
        got = keras_weight(layer)  # (out, in), from Keras's integers and scales
        hit = np.round(got / spread) == np.round(want / spread)
        same.append(float(hit.mean()))
        np.testing.assert_allclose(got[hit], want[hit], rtol=1e-3, atol=1e-6, err_msg=name)
    print(f"{run} on Keras {keras.backend.backend()}: the PyTorch run's grid point on {np.mean(same):.4%} of the "
          f"weights, worst layer {min(same):.4%}")
    assert min(same) >= 0.98, same


def test_a_keras_run_that_fails_after_rotating_leaves_the_model_as_it_was(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: pathlib.Path) -> None:
    """The rotation changed the embeddings, norms and every Linear layer of the keras-hub
    model; a failure in the quantization after it puts every variable back as it was."""
    keras = pytest.importorskip("keras")
    from recipe_spec.oneshot import pipeline

    model = _keras_llama(tmp_path)
    before = [np.array(keras.ops.convert_to_numpy(v)) for v in model.weights]

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the disk is full (test)")

    monkeypatch.setattr(pipeline, "compress_module", failing)
    with pytest.raises(RuntimeError, match="disk is full"):
        recipe_spec.oneshot(model=model, recipe=REFERENCE["runs"]["spin_r1r2_rtn"]["recipe"], progress=False)
    after = [np.array(keras.ops.convert_to_numpy(v)) for v in model.weights]
    assert len(after) == len(before) and all(np.array_equal(a, b) for a, b in zip(after, before, strict=True))


@pytest.mark.slow
def test_the_keras_rotations_on_jax() -> None:
    """The Keras tests above again on Keras's JAX backend, in a process of its own."""
    import os
    import subprocess
    import sys

    keras = pytest.importorskip("keras")
    pytest.importorskip("jax")
    if keras.backend.backend() == "jax":
        pytest.skip("this process already runs on JAX")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                           "keras and not on_jax"], cwd=HERE.parent, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "12 passed" in done.stdout, done.stdout[-2000:]
