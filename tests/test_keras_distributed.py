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


RELEASE_SCRIPT = textwrap.dedent(
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
      - !GMPruningModifier {params: [fc1/kernel], init_sparsity: 0.3, final_sparsity: 0.6,
                            start_epoch: 0, end_epoch: 1, update_frequency: 0.5, leave_enabled: false}
    '''
    S = 4
    rng = np.random.default_rng(0)
    x = rng.normal(size=(S * 8, 6)).astype("float32")
    y = rng.normal(size=(S * 8, 3)).astype("float32")

    def run(strategy):
        with strategy.scope():
            keras.utils.set_random_seed(0)
            inputs = keras.Input((6,))
            h = keras.layers.Dense(16, name="fc1", activation="tanh")(inputs)
            model = keras.Model(inputs, keras.layers.Dense(3, name="fc2")(h))
            optimizer = keras.optimizers.SGD(learning_rate=0.1)  # no momentum: w = w - lr * g
            manager = ScheduledModifierManager.from_yaml(recipe)
            model, optimizer, callbacks = manager.modify(model, optimizer, steps_per_epoch=S)
            model.compile(optimizer=optimizer, loss="mse")
        kernels = []

        class Keep(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                v = model.get_layer("fc1").kernel
                tv = getattr(v, "value", v)
                kernels.append([np.asarray(r).tolist() for r in strategy.experimental_local_results(tv)])
                if batch == 3 and not weights:  # the weights step 4's forward pass sees
                    weights.extend(w.tolist() for w in model.get_weights())

        weights = []
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[*callbacks, Keep()])
        return kernels, weights

    mirrored, _ = run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    single, weights = run(tf.distribute.get_strategy())
    print("RESULT" + json.dumps({"mirrored": mirrored, "single": single, "weights": weights,
                                 "x": x[:8].tolist(), "y": y[:8].tolist()}))
    """
)


def test_release_step_zeroes_every_replica_before_the_update() -> None:
    """``leave_enabled: false`` at step 4: the final mask zeroes the weights after the step's
    gradient and before its update on every replica, so the replicas' kernels equal one
    process's at every step (a replica that skipped the zeroing would end step 4 at
    ``w - lr * g`` instead of ``-lr * g``)."""
    import json

    import numpy as np

    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, "-c", RELEASE_SCRIPT], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.split("RESULT", 1)[1])
    mirrored, single = result["mirrored"], result["single"]
    assert len(mirrored) == len(single) == 8
    for k in range(8):
        one = np.asarray(single[k][0])
        for replica in mirrored[k]:
            np.testing.assert_allclose(np.asarray(replica), one, rtol=1e-5, atol=1e-6, err_msg=f"step {k}")
    # steps 0, 2: 30% then 56.25% (cubic) held; step 4 prunes to 60% after its gradient, zeroes
    # those weights before its update (both replicas, as one process: compared above), releases
    # (SGD without momentum: step 4's gradient was masked by the 56.25% mask, so those 54 stay
    # 0 and the 4 more of the 60% target take one step from 0; from step 5 all regrow)
    zeros = [int((np.asarray(k[0]) == 0).sum()) for k in single]
    assert zeros == [29, 29, 54, 54, 54, 0, 0, 0]
    # step 4 by hand (float64): the gradient of the MSE at the weights after step 3, then the 4
    # weights the 60% target adds are zeroed before the update: they end at -lr * g exactly
    w1, b1, w2, b2 = (np.asarray(w, dtype=np.float64) for w in result["weights"])
    x, y = np.asarray(result["x"]), np.asarray(result["y"])
    h = np.tanh(x @ w1 + b1)
    d_out = 2 * (h @ w2 + b2 - y) / y.size
    g1 = x.T @ ((d_out @ w2.T) * (1 - h**2))
    newly = np.zeros(w1.size, dtype=bool)
    newly[np.argsort(np.abs(w1).ravel(), kind="stable")[54:58]] = True
    newly = newly.reshape(w1.shape)
    at = np.asarray(single[4][0])
    np.testing.assert_allclose(at[newly], -0.1 * g1[newly], rtol=1e-4)
    kept = (w1 != 0) & ~newly
    np.testing.assert_allclose(at[kept], (w1 - 0.1 * g1)[kept], rtol=1e-4, atol=1e-7)
