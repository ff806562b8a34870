"""Calibration data in a Keras model's own forms (``recipe_spec.oneshot.calibration_inputs``,
``recipe_spec_keras.inputs``): keras-hub's ``token_ids``/``padding_mask``, a functional
model's input names, batched dicts, arrays and the backend's tensors, ``(x, y)`` tuples,
``tf.data.Dataset`` (batched or not) and text through a keras-hub preprocessor; each form runs
one-shot exactly as llm-compressor's ``input_ids`` samples do, and llm-compressor's own runs
(``tests/data/conformance/llmcompressor`` cases 02 and 10) are reproduced on a keras-hub Llama fed
keras-hub's inputs. The checkpoint's ``config.json`` against a keras-hub backbone: a warning
naming the field and the fix.

The file runs on the process's Keras backend (TensorFlow in the suite); ``test_keras_backends.py``
runs it again on JAX and torch.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import pathlib

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from keras_hub_cases import CASES, hf_folder, keras_hub, llama, needs_hub  # noqa: E402
from keras_hub_cases import case as _case  # noqa: E402
from keras_hub_cases import plain_model as _plain_model  # noqa: E402
from keras_hub_cases import plain_samples as _plain_samples  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec.oneshot.calibration import read_samples  # noqa: E402

SPARSEGPT = ("s_stage:\n  s_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n"
             "      mask_structure: '2:4'\n      ignore: [head]\n")


def _host(model: object) -> object:
    from recipe_spec_keras.oneshot import KerasCalibrationHost

    return KerasCalibrationHost(model)


def _ids(samples: list[dict]) -> list[list[int]]:
    return [np.asarray(s["input_ids"]).reshape(-1).tolist() for s in samples]


def _pruned(dataset: object, n: int = 6) -> dict[str, np.ndarray]:
    """The plain model's weights after SparseGPT 2:4 calibrated on ``dataset``."""
    model = _plain_model()
    recipe_spec.oneshot(model=model, recipe=SPARSEGPT, dataset=dataset, num_calibration_samples=n,
                        shuffle_calibration_samples=False)
    host = _host(model)
    return {name: host.weight(name) for name in ("fc1", "heads")}


# -- every form reads as llm-compressor's samples -------------------------------------------------
def _forms(rows: np.ndarray) -> dict[str, object]:
    """The same six sequences (rows of ``rows``) in each form a Keras user may hold them."""
    mask = np.ones(rows.shape, bool)
    own = [{"token_ids": r, "padding_mask": m} for r, m in zip(rows, mask, strict=True)]
    return {
        "keras-hub dicts": own,
        "batched dict": {"token_ids": rows, "padding_mask": mask},
        "list of batched dicts": [{"token_ids": rows[:4], "padding_mask": mask[:4]},
                                  {"token_ids": rows[4:], "padding_mask": mask[4:]}],
        "numpy array": rows,
        "backend tensor": keras.ops.convert_to_tensor(rows),
        "list of backend tensors": [keras.ops.convert_to_tensor(r) for r in rows],
        "(x, y) tuples": [({"token_ids": r, "padding_mask": m}, r) for r, m in zip(rows, mask, strict=True)],
        "tf.data unbatched": tf.data.Dataset.from_tensor_slices({"token_ids": rows, "padding_mask": mask}),
        "tf.data batched": tf.data.Dataset.from_tensor_slices({"token_ids": rows, "padding_mask": mask}).batch(4),
        "tf.data (x, y) batched": tf.data.Dataset.from_tensor_slices(
            ({"token_ids": rows, "padding_mask": mask}, rows)).batch(5),
        "tf.data arrays": tf.data.Dataset.from_tensor_slices(rows).batch(3),
        "functional input name": [{"ids": r} for r in rows],
    }


def _framework_tensors(rows: np.ndarray) -> dict[str, object]:
    """The rows as TensorFlow, JAX and torch tensors (those installed), whatever the backend."""
    forms: dict[str, object] = {"tf tensors": [{"token_ids": tf.constant(r)} for r in rows]}
    try:
        import jax.numpy as jnp

        forms["jax array"] = jnp.asarray(rows)
    except ImportError:
        pass
    try:
        import torch

        forms["torch batched dict"] = {"token_ids": torch.tensor(rows), "padding_mask": torch.ones(rows.shape, dtype=torch.bool)}
    except ImportError:
        pass
    return forms


