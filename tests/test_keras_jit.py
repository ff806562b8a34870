"""The same GMP + LR-function recipe with ``jit_compile=True`` (XLA) and with ``run_eagerly=True``:
the LR of every step and the first mask update (same weights in both) are identical, and the
sparsity is exact at every step in both modes. Later masks rank weights trained by different
kernels (XLA vs eager), so they may differ in the last bits and are not compared."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402

RECIPE = """
modifiers:
  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 3}
  - !GMPruningModifier {params: __ALL_PRUNABLE__, init_sparsity: 0.1, final_sparsity: 0.75,
                        start_epoch: 0, end_epoch: 2, update_frequency: 0.5}
"""
S, EPOCHS = 4, 3


def _net() -> keras.Model:
    inputs = keras.Input((12, 12, 3))
    h = keras.layers.Conv2D(8, 3, name="conv1", activation="relu")(inputs)
    h = keras.layers.Conv2D(8, 3, name="conv2", activation="relu")(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(16, name="fc1", activation="relu")(h)
    return keras.Model(inputs, keras.layers.Dense(4, name="fc2")(h))


def _run(mode: str, weights: list[np.ndarray]) -> dict:
    model = _net()
    model.set_weights(weights)
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(learning_rate=0.1, momentum=0.9), S)
    model.compile(optimizer=optimizer, loss="mse", **{mode: True})
    rng = np.random.default_rng(0)
    x = rng.normal(size=(S * 8, 12, 12, 3)).astype("float32")
    y = rng.normal(size=(S * 8, 4)).astype("float32")
    lrs: list[float] = []
    masks: list[dict[str, np.ndarray]] = []
    exact: list[bool] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))
            row = {}
            for name, entry in manager.runtime.masks.params.items():
                value = np.asarray(entry.variable.numpy())
                row[name] = entry.mask.copy()
                n = entry.mask.size
                exact.append(int((~entry.mask).sum()) == round(n * entry.applied_sparsity)
                             and bool((value[~entry.mask] == 0).all()))
            masks.append(row)

    model.fit(x, y, batch_size=8, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[*callbacks, Record()])
    return {"lrs": lrs, "masks": masks, "exact": exact, "jit": getattr(model, "jit_compile", None),
            "eager": model.run_eagerly, "final": {n: e.applied_sparsity for n, e in manager.runtime.masks.params.items()}}


def test_jit_and_eager_agree() -> None:
    keras.utils.set_random_seed(0)
    weights = _net().get_weights()
    jit = _run("jit_compile", weights)
    eager = _run("run_eagerly", weights)
    assert jit["jit"] is True and not jit["eager"] and eager["eager"] is True
    assert len(jit["lrs"]) == len(eager["lrs"]) == S * EPOCHS
    assert jit["lrs"] == eager["lrs"]  # every step's LR, bit for bit
    assert jit["lrs"][0] == pytest.approx(0.05) and jit["lrs"][-1] != jit["lrs"][0]
    first_j, first_e = jit["masks"][0], eager["masks"][0]  # the step-0 update ranks identical weights
    assert set(first_j) == set(first_e) == {"conv1/kernel", "conv2/kernel", "fc1/kernel", "fc2/kernel"}
    for name in first_j:
        assert np.array_equal(first_j[name], first_e[name]), name
    assert jit["exact"] and all(jit["exact"]) and eager["exact"] and all(eager["exact"])
    assert all(v == pytest.approx(0.75) for v in jit["final"].values())
    assert all(v == pytest.approx(0.75) for v in eager["final"].values())
