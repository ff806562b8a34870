"""``recipe_spec.oneshot`` on Keras 3: Dense and EinsumDense layers pruned as the Linear layers
they are, a keras-hub Llama loaded from a Hugging Face checkpoint named by that checkpoint, and
llm-compressor 0.14's own runs (``tests/data/conformance/llmcompressor``) reproduced on it.

The file runs on the process's Keras backend (TensorFlow in the suite); ``test_keras_backends.py``
runs it again on JAX and torch.
"""

from __future__ import annotations

import base64
import json
import pathlib

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from keras_hub_cases import CASES, ROOT, hf_folder, llama, needs_hub  # noqa: E402
from keras_hub_cases import case as _case  # noqa: E402
from keras_hub_cases import plain_model as _plain_model  # noqa: E402
from keras_hub_cases import plain_samples as _plain_samples  # noqa: E402
from keras_hub_cases import samples as _samples  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec.masks.algorithms import compute_mask  # noqa: E402
from recipe_spec.masks.numpy_ops import NUMPY_OPS  # noqa: E402
from recipe_spec.oneshot import last_report  # noqa: E402
from recipe_spec.oneshot.shared.obs import sparsegpt_prune  # noqa: E402


def _host(model: object) -> object:
    from recipe_spec_keras.oneshot import KerasCalibrationHost

    return KerasCalibrationHost(model)


# -- plain Keras models --------------------------------------------------------------------------
def test_an_einsum_kernel_is_seen_as_its_linear_weight() -> None:
    model = _plain_model()
    host = _host(model)
    info = {m.name: m for m in host.modules()}
    assert info["heads"].prunable and "Linear" in info["heads"].classes and "EinsumDense" in info["heads"].classes
    assert info["heads"].weight_shape == (16, 24) and info["fc1"].weight_shape == (24, 16)
    assert not info["embed"].prunable
    kernel = keras.ops.convert_to_numpy(model.get_layer("heads").kernel)  # (24, 2, 8)
    np.testing.assert_array_equal(host.weight("heads"), kernel.reshape(24, 16).T)
    new = np.arange(16 * 24, dtype=np.float32).reshape(16, 24)
    host.set_weight("heads", new)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.get_layer("heads").kernel), new.T.reshape(24, 2, 8))


def test_sparsegpt_on_a_functional_model_is_the_core_solve_on_each_layers_inputs() -> None:
    model = _plain_model()
    samples = _plain_samples()
    embed = keras.ops.convert_to_numpy(model.get_layer("embed").embeddings)
    fc1 = _host(model).weight("fc1")
    recipe = ("s_stage:\n  s_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n"
              "      mask_structure: '2:4'\n      ignore: [head]\n")
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=samples, num_calibration_samples=6,
                        shuffle_calibration_samples=False)
    hessian = np.zeros((16, 16), np.float32)
    for s in samples:  # H = (2/n) sum X^T X over n sequences, X: fc1's input (the embeddings)
        x = embed[np.asarray(s["input_ids"])]
        hessian += 2.0 * x.T @ x
    hessian /= len(samples)
    expected = sparsegpt_prune(NUMPY_OPS, fc1, hessian, sparsity=0.5, prune_n=2, prune_m=4,
                               block_size=128, dampening_frac=0.01).weight
    host = _host(model)
    np.testing.assert_array_equal(host.weight("fc1") == 0, expected == 0)
    np.testing.assert_allclose(host.weight("fc1"), expected, rtol=1e-4, atol=1e-5)
    heads = host.weight("heads")
    assert all((row.reshape(-1, 4) == 0).sum(axis=1).min() >= 2 for row in heads)
    assert float((host.weight("head") == 0).mean()) == 0.0
    assert [layer.module for layer in last_report().layers] == ["fc1", "heads"]


def test_one_shot_magnitude_prunes_each_kernel_by_its_own_magnitude() -> None:
    model = _plain_model()
    before = {n: _host(model).weight(n) for n in ("fc1", "heads", "head")}
    recipe = ("s_stage:\n  s_modifiers:\n    MagnitudePruningModifier:\n      targets: ['re:(fc1|heads)$']\n"
              "      init_sparsity: 0.3\n      final_sparsity: 0.3\n")
    recipe_spec.oneshot(model=model, recipe=recipe)
    host = _host(model)
    for name, w in before.items():
        if name == "head":
            np.testing.assert_array_equal(host.weight(name), w)
        else:
            np.testing.assert_array_equal(host.weight(name), np.where(compute_mask(NUMPY_OPS, w, 0.3, "unstructured"), w, 0.0))