def test_every_input_form_reads_as_the_same_samples() -> None:
    rows = np.asarray([s["input_ids"] for s in _plain_samples()], "int32")
    host = _host(_plain_model())
    for form, dataset in {**_forms(rows), **_framework_tensors(rows)}.items():
        samples = read_samples(dataset, host)
        assert _ids(samples) == rows.tolist(), form
        for s in samples:
            assert set(s) <= {"input_ids", "attention_mask"}, (form, set(s))
            if "attention_mask" in s:
                assert np.asarray(s["attention_mask"]).astype(int).tolist() == [1] * rows.shape[1], form


def test_every_input_form_prunes_as_llm_compressors_samples_do() -> None:
    """SparseGPT on the plain model: each form gives the weights that ``input_ids`` dicts give."""
    rows = np.asarray([s["input_ids"] for s in _plain_samples()], "int32")
    expected = _pruned(_plain_samples())
    for form in ("batched dict", "backend tensor", "tf.data (x, y) batched", "functional input name"):
        got = _pruned(_forms(rows)[form])
        for name, weight in expected.items():
            np.testing.assert_array_equal(got[name], weight, err_msg=f"{form}: {name}")


def test_a_model_of_two_named_inputs_gets_each_under_its_name() -> None:
    """A functional model whose inputs are ``tokens`` and ``scale``: ``tokens`` (its first)
    reads the token ids, ``scale`` the samples' key of its name, in each input's dtype."""
    from recipe_spec_keras.inputs import feed, input_keys

    tokens = keras.Input(shape=(None,), dtype="int32", name="tokens")
    scale = keras.Input(shape=(None,), dtype="float32", name="scale")
    x = keras.layers.Embedding(40, 8)(tokens) * keras.ops.expand_dims(scale, -1)
    model = keras.Model({"tokens": tokens, "scale": scale}, keras.layers.Dense(4, name="fc")(x))
    assert input_keys(model) == {"tokens": "input_ids", "scale": "scale"}
    samples = read_samples([{"tokens": [1, 2, 3], "scale": [0.5, 1.0, 2.0]}], _host(model))
    assert _ids(samples) == [[1, 2, 3]] and "scale" in samples[0]
    fed = feed(model, _host(model).collate(samples, 3))
    assert fed["tokens"].dtype == np.int32 and fed["scale"].dtype == np.float32
    with pytest.raises(ValueError, match="'scale'"):
        feed(model, {"input_ids": np.ones((1, 3), "int32")})


# -- text through the model's keras-hub preprocessor ----------------------------------------------
TEXTS = ["the quick brown fox jumps over the lazy dog", "a stitch in time saves nine",
         "all that glitters is not gold"]


def _sentencepiece() -> bytes:
    spm = pytest.importorskip("sentencepiece")
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXTS * 20), model_writer=buf, vocab_size=24,
                                   model_type="word", pad_id=0, unk_id=1, bos_id=2, eos_id=3,
                                   minloglevel=2)
    return buf.getvalue()


@needs_hub
def test_text_is_tokenised_by_the_models_preprocessor_as_for_generation() -> None:
    """The token ids are SentencePiece's own (``encode``, read without keras-hub) after the
    start token, cut at the preprocessor's ``sequence_length`` (8), without padding or end
    token; the same texts as a tf.data.Dataset of strings read the same."""
    import sentencepiece

    proto = _sentencepiece()
    processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
    backbone = keras_hub.models.LlamaBackbone(vocabulary_size=24, num_layers=1, num_query_heads=2,
                                              num_key_value_heads=2, hidden_dim=16, intermediate_dim=32)
    preprocessor = keras_hub.models.LlamaCausalLMPreprocessor(
        tokenizer=keras_hub.models.LlamaTokenizer(proto=proto), sequence_length=8)
    model = keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=preprocessor)
    expected = [([2] + processor.encode(t))[:8] for t in TEXTS]
    assert any(len(e) == 8 for e in expected) and any(len(e) < 8 for e in expected)
    host = _host(model)
    for dataset in (TEXTS, tf.data.Dataset.from_tensor_slices(TEXTS), tf.data.Dataset.from_tensor_slices(TEXTS).batch(2)):
        samples = read_samples(dataset, host)
        assert _ids(samples) == expected
        assert [np.asarray(s["attention_mask"]).tolist() for s in samples] == [[1] * len(e) for e in expected]
    recipe = "s_stage:\n  s_modifiers:\n    WandaPruningModifier:\n      sparsity: 0.5\n      targets: [Linear]\n      ignore: [lm_head]\n"
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=TEXTS, num_calibration_samples=3)
    host = _host(model)
    sparsity = {n: float((host.weight(n) == 0).mean()) for n, lin in host._linear.items() if not lin.reverse}
    assert len(sparsity) == 7 and all(abs(v - 0.5) < 0.01 for v in sparsity.values()), sparsity


