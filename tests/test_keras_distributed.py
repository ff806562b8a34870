"""The Keras runtime under ``tf.distribute.MirroredStrategy`` on two logical CPU devices: the
masks assigned from the callback reach every replica (identical masked kernels, exact
sparsity). TF's devices must be split before TensorFlow initializes, so the body runs in a
fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow")

SCRIPT = textwrap.dedent(
    """
    import os, json
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras, numpy as np
    from recipe_spec import ScheduledModifierManager

    recipe = '''
    modifiers:
      - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 3}
      - !GMPruningModifier {params: __ALL_PRUNABLE__, init_sparsity: 0.05, final_sparsity: 0.8,
                            start_epoch: 0.5, end_epoch: 2, update_frequency: 0.5}
    '''
    S = 4
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        inputs = keras.Input((12, 12, 3))
        h = keras.layers.Conv2D(8, 3, name="conv1", activation="relu")(inputs)
        h = keras.layers.Flatten()(h)
        h = keras.layers.Dense(16, name="fc1", activation="relu")(h)
        model = keras.Model(inputs, keras.layers.Dense(4, name="fc2")(h))
        optimizer = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
        manager = ScheduledModifierManager.from_yaml(recipe)
        model, optimizer, callbacks = manager.modify(model, optimizer, steps_per_epoch=S)
        model.compile(optimizer=optimizer, loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(S * 8, 12, 12, 3)).astype("float32")
    y = rng.normal(size=(S * 8, 4)).astype("float32")
    checks = []

    class Check(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            row = {}
            for name, entry in manager.runtime.masks.params.items():
                v = entry.variable
                tv = getattr(v, "value", v)
                local = [np.asarray(r) for r in strategy.experimental_local_results(tv)]
                row[name] = {
                    "replicas": len(local),
                    "devices": sorted({r.device for r in strategy.experimental_local_results(tv)}),
                    "same": all(np.array_equal(local[0], r) for r in local[1:]),
                    "masked": all(bool((r[~entry.mask] == 0).all()) for r in local),
                    "zeros": [int((r == 0).sum()) for r in local],
                    "want": int((~entry.mask).sum()),
                    "size": int(entry.mask.size),
                    "target": entry.applied_sparsity,
                }
            checks.append(row)

    model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0, callbacks=[*callbacks, Check()])
    print("RESULT" + json.dumps({"replicas": strategy.num_replicas_in_sync, "checks": checks}))
    """
)


def test_masks_reach_every_replica() -> None:
    import json

    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.split("RESULT", 1)[1])
    assert result["replicas"] == 2
    checks = result["checks"]
    assert len(checks) == 12 and set(checks[-1]) == {"conv1/kernel", "fc1/kernel", "fc2/kernel"}
    for k, row in enumerate(checks):
        for name, c in row.items():
            assert c["replicas"] == 2 and len(c["devices"]) == 2, (k, name, c)
            assert c["same"] and c["masked"], (k, name, c)
            # exact sparsity on each replica: the masked count is round(n * target)
            assert c["want"] == round(c["size"] * c["target"]), (k, name, c)
            assert all(z >= c["want"] for z in c["zeros"]), (k, name, c)
    final = checks[-1]
    assert all(c["target"] == pytest.approx(0.8) for c in final.values())