def test_schemas_list_the_one_shot_modifiers_keras_runs() -> None:
    data = json.loads((ROOT / "schemas" / "backends.json").read_text(encoding="utf-8"))
    assert data["backends"]["keras"]["oneshot_modifiers"] == [
        "AWQModifier", "ConstantPruningModifier", "GPTQModifier", "LogarithmicEqualizationModifier",
        "MagnitudePruningModifier", "QuantizationModifier", "REAPPruningModifier", "SmoothQuantModifier",
        "SparseGPTModifier", "SpinQuantModifier", "WandaPruningModifier"]


# -- a keras-hub Llama from a Hugging Face checkpoint -------------------------------------------
@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    """Each case's initial weights and config as a Hugging Face checkpoint folder."""
    return {name: hf_folder(tmp_path_factory.mktemp(name), name) for name in ("02_sparsegpt_2of4", "04_wanda_2of4")}


def _llama(folders: dict[str, pathlib.Path], name: str) -> object:
    return llama(folders[name])


def _zeros(entry: dict) -> np.ndarray:
    bits = np.unpackbits(np.frombuffer(base64.b64decode(entry["zeros_bitmask_b64"]), np.uint8), bitorder="big")
    return bits[: int(np.prod(entry["shape"]))].reshape(entry["shape"]).astype(bool)


@needs_hub
def test_a_keras_hub_llama_answers_to_its_checkpoints_names(hf_folders: dict[str, pathlib.Path]) -> None:
    model = _llama(hf_folders, "02_sparsegpt_2of4")
    host = _host(model)
    prunable = [m.name for m in host.modules() if m.prunable]
    layer = [f"model.layers.0.{p}" for p in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                             "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
    assert prunable == ["lm_head", *layer, *(n.replace(".0.", ".1.") for n in layer)]
    assert host.repeated_blocks(None) == ["model.layers.0", "model.layers.1"]
    assert host.repeated_blocks(["LlamaTransformerDecoder"]) == ["model.layers.0", "model.layers.1"]
    from safetensors.numpy import load_file

    initial = load_file(str(CASES / "02_sparsegpt_2of4" / "initial.safetensors"))
    for name in ("lm_head", "model.layers.1.self_attn.o_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.mlp.up_proj"):
        np.testing.assert_array_equal(host.weight(name), initial[f"{name}.weight"])


@needs_hub
@pytest.mark.parametrize("name", ["02_sparsegpt_2of4", "04_wanda_2of4"])
def test_conformance_case_on_a_keras_hub_llama(hf_folders: dict[str, pathlib.Path], name: str) -> None:
    """The zero patterns llm-compressor stored, on a keras-hub Llama loaded from the case's
    checkpoint and fed the same token ids in the same order (``token_ids``/``padding_mask``)."""
    from safetensors.numpy import load_file

    model = _llama(hf_folders, name)
    recipe_spec.oneshot(model=model, recipe=_case(name)["recipe_yaml"], dataset=_samples(name),
                        num_calibration_samples=16, shuffle_calibration_samples=False, batch_size=1)
    assert last_report().order == _case(name)["calibration"]["order_of_samples_fed"]
    final = load_file(str(CASES / name / "final.safetensors"))
    host = _host(model)
    agreement = {}
    for layer, entry in json.loads((CASES / name / "masks.json").read_text())["layers"].items():
        ours, ref = host.weight(layer), final[f"{layer}.weight"]
        agreement[layer] = float(((ours == 0) == _zeros(entry)).mean())
        assert float(np.abs(ours - ref).max() / np.abs(ref).max()) <= 1e-3, layer
    assert min(agreement.values()) >= 0.99, agreement
    np.testing.assert_array_equal(host.weight("lm_head"), final["lm_head.weight"])
    if keras.backend.backend() == "tensorflow":  # once: the PyTorch run of recipe-spec agrees too
        _same_as_the_torch_run(name, host)


def _same_as_the_torch_run(name: str, host: object) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**_case(name)["model_config"])).float().eval()
    model.load_state_dict(load_file(str(CASES / name / "initial.safetensors")))
    recipe_spec.oneshot(model=model, recipe=_case(name)["recipe_yaml"], dataset=_samples(name),
                        num_calibration_samples=16, shuffle_calibration_samples=False)
    for key, w in model.state_dict().items():
        if key.endswith("proj.weight"):
            ours = host.weight(key.removesuffix(".weight"))
            assert float(((ours == 0) == (w.numpy() == 0)).mean()) >= 0.99, key
            np.testing.assert_allclose(ours, w.numpy(), rtol=0, atol=1e-3 * float(w.abs().max()))


