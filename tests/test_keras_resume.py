"""Keras checkpoint and resume with Keras' own saving: ``model.save`` (.keras, optimizer state
included) plus the recipe state next to it (``RecipeCheckpoint``). A run resumed in a fresh
process with the documented sequence ends bit-identical to an uninterrupted run: every weight
(QAT observers and BN statistics included), every optimizer variable, the masks and the LR of
every step.

- pruning + LR function: interrupted after epoch 1 (before pruning) and after epoch 3
  (mid-pruning), each by a run that really stops there;
- pruning + QAT with a folded BN: resumed after the QAT start (epoch 3) and after the observers
  and BN statistics froze (epoch 5), from the uninterrupted run's own checkpoints. ``load_model``
  alone loses the observers (it rebuilds layers without them and skips their file entries
  silently); the recipe state brings them back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

RECIPES = {
    "pruning": """
modifiers:
  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 6}
  - !GMPruningModifier
    params: __ALL_PRUNABLE__
    init_sparsity: 0.05
    final_sparsity: 0.7
    start_epoch: 1
    end_epoch: 4
    update_frequency: 0.5
""",
    "qat": """
modifiers:
  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 6}
  - !GMPruningModifier
    params: __ALL_PRUNABLE__
    init_sparsity: 0.05
    final_sparsity: 0.6
    start_epoch: 1
    end_epoch: 4
    update_frequency: 1
  - !QuantizationModifier {start_epoch: 2, disable_quantization_observer_epoch: 4, freeze_bn_stats_epoch: 4}
