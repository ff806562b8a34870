"""Keras checkpoint and resume with Keras' own saving: ``model.save`` (.keras, optimizer state
included) plus the recipe state next to it (``RecipeCheckpoint``). A run interrupted after
epoch 1 (before pruning) and after epoch 3 (mid-pruning), resumed in a fresh process with the
documented sequence, ends bit-identical to an uninterrupted run: weights, masks and LR."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("keras")

RECIPE = """
modifiers:
  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 6}
  - !GMPruningModifier
    params: __ALL_PRUNABLE__
    init_sparsity: 0.05
    final_sparsity: 0.7
    start_epoch: 1
    end_epoch: 4
    update_frequency: 0.5
"""
S, EPOCHS = 4, 6

SCRIPT = textwrap.dedent(
    """
    import os, sys
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import numpy as np, keras, tensorflow as tf
    from recipe_spec import ScheduledModifierManager
    from recipe_spec_keras.manager import load_recipe_state

    keras.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    recipe, S, epochs = {recipe!r}, {S}, {epochs}
    stop, load, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(S * 8, 12, 12, 3)).astype("float32")
    y = rng.normal(size=(S * 8, 10)).astype("float32")

    def net():
        inputs = keras.Input((12, 12, 3))
        h = keras.layers.Conv2D(8, 3, name="conv1")(inputs)
        h = keras.layers.BatchNormalization(name="bn1")(h)
        h = keras.layers.ReLU()(h)
        h = keras.layers.Conv2D(16, 3, name="conv2")(h)
        h = keras.layers.ReLU()(h)
        h = keras.layers.AveragePooling2D(4)(h)
        h = keras.layers.Flatten()(h)
        h = keras.layers.Dense(32, name="fc1", activation="relu")(h)
        return keras.Model(inputs, keras.layers.Dense(10, name="fc2")(h))

    manager = ScheduledModifierManager.from_yaml(recipe)
    if load == "-":
        model = net()
        optimizer = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
        model, optimizer, callbacks = manager.modify(model, optimizer, steps_per_epoch=S)
        model.compile(optimizer=optimizer, loss="mse")
        initial = 0
    else:  # the documented resume sequence
        model = keras.saving.load_model(load)
        model, optimizer, callbacks = manager.modify(model, model.optimizer, steps_per_epoch=S)
        manager.load_state_dict(load_recipe_state(load))
        initial = manager.runtime.epoch
    lrs = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    checkpoint = manager.runtime.checkpoint_callback(out + "/ckpt-{{epoch}}.keras")
    model.fit(x, y, batch_size=8, epochs=stop, initial_epoch=initial, shuffle=False, verbose=0,
              callbacks=[*callbacks, Record(), checkpoint])
    state = manager.state_dict()
    arrays = {{f"w_{{i}}": np.asarray(v.numpy()) for i, v in enumerate(model.weights)}}
    arrays.update({{f"o_{{i}}": np.asarray(v.numpy()) for i, v in enumerate(model.optimizer.variables)}})
    arrays.update({{f"mask_{{n.replace('/', '.')}}": m for n, (m, _, _) in state["masks"].items()}})
    np.savez(out + "/result.npz", lrs=np.array(lrs), step=state["step"],
             lr=float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)), **arrays)
    """
).format(recipe=RECIPE, S=S, epochs=EPOCHS)


def _run(tmp: Path, stop: int, load: str) -> dict:
    script = tmp / "run.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, str(script), str(stop), load, str(tmp)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    with np.load(tmp / "result.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _run(tmp_path_factory.mktemp("full"), EPOCHS, "-")


@pytest.mark.parametrize("cut", [1, 3], ids=["before-pruning", "mid-pruning"])
def test_keras_resume_is_bit_identical(cut: int, tmp_path: Path, uninterrupted: dict) -> None:
    first = tmp_path / "first"
    second = tmp_path / "second"
    first.mkdir(), second.mkdir()
    part = _run(first, cut, "-")
    assert int(part["step"]) == cut * S
    ckpt = first / f"ckpt-{cut}.keras"
    assert ckpt.exists() and Path(f"{ckpt}.recipe.npz").exists()
    resumed = _run(second, EPOCHS, str(ckpt))
    assert int(resumed["step"]) == EPOCHS * S
    # the per-step LRs: the first part's, then the resumed part's, are the uninterrupted run's
    assert np.array_equal(np.concatenate([part["lrs"], resumed["lrs"]]), uninterrupted["lrs"])
    assert float(resumed["lr"]) == float(uninterrupted["lr"])
    masks = sorted(k for k in uninterrupted if k.startswith("mask_"))
    assert len(masks) == 4 and masks == sorted(k for k in resumed if k.startswith("mask_"))
    for key in masks:
        assert np.array_equal(resumed[key], uninterrupted[key]), key
    weights = sorted(k for k in uninterrupted if k.startswith(("w_", "o_")))
    assert weights == sorted(k for k in resumed if k.startswith(("w_", "o_")))
    for key in weights:  # weights, BN statistics, momentum, iterations, learning rate
        np.testing.assert_array_equal(resumed[key], uninterrupted[key], err_msg=key)
    sparsity = np.mean([1 - uninterrupted[k].mean() for k in masks])
    assert sparsity == pytest.approx(0.7, abs=0.01)


def test_recipe_state_round_trips(tmp_path: Path) -> None:
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from recipe_spec_keras.manager import load_recipe_state, save_recipe_state

    state = {
        "version": 1, "recipe": "modifiers: []\n", "steps_per_epoch": 4, "step": 9,
        "masks": {"conv1/kernel": (np.array([[True, False]]), 1, 0.5)},
        "trainable_saved": {2: {"bn1/gamma": True}}, "released": [(1, "fc1/kernel")],
        "optimizer": {"lr": 0.01, "weight_decay": None},
    }
    save_recipe_state(state, tmp_path / "x.keras.recipe.npz")
    back = load_recipe_state(tmp_path / "x.keras")
    assert back["step"] == 9 and back["released"] == [(1, "fc1/kernel")]
    assert back["trainable_saved"] == {2: {"bn1/gamma": True}} and back["optimizer"]["lr"] == 0.01
    mask, owner, applied = back["masks"]["conv1/kernel"]
    assert np.array_equal(mask, [[True, False]]) and owner == 1 and applied == 0.5