@needs_hub
def test_recipe_names_select_keras_hub_layers_the_way_they_select_hugging_face_modules(
        hf_folders: dict[str, pathlib.Path]) -> None:
    model = _llama(hf_folders, "04_wanda_2of4")
    host = _host(model)
    before = {m.name: host.weight(m.name) for m in host.modules() if m.prunable}
    recipe = ("s_stage:\n  s_modifiers:\n    WandaPruningModifier:\n      sparsity: 0.5\n"
              "      mask_structure: '2:4'\n      targets: [lm_head, 're:model.layers.1.mlp.*']\n"
              "      ignore: [model.layers.1.mlp.up_proj]\n")
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples("04_wanda_2of4")[:4], num_calibration_samples=4,
                        pipeline="sequential")
    changed = sorted(n for n, w in before.items() if not np.array_equal(host.weight(n), w))
    assert changed == ["lm_head", "model.layers.1.mlp.down_proj", "model.layers.1.mlp.gate_proj"]
    assert float((host.weight("lm_head") == 0).mean()) == 0.5


@needs_hub
def test_output_dir_holds_the_keras_hub_preset_and_the_recipe(hf_folders: dict[str, pathlib.Path],
                                                               tmp_path: pathlib.Path) -> None:
    model = _llama(hf_folders, "04_wanda_2of4")
    recipe = "s_stage:\n  s_modifiers:\n    ConstantPruningModifier:\n      targets: [Linear]\n"
    recipe_spec.oneshot(model=model, recipe=recipe, output_dir=tmp_path / "out")
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"config.json", "recipe.yaml"} <= written, written
    assert (tmp_path / "out" / "recipe.yaml").read_text() == recipe


@needs_hub
def test_a_keras_hub_llama_loaded_by_load_causal_lm_computes_the_checkpoints_logits(tmp_path: pathlib.Path) -> None:
    """keras-hub 0.32's Llama converter drops ``rms_norm_eps``; a checkpoint with 1e-5 (as
    llm-compressor's quality anchor has; keras-hub's default is 1e-6) gives transformers'
    logits only with it. A small random Llama of that configuration, saved by transformers."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from recipe_spec_keras.hub import load_causal_lm

    config = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                                      max_position_embeddings=128, tie_word_embeddings=False)
    torch.manual_seed(0)
    folder = tmp_path / "llama"
    transformers.LlamaForCausalLM(config).save_pretrained(str(folder))
    model = load_causal_lm(folder)
    assert model.backbone.layer_norm_epsilon == 1e-5
    ids = np.random.default_rng(0).integers(0, 512, 48)
    hidden = model.backbone({"token_ids": ids[None].astype("int32"), "padding_mask": np.ones((1, ids.size), "int32")})
    ours = keras.ops.convert_to_numpy(model.backbone.token_embedding(hidden, reverse=True))[0]
    torch.set_num_threads(1)
    reference = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = reference(input_ids=torch.tensor(ids[None])).logits[0].numpy()
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-4)


@needs_hub
def test_keras_hub_layers_fed_one_input_share_its_hessian_product(hf_folders: dict[str, pathlib.Path],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """q/k/v (and gate/up) of a keras-hub Llama see one input: it is made rows once and its
    Hessian product computed once per call, and the weights are those of computing each alone."""
    from recipe_spec_keras import oneshot_calls
    from shared_products import count_products

    name = "02_sparsegpt_2of4"
    counts = count_products(monkeypatch)

    def run() -> list[np.ndarray]:
        model = _llama(hf_folders, name)
        recipe_spec.oneshot(model=model, recipe=_case(name)["recipe_yaml"], dataset=_samples(name)[:4],
                            num_calibration_samples=4, shuffle_calibration_samples=False, progress=False)
        return [np.array(keras.ops.convert_to_numpy(v)) for v in model.weights]

    shared = run()
    assert counts and sum(counts) <= 0.6 * len(counts)  # 4 products for a layer's 7 Linear layers
    # the eager and the compiled calls' observers both make rows through it
    monkeypatch.setattr(oneshot_calls, "shared_rows", lambda lin, inputs, seen: lin.rows_of(inputs))
    counts.clear()
    alone = run()
    assert sum(counts) == len(counts)
    for a, b in zip(shared, alone, strict=True):
        np.testing.assert_array_equal(a, b)