""",
}
FINAL_SPARSITY = {"pruning": 0.7, "qat": 0.6}
S, EPOCHS = 4, 6

SCRIPT = textwrap.dedent(
    """
    import os, sys, warnings
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import numpy as np, keras, tensorflow as tf
    from recipe_spec import ScheduledModifierManager
    from recipe_spec_keras.manager import load_recipe_state
    from recipe_spec_keras.params import named_variables

    keras.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    S = {S}
    recipe, stop, load, out = open(sys.argv[1]).read(), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(S * 8, 12, 12, 3)).astype("float32")
    y = rng.normal(size=(S * 8, 10)).astype("float32")

    def net():
        inputs = keras.Input((12, 12, 3))
        h = keras.layers.Conv2D(8, 3, name="conv1")(inputs)
        h = keras.layers.BatchNormalization(name="bn1")(h)
        h = keras.layers.ReLU()(h)
        h = keras.layers.Conv2D(16, 3, name="conv2", activation="relu")(h)
        h = keras.layers.AveragePooling2D(4)(h)
        h = keras.layers.Flatten()(h)
        h = keras.layers.Dense(32, name="fc1", activation="relu")(h)
        return keras.Model(inputs, keras.layers.Dense(10, name="fc2")(h))

    manager = ScheduledModifierManager.from_yaml(recipe)
    caught = []
    if load == "-":
        model = net()
        optimizer = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
        model, optimizer, callbacks = manager.modify(model, optimizer, steps_per_epoch=S)
        model.compile(optimizer=optimizer, loss="mse")
        initial = 0
    else:  # the documented resume sequence; any warning it raises is reported
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = keras.saving.load_model(load)
            model, optimizer, callbacks = manager.modify(model, model.optimizer, steps_per_epoch=S)
            initial = manager.runtime.restore(load)
    lrs = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    checkpoint = manager.runtime.checkpoint_callback(out + "/ckpt-{{epoch}}.keras")
    model.fit(x, y, batch_size=8, epochs=stop, initial_epoch=initial, shuffle=False, verbose=0,
              callbacks=[*callbacks, Record(), checkpoint])
    state = manager.state_dict()
    arrays = {{"w_" + n.replace("/", "."): np.asarray(v.numpy()) for n, v, _ in named_variables(model)}}
    arrays.update({{f"o_{{i}}": np.asarray(v.numpy()) for i, v in enumerate(model.optimizer.variables)}})
    arrays.update({{"mask_" + n.replace("/", "."): m for n, (m, _, _) in state["masks"].items()}})
    q = state["quantization"]
    np.savez(out + "/result.npz", lrs=np.array(lrs), step=state["step"],
             lr=float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)),
             bn_momentum=model.get_layer("bn1").momentum, folded=repr(q and q["folded"]),
             warnings=np.array([f"{{w.category.__name__}}|{{w.filename}}|{{w.message}}" for w in caught], dtype=str),
             **arrays)
    """
).format(S=S)


def _run(tmp: Path, recipe: str, stop: int, load: str) -> dict:
    script, recipe_file = tmp / "run.py", tmp / "recipe.yaml"
    script.write_text(SCRIPT)
    recipe_file.write_text(RECIPES[recipe])
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, str(script), str(recipe_file), str(stop), load, str(tmp)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    with np.load(tmp / "result.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def uninterrupted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict, Path]:
    """The whole run of one recipe; its per-epoch checkpoints are kept."""
    folder = tmp_path_factory.mktemp(f"full-{request.param}")
    return request.param, _run(folder, request.param, EPOCHS, "-"), folder


@pytest.mark.parametrize("uninterrupted", sorted(RECIPES), indirect=True)
def test_the_uninterrupted_runs_exercise_what_resume_must_restore(uninterrupted: tuple[str, dict, Path]) -> None:
    recipe, full, folder = uninterrupted
    masks = [k for k in full if k.startswith("mask_")]
    assert len(masks) == 4
    assert np.mean([1 - full[k].mean() for k in masks]) == pytest.approx(FINAL_SPARSITY[recipe], abs=0.01)
    assert len(set(full["lrs"].tolist())) > S  # the LR changes along the run
    if recipe == "qat":  # observers that moved and then froze, a folded BN that froze
        assert str(full["folded"]) == "{'conv1': 'bn1'}" and float(full["bn_momentum"]) == 1.0
        for layer in ("conv1", "conv2", "fc1", "fc2"):
            lo, hi = full[f"w_{layer}.input_fake_quant.min_val"], full[f"w_{layer}.input_fake_quant.max_val"]
            assert full[f"w_{layer}.input_fake_quant.observed"] == 1.0 and lo < hi, layer
            assert full[f"w_{layer}.kernel_fake_quant.observer_enabled"] == 0.0, layer
        at3 = str(np.load(folder / "ckpt-3.keras.recipe.npz")["meta"])  # observers still on at epoch 3
        assert '"observers_disabled": false' in at3 and '"observers":' in at3
    else:
        assert str(full["folded"]) == "None"


@pytest.mark.parametrize(
    ("uninterrupted", "cut"), [("pruning", 1), ("pruning", 3), ("qat", 3), ("qat", 5)],
    indirect=["uninterrupted"], ids=["pruning-before", "pruning-mid", "qat-after-start", "qat-after-freeze"],
)
def test_keras_resume_is_bit_identical(cut: int, tmp_path: Path, uninterrupted: tuple[str, dict, Path]) -> None:
    recipe, full, folder = uninterrupted
    if recipe == "pruning":  # a run that really stops at the cut
        (tmp_path / "first").mkdir()
        part = _run(tmp_path / "first", recipe, cut, "-")
        assert int(part["step"]) == cut * S
        assert np.array_equal(part["lrs"], full["lrs"][: cut * S])
        ckpt = tmp_path / "first" / f"ckpt-{cut}.keras"
    else:
        ckpt = folder / f"ckpt-{cut}.keras"
    assert ckpt.exists() and Path(f"{ckpt}.recipe.npz").exists()
    (tmp_path / "second").mkdir()
    resumed = _run(tmp_path / "second", recipe, EPOCHS, str(ckpt))
    # load_model + modify + restore raise no warning a user would see. Python hides
    # DeprecationWarnings raised inside libraries; TF's Variable.__array__ raises one under
    # NumPy 2 on every keras.ops.convert_to_numpy(variable).
    shown = [w for w in resumed["warnings"] if not (w.startswith("DeprecationWarning|") and "site-packages" in w)]
    assert shown == []
    assert int(resumed["step"]) == EPOCHS * S
    assert np.array_equal(np.concatenate([full["lrs"][: cut * S], resumed["lrs"]]), full["lrs"])
    assert float(resumed["lr"]) == float(full["lr"])
    assert str(resumed["folded"]) == str(full["folded"])
    assert float(resumed["bn_momentum"]) == float(full["bn_momentum"])
    keys = sorted(k for k in full if k.startswith(("w_", "o_", "mask_")))
    assert keys == sorted(k for k in resumed if k.startswith(("w_", "o_", "mask_")))
    assert any("fake_quant" in k for k in keys) == (recipe == "qat")
    for key in keys:  # weights, observers, BN statistics, momentum, iterations, masks
        np.testing.assert_array_equal(resumed[key], full[key], err_msg=key)


def test_recipe_state_round_trips(tmp_path: Path) -> None:
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from recipe_spec_keras.checkpoint import load_recipe_state, save_recipe_state

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