@needs_hub
def test_a_text_file_by_name_is_read_by_the_models_preprocessor_as_the_same_text(tmp_path: pathlib.Path) -> None:
    """``dataset="cal.jsonl"`` (:mod:`recipe_spec.oneshot.named_data`) for a keras-hub model with
    its preprocessor: the same weights as the texts given as a list."""
    pytest.importorskip("datasets")
    proto = _sentencepiece()
    models = []
    for _ in range(2):
        backbone = keras_hub.models.LlamaBackbone(vocabulary_size=24, num_layers=1, num_query_heads=2,
                                                  num_key_value_heads=2, hidden_dim=16, intermediate_dim=32)
        preprocessor = keras_hub.models.LlamaCausalLMPreprocessor(
            tokenizer=keras_hub.models.LlamaTokenizer(proto=proto), sequence_length=8)
        models.append(keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=preprocessor))
    models[1].set_weights(models[0].get_weights())
    (tmp_path / "cal.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    recipe = "s_stage:\n  s_modifiers:\n    WandaPruningModifier:\n      sparsity: 0.5\n      targets: [Linear]\n      ignore: [lm_head]\n"
    for model, dataset in zip(models, (TEXTS, str(tmp_path / "cal.jsonl")), strict=True):
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=dataset, num_calibration_samples=3,
                            shuffle_calibration_samples=False)
    for a, b in zip(models[0].get_weights(), models[1].get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(float((w == 0).mean()) > 0.4 for w in models[1].get_weights())


def test_text_for_a_model_without_a_preprocessor_is_refused_by_sample() -> None:
    with pytest.raises(TypeError, match=r"sample 1 is text \('a stitch.*no preprocessor.*input_ids"):
        read_samples([{"input_ids": [1, 2]}, *TEXTS[1:]], _host(_plain_model()))


# -- unusable data: what, which sample, what to give ------------------------------------------------
@pytest.mark.parametrize(("dataset", "message"), [
    ([{"input_ids": [1, 2]}, {"tokens": [1, 2]}], r"calibration sample 1 is a dict with 'tokens'.*'ids'.*input_ids"),
    ({"token_ids": np.ones((3, 4), "int32"), "padding_mask": np.ones((2, 4), bool)},
     r"batch of 3 rows.*'padding_mask' has 2 leading rows"),
    ([np.ones((2, 3, 4), "int32")], r"sample 0 is ndarray of shape \(2, 3, 4\), not a calibration sample"),
    ([{"token_ids": np.ones((2, 3, 4), "int32")}], r"sample 0 has token ids of 3 dimensions"),
    ({"token_ids": [1, 2, 3]}, r"one dict of 1-D values.*wrap it in a list"),
    ([{"input_ids": [1], "token_ids": [1]}], r"sample 0 has both 'input_ids' and 'token_ids'"),
    ([3.5], r"calibration sample 0 is float, not a calibration sample"),
    (tf.data.Dataset.from_tensor_slices({"x": np.ones((2, 3), "int32")}), r"element 0 \(of the tf.data.Dataset\)"),
])
def test_unusable_data_is_refused_naming_the_sample_and_what_to_give(dataset: object, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        read_samples(dataset, _host(_plain_model()))


# -- llm-compressor's runs on a keras-hub Llama fed keras-hub's own inputs ------------------------
def _own(name: str) -> list[dict[str, np.ndarray]]:
    return [{"token_ids": np.asarray(ids, "int32"), "padding_mask": np.ones(len(ids), bool)}
            for ids in _case(name)["calibration"]["token_ids"]]


def _zeros(entry: dict) -> np.ndarray:
    bits = np.unpackbits(np.frombuffer(base64.b64decode(entry["zeros_bitmask_b64"]), np.uint8), bitorder="big")
    return bits[: int(np.prod(entry["shape"]))].reshape(entry["shape"]).astype(bool)


@needs_hub
def test_sparsegpt_case_02_fed_keras_hub_inputs_puts_llm_compressors_zeros(tmp_path: pathlib.Path) -> None:
    name = "02_sparsegpt_2of4"
    model = llama(hf_folder(tmp_path / name, name))
    recipe_spec.oneshot(model=model, recipe=_case(name)["recipe_yaml"], dataset=_own(name),
                        num_calibration_samples=16, shuffle_calibration_samples=False, batch_size=1)
    host = _host(model)
    agreement = {layer: float(((host.weight(layer) == 0) == _zeros(entry)).mean())
                 for layer, entry in json.loads((CASES / name / "masks.json").read_text())["layers"].items()}
    assert len(agreement) == 14 and min(agreement.values()) >= 0.99, agreement


@needs_hub
def test_gptq_w4a16_case_10_fed_a_tf_data_dataset_of_keras_hub_inputs_lands_on_llm_compressors_grid(
        tmp_path: pathlib.Path) -> None:
    """Per layer, the share of weights on llm-compressor's grid point (its final weight over
    its scale), read from the Keras int4 layer."""
    from recipe_spec_keras.quantized import keras_weight
    from safetensors.numpy import load_file

    name = "10_staged_sparse24_gptq_w4a16"
    model = llama(hf_folder(tmp_path / name, name))
    layers = {n: lin.layer for n, lin in _host(model)._linear.items() if not lin.reverse and n != "lm_head"}
    own = _own(name)
    dataset = tf.data.Dataset.from_generator(lambda: iter(own), output_signature={
        "token_ids": tf.TensorSpec([None], tf.int32), "padding_mask": tf.TensorSpec([None], tf.bool)})
    recipe_spec.oneshot(model=model, recipe=_case(name)["recipe_yaml"], dataset=dataset,
                        num_calibration_samples=16, shuffle_calibration_samples=False, batch_size=1)
    final = load_file(str(CASES / name / "final.safetensors"))
    agreement = {}
    for module, layer in layers.items():
        scale = np.repeat(final[f"{module}.weight_scale"], 128, axis=1)
        agreement[module] = float((np.round(keras_weight(layer) / scale) == np.round(final[f"{module}.weight"] / scale)).mean())
    assert len(agreement) == 14 and min(agreement.values()) >= 0.98, agreement


# -- the checkpoint's config.json against the backbone ----------------------------------------------
@needs_hub
def test_a_backbone_unlike_its_checkpoints_config_is_a_warning_naming_the_field_and_the_fix(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    """Case 02's checkpoint with ``rms_norm_eps: 1e-5``: keras-hub's ``from_preset`` gives the
    backbone 1e-6, ``load_causal_lm`` the checkpoint's."""
    from recipe_spec_keras.hub import config_differences, load_causal_lm, remember_checkpoint

    folder = hf_folder(tmp_path / "eps", "02_sparsegpt_2of4")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(config, rms_norm_eps=1e-5)))
    plain = llama(folder)
    assert plain.backbone.layer_norm_epsilon == 1e-6
    assert config_differences(plain, folder) == [("layer_norm_epsilon", 1e-6, "rms_norm_eps", 1e-5)]
    with caplog.at_level(logging.WARNING, logger="recipe_spec.oneshot"):
        _host(plain)  # from_preset leaves no trace of the folder: nothing to compare with
        assert not caplog.records
        remember_checkpoint(plain, folder)
        _host(plain)
        (record,) = caplog.records
        text = record.getMessage()
        assert "layer_norm_epsilon=1e-06" in text and "rms_norm_eps: 1e-05" in text
        assert "recipe_spec_keras.hub.load_causal_lm" in text and str(folder) in text
        caplog.clear()
        loaded = load_causal_lm(folder)
        assert loaded.backbone.layer_norm_epsilon == 1e-5 and config_differences(loaded, folder) == []
        _host(loaded)
        assert not caplog.records
