"""Keras 3 one-shot compression on a GPU, on the JAX and torch backends: SparseGPT 2:4, Wanda
50% and GPTQ int8 per channel (weight-only, Keras's ``int8`` layer) through
``recipe_spec.oneshot`` on a plain functional model (Embedding, Dense, EinsumDense, Dense head),
in a subprocess per backend (Keras picks its backend once per process), on a GPU (``cuda``)
and, for reference, on the CPU.

The CPU run is checked against references outside the Keras backend: SparseGPT's
``fc1`` is the core's NumPy solve on the Hessian of its inputs (the embeddings of the sample
ids), Wanda's mask keeps each row's half with the largest ``|W| * ||x||``, written out here, and
GPTQ's weights are Keras's int8 integers (in ``[-128, 127]``) times compressed-tensors' channel
scale ``absmax / 127.5`` of the original weight. The GPU run must really run on the GPU
and give the CPU run's Wanda zeros exactly, SparseGPT's pattern on at least 95% of the rows (with
the values of those rows within 1e-3), and GPTQ's integers on at least 99% of the weights with
the same scales. The scripts run with TensorFlow made unimportable and must not import keras-hub
(the GPU machine has neither); the model's weights are drawn by NumPy, the same on every device."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from keras_subprocess import BACKENDS, run_script

from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec.oneshot.shared.obs import sparsegpt_prune

#: the GPU only: each GPU run makes its CPU reference itself, and the same recipes run on the CPU
#: on every backend in the other Keras test files (a process per backend costs seconds)
DEVICES = [pytest.param("cuda", marks=pytest.mark.cuda)]
LAYERS = ("fc1", "heads")  # the compressed layers; the head is ignored by every recipe

SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.modules["tensorflow"] = None  # the GPU machine has no TensorFlow: importing it fails here too
    import numpy as np
    import keras
    import recipe_spec
    from recipe_spec_keras.oneshot import KerasCalibrationHost
    from recipe_spec_keras.quantized import keras_weight

    VOCAB, WIDTH, LAYERS = 48, 32, ("fc1", "heads")

    def plain_model():
        ids = keras.Input(shape=(None,), dtype="int32", name="ids")
        x = keras.layers.Embedding(VOCAB, WIDTH, name="embed")(ids)
        x = keras.layers.Dense(64, activation="relu", name="fc1")(x)
        x = keras.layers.EinsumDense("btd,dhk->bthk", output_shape=(None, 2, 16), name="heads")(x)
        x = keras.layers.Reshape((-1, WIDTH))(x)
        model = keras.Model(ids, keras.layers.Dense(VOCAB, name="head")(x))
        # weights drawn by NumPy: Keras's torch backend draws them on the GPU, from another stream
        init = np.random.default_rng(3)
        for w in model.weights:
            scale = 0.1 if w.path.endswith("bias") else 1.0 if "embed" in w.path else w.shape[0] ** -0.5
            w.assign((init.normal(size=tuple(w.shape)) * scale).astype("float32"))
        return model

    rng = np.random.default_rng(0)
    samples = [{"input_ids": rng.integers(0, VOCAB, 12).tolist(), "attention_mask": [1] * 12} for _ in range(8)]
    RECIPES = {
        "sparsegpt": "s_stage:\\n  s_modifiers:\\n    SparseGPTModifier:\\n      sparsity: 0.5\\n"
                     "      mask_structure: '2:4'\\n      ignore: [head]\\n",
        "wanda": "s_stage:\\n  s_modifiers:\\n    WandaPruningModifier:\\n      sparsity: 0.5\\n"
                 "      mask_structure: '0:0'\\n      ignore: [head]\\n",
        "gptq": "q_stage:\\n  q_modifiers:\\n    GPTQModifier:\\n      block_size: 32\\n"
                "      dampening_frac: 0.05\\n      ignore: [head]\\n      config_groups:\\n        group_0:\\n"
                "          targets: [Linear]\\n          input_activations: null\\n"
                "          weights: {num_bits: 8, type: int, symmetric: true, strategy: channel}\\n",
    }

    def device_of(variable):
        value = variable.value
        if keras.backend.backend() == "jax":
            return next(iter(value.devices())).platform
        return value.device.type

    saved, devices = {}, {}
    for recipe, text in RECIPES.items():
        model = plain_model()
        host = KerasCalibrationHost(model)
        solver = "numpy" if host.solver is None else type(host.solver.ops).__name__
        layers = {name: model.get_layer(name) for name in LAYERS}
        if recipe == "sparsegpt":
            saved["embed"] = keras.ops.convert_to_numpy(model.get_layer("embed").embeddings)
        for name in LAYERS:
            saved[f"{recipe}.{name}.before"] = host.weight(name)
        recipe_spec.oneshot(model=model, recipe=text, dataset=samples, num_calibration_samples=len(samples),
                            shuffle_calibration_samples=False)
        for name, layer in layers.items():
            if recipe == "gptq":
                assert layer.quantization_mode == "int8" and layer.inputs_quantizer is None, name
                weight = keras_weight(layer)
                q = keras.ops.convert_to_numpy(layer._kernel)
                saved[f"gptq.{name}.int8"] = q.reshape(q.shape[0], -1).T  # (out, in), as keras_weight
                devices[f"{recipe}.{name}"] = device_of(layer._kernel)
            else:
                weight = KerasCalibrationHost(model).weight(name)
                devices[f"{recipe}.{name}"] = device_of(layer.kernel)
            saved[f"{recipe}.{name}"] = np.asarray(weight, np.float32)
    np.savez(sys.argv[1], ids=np.asarray([s["input_ids"] for s in samples]), **saved)
    imported = [name for name in ("tensorflow", "keras_hub") if sys.modules.get(name) is not None]
    print(json.dumps({"devices": devices, "imported": imported, "solver": solver}))
    """
)


