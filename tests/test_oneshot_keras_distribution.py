"""One-shot on Keras's JAX backend under ``keras.distribution.DataParallel``: each calibration
batch's rows are sharded over the devices (two CPU devices here, from
``XLA_FLAGS=--xla_force_host_platform_device_count=2``) and the result is the one-device run's,
up to float rounding."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r'''
import json, pathlib, sys
sys.path.insert(0, "tests")
import numpy as np, keras, jax
import recipe_spec
from recipe_spec_keras.hub import load_causal_lm
from recipe_spec_keras.inputs import feed
from keras_hub_cases import hf_folder, samples

folder = hf_folder(pathlib.Path(sys.argv[1]), "02_sparsegpt_2of4")
recipe = "s_stage:\n  s_modifiers:\n    SparseGPTModifier: {sparsity: 0.5, targets: [Linear], ignore: [lm_head]}\n"
data = samples("02_sparsegpt_2of4")[:4]

def run():
    model = load_causal_lm(folder)
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=data, batch_size=2, progress=False)
    return model, [np.asarray(keras.ops.convert_to_numpy(v)) for v in model.weights]

_, one = run()
keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
model, two = run()
rows = lambda n: {"input_ids": np.ones((n, 8), "int32"), "attention_mask": np.ones((n, 8), "int32")}
even, odd = feed(model, rows(4)), feed(model, rows(3))
print(json.dumps({
    "devices": len(jax.devices()),
    "batch_devices": sorted(len(v.sharding.device_set) for v in even.values()),
    "odd_batch_is_numpy": all(isinstance(v, np.ndarray) for v in odd.values()),
    "variable_devices": len(model.weights[0].value.sharding.device_set),
    "sparsity": float(np.mean(next(w for v, w in zip(model.weights, two)
                                   if v.path.endswith("transformer_layer_0/self_attention/query/kernel")) == 0)),
    "zeros_equal": min(float(np.mean((a == 0) == (b == 0))) for a, b in zip(one, two)),
    "max_diff": max(float(np.abs(a - b).max()) for a, b in zip(one, two)),
}))
'''


@pytest.mark.skipif(importlib.util.find_spec("jax") is None or importlib.util.find_spec("keras_hub") is None,
                    reason="needs jax and keras-hub")
def test_a_data_parallel_jax_run_shards_each_batch_and_gives_the_one_device_result(tmp_path: Path) -> None:
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="",
               XLA_FLAGS="--xla_force_host_platform_device_count=2", PYTHONHASHSEED="0")
    script = tmp_path / "data_parallel.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "case")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["devices"] == 2
    assert report["batch_devices"] == [2, 2]  # token ids and padding mask: rows on both devices
    assert report["variable_devices"] == 2  # the weights replicated
    assert report["odd_batch_is_numpy"]  # 3 rows do not divide over 2 devices: the batch runs whole
    assert 0.45 < report["sparsity"] < 0.55
    # a device's share of a batch is a smaller product, which XLA may run with another kernel:
    # the same zeros, the kept values within float rounding (0 to 1.3e-6 seen, weights ~0.1)
    assert report["zeros_equal"] == 1.0 and report["max_diff"] <= 1e-5
