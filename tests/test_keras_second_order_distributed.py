"""M-FAC and OBS on Keras under ``tf.distribute.MirroredStrategy`` with two logical CPU devices:
the float64 twins of SparseML's golden runs (tests/test_keras_second_order.py), each global
batch of 4 split 2 + 2 over the replicas.

- training-time M-FAC (case 04): the gradients are handed over once per step, in
  cross-replica context, as the sum of the replicas' gradients (what the optimizer applies);
- OBS with a grad sampler (case 14): the sampler runs once, in the one Python process.

At every step both replicas hold identical kernels, zero wherever the mask is, and the masks
are SparseML's; the weights agree with SparseML's to rounding (the all-reduce adds the two
halves of each batch in another order). TF's devices must be split before TensorFlow
initializes, so each run is a fresh process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

TESTS = Path(__file__).resolve().parent

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    sys.path.insert(0, TESTS)
    import keras, numpy as np
    import test_keras_second_order as t
    from recipe_spec import ScheduledModifierManager

    case = t.load(STEM)
    names = list(case["param_numel"])
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    rows, checks = [], []

    class Check(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            row = {}
            for name in names:
                entry = manager.runtime.masks.params.get(t.KERAS_NAMES[name])
                variable = manager.runtime._vars[t.KERAS_NAMES[name]][0]
                local = [np.asarray(r) for r in strategy.experimental_local_results(variable.value)]
                row[name] = {
                    "replicas": len(local),
                    "same": all(np.array_equal(local[0], r) for r in local[1:]),
                    "masked": entry is None or all(bool((r[~entry.mask] == 0).all()) for r in local),
                }
            checks.append(row)

    with t.float64(), t.recorded() as results:
        with strategy.scope():
            model = t.twin(case)
            manager = ScheduledModifierManager.from_yaml(case["recipe"])
            kwargs = {"grad_sampler": t.grad_sampler(case)} if case.get("grad_sampler") else {}
            model, optimizer, callbacks = manager.modify(model, t.sgd(), case["steps_per_epoch"], **kwargs)
            model.compile(optimizer=optimizer, loss="mse")
        t.fit_rows(case, manager, model, [*callbacks, Check()], range(case["epochs"]), rows)
        manager.finalize(model)
    worst = t.check_steps(case, rows)
    t.check_events(case, results)
    print("RESULT" + json.dumps({"replicas": strategy.num_replicas_in_sync, "checks": checks, "worst": worst}))
    """
)


@pytest.mark.parametrize("stem", ["04", "14"], ids=["mfac-training", "obs-sampler"])
def test_every_replica_prunes_alike(stem: str) -> None:
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    script = f"TESTS = {str(TESTS)!r}\nSTEM = {stem!r}\n" + SCRIPT
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=TESTS.parent)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.split("RESULT", 1)[1])
    assert result["replicas"] == 2
    assert len(result["checks"]) == 16
    for k, row in enumerate(result["checks"]):
        for name, c in row.items():
            assert c["replicas"] == 2 and c["same"] and c["masked"], (k, name, c)
    assert result["worst"] < 1e-12