def _run(backend: str, device: str, tmp: Path, solves: str | None = None) -> tuple[set[str], dict[str, np.ndarray]]:
    """The three recipes on ``backend``, on the CPU or the GPU (``solves``: where the host
    solves, the device's default when None): the devices the compressed kernels ended on,
    and the arrays the script saved. The host solves on Keras's tensors on a GPU and where
    told so, on NumPy on a CPU by default."""
    extra = {"RECIPE_SPEC_KERAS_SOLVES": solves} if solves else None
    report, arrays = run_script(SCRIPT, backend, device, tmp, extra)
    assert report["imported"] == [], report  # neither is installed on the GPU machine
    gpu = device != "cpu" and set(report["devices"].values()) <= {"gpu", "cuda"}
    assert report["solver"] == ("KerasOps" if gpu or solves == "keras" else "numpy"), report
    return set(report["devices"].values()), arrays


def _fc1_inputs(arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """fc1's calibration inputs: the embeddings of each sample's ids (no mask, no padding)."""
    return [arrays["embed"][ids] for ids in arrays["ids"]]


def _check_sparsegpt(arrays: dict[str, np.ndarray]) -> None:
    inputs = _fc1_inputs(arrays)
    hessian = np.zeros((inputs[0].shape[1],) * 2, np.float32)
    for x in inputs:  # H = (2/n) sum X^T X over the n sequences
        hessian += 2.0 * x.T @ x
    hessian /= len(inputs)
    expected = sparsegpt_prune(NUMPY_OPS, arrays["sparsegpt.fc1.before"], hessian, sparsity=0.5, prune_n=2,
                               prune_m=4, block_size=128, dampening_frac=0.01).weight
    got = arrays["sparsegpt.fc1"]
    np.testing.assert_array_equal(got == 0, expected == 0)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    for name in LAYERS:  # 2:4 in every group of four inputs
        zeros = (arrays[f"sparsegpt.{name}"] == 0).reshape(-1, 4).sum(axis=1)
        assert zeros.min() >= 2, name


def _check_wanda(arrays: dict[str, np.ndarray]) -> None:
    """Each row keeps its half of the inputs with the largest ``|W| * ||x||`` (the norm of the
    input column over every calibration token) and keeps those weights unchanged."""
    norms = np.sqrt(sum((x.astype(np.float64) ** 2).sum(axis=0) for x in _fc1_inputs(arrays)))
    before, got = arrays["wanda.fc1.before"], arrays["wanda.fc1"]
    metric = np.abs(before) * norms[None, :]
    keep = np.zeros(before.shape, bool)
    np.put_along_axis(keep, np.argsort(-metric, axis=1)[:, : before.shape[1] // 2], True, axis=1)
    np.testing.assert_array_equal(got != 0, keep)
    np.testing.assert_array_equal(got[keep], before[keep])
    for name in LAYERS:
        assert ((arrays[f"wanda.{name}"] == 0).sum(axis=1) == arrays[f"wanda.{name}"].shape[1] // 2).all(), name


def _check_gptq(arrays: dict[str, np.ndarray]) -> None:
    """Keras's int8 integers times compressed-tensors' symmetric channel scale of the original
    weight: ``max(|min|, |max|) / ((127 - -128) / 2)`` per output row, in float32."""
    for name in LAYERS:
        q, weight = arrays[f"gptq.{name}.int8"], arrays[f"gptq.{name}"]
        before = arrays[f"gptq.{name}.before"]
        assert q.dtype == np.int8 and q.shape == weight.shape == before.shape, name
        scale = np.abs(before).max(axis=1, keepdims=True) / np.float32(127.5)
        np.testing.assert_allclose(weight, q.astype(np.float32) * scale, rtol=1e-6, atol=0, err_msg=name)
        assert np.abs(weight - before).max() <= 4 * scale.max(), name  # near the weight it replaced


def _compare_with_cpu(ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> None:
    for name in LAYERS:
        np.testing.assert_array_equal(got[f"wanda.{name}"] == 0, ref[f"wanda.{name}"] == 0, err_msg=name)
        np.testing.assert_array_equal(got[f"wanda.{name}"], ref[f"wanda.{name}"], err_msg=name)
        a, b = got[f"sparsegpt.{name}"], ref[f"sparsegpt.{name}"]
        rows = ((a == 0) == (b == 0)).all(axis=1)
        assert rows.mean() >= 0.95, (name, rows.mean())
        np.testing.assert_allclose(a[rows], b[rows], rtol=1e-3, atol=1e-5, err_msg=name)
        qa, qb = got[f"gptq.{name}.int8"], ref[f"gptq.{name}.int8"]
        assert (qa == qb).mean() >= 0.99, (name, (qa == qb).mean())
        same = qa == qb  # the scale of each row, read back where the integers agree
        sa = np.where(same, got[f"gptq.{name}"] / np.where(qa == 0, 1, qa), np.nan)
        sb = np.where(same, ref[f"gptq.{name}"] / np.where(qb == 0, 1, qb), np.nan)
        nonzero = same & (qa != 0)
        np.testing.assert_allclose(sa[nonzero], sb[nonzero], rtol=1e-5, atol=0, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_keras_oneshot_on_device(backend: str, device: str, tmp_path: Path) -> None:
    ran_on, arrays = _run(backend, device, tmp_path)
    if device == "cuda" and backend == "jax" and ran_on == {"cpu"}:
        pytest.skip("jax has no GPU backend here (pip install 'jax[cuda12]')")
    assert len(ran_on) == 1 and ran_on <= ({"cpu"} if device == "cpu" else {"gpu", "cuda"}), ran_on
    if device == "cpu":
        _check_sparsegpt(arrays)
        _check_wanda(arrays)
        _check_gptq(arrays)
    else:
        _, ref = _run(backend, "cpu", tmp_path)
        _check_sparsegpt(ref)
        _check_wanda(ref)
        _check_gptq(ref)
        _compare_with_cpu(ref, arrays)


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_keras_solves_on_keras_tensors_as_on_numpy(backend: str, tmp_path: Path) -> None:
    """The solves on Keras's own tensors (what a GPU gets), told so on the CPU: the same
    results as the NumPy solves, within what the GPU run is held to."""
    _, arrays = _run(backend, "cpu", tmp_path, solves="keras")
    _check_sparsegpt(arrays)
    _check_wanda(arrays)
    _check_gptq(arrays)
    _, ref = _run(backend, "cpu", tmp_path, solves="numpy")
    _compare_with_cpu(ref, arrays)
