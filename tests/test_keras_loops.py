"""Driving a recipe on Keras without ``model.fit``'s callbacks, and with an optimizer built on a
``LearningRateSchedule``.

- A custom training loop (``tf.GradientTape`` + ``optimizer.apply`` in a ``tf.function``) with
  ``runtime.step_begin()`` / ``runtime.step_end()`` around each step gives the same per-step
  LR, weight decay and masks as ``model.fit`` with the recipe's callbacks on the same data.
- An optimizer whose learning rate is a ``LearningRateSchedule`` hands the learning rate over to
  the recipe: every step uses the recipe's value (the core plan's), and before the recipe's LR
  modifier starts, the schedule's value at ``modify()``. Without an LR modifier the schedule is
  left alone.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras_nets import LOOP_EPOCHS as EPOCHS  # noqa: E402
from keras_nets import LOOP_RECIPE as RECIPE  # noqa: E402
from keras_nets import LOOP_STEPS as S  # noqa: E402
from keras_nets import keras_twin  # noqa: E402
from keras_nets import loop_data as _data  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402
from recipe_spec.schedule import compile_plan  # noqa: E402


def _row(manager, optimizer) -> dict:
    return {
        "lr": float(keras.ops.convert_to_numpy(optimizer.learning_rate)),
        "wd": float(keras.ops.convert_to_numpy(optimizer.weight_decay)),
        "masks": {n: e.mask.copy() for n, e in manager.runtime.masks.params.items()},
        "targets": {n: e.applied_sparsity for n, e in manager.runtime.masks.params.items()},
    }


def _with_fit(weights: list[np.ndarray]) -> tuple[list[dict], list[np.ndarray]]:
    model = keras_twin()
    model.set_weights(weights)
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(0.1, momentum=0.9), S)
    model.compile(optimizer=optimizer, loss="mse")
    rows: list[dict] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            rows.append(_row(manager, optimizer))

    x, y = _data()
    model.fit(x, y, batch_size=4, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[*callbacks, Record()])
    manager.finalize(model)
    return rows, [np.asarray(w) for w in model.get_weights()]


def _with_custom_loop(weights: list[np.ndarray]) -> tuple[list[dict], list[np.ndarray]]:
    """The loop docs/keras.md shows."""
    model = keras_twin()
    model.set_weights(weights)
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    model, optimizer, _ = manager.modify(model, keras.optimizers.SGD(0.1, momentum=0.9), S)
    loss_fn = keras.losses.MeanSquaredError()

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    x, y = _data()
    rows: list[dict] = []
    for _ in range(EPOCHS):
        for k in range(S):
            manager.runtime.step_begin()
            train_step(x[4 * k:4 * k + 4], y[4 * k:4 * k + 4])
            manager.runtime.step_end()
            rows.append(_row(manager, optimizer))
    manager.finalize(model)
    return rows, [np.asarray(w) for w in model.get_weights()]


def test_custom_training_loop_matches_fit() -> None:
    keras.utils.set_random_seed(0)
    weights = keras_twin().get_weights()
    fit_rows, fit_weights = _with_fit(weights)
    loop_rows, loop_weights = _with_custom_loop(weights)
    assert len(fit_rows) == len(loop_rows) == S * EPOCHS
    plan = compile_plan(ScheduledModifierManager.from_yaml(RECIPE).recipe, S)
    for k, (a, b) in enumerate(zip(fit_rows, loop_rows, strict=True)):
        assert a["lr"] == b["lr"] and a["wd"] == b["wd"], k
        assert a["targets"] == b["targets"], k
        assert set(a["masks"]) == set(b["masks"]), k
        for name in a["masks"]:
            assert np.array_equal(a["masks"][name], b["masks"][name]), (k, name)
    # the values come from the core plan, not from either loop
    lr_events = {e.step: e.value for k in range(S * EPOCHS) for e in plan.events_at(k) if e.target == "lr"}
    assert [r["lr"] for r in loop_rows] == [float(np.float32(lr_events[k])) for k in range(S * EPOCHS)]
    assert [r["wd"] for r in loop_rows] == [0.0] * S + [float(np.float32(0.001))] * (S * (EPOCHS - 1))
    final = loop_rows[-1]["targets"]
    assert set(final.values()) == {0.75} and len(final) == 4
    for a, b in zip(fit_weights, loop_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # fit and tf.function: same maths
        assert np.array_equal(a == 0, b == 0) or a.ndim == 1


SCHEDULE_RECIPE = """
modifiers:
  - !LearningRateModifier {lr_class: StepLR, lr_kwargs: {step_size: 1, gamma: 0.5}, init_lr: 0.04, start_epoch: 1, end_epoch: 3}
"""


def test_learning_rate_schedule_is_taken_over_by_the_recipe() -> None:
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    optimizer = keras.optimizers.SGD(learning_rate=schedule)
    manager = ScheduledModifierManager.from_yaml(SCHEDULE_RECIPE)
    model, optimizer, callbacks = manager.modify(keras_twin(), optimizer, S)
    model.compile(optimizer=optimizer, loss="mse")
    lrs: list[float] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    x, y = _data()
    model.fit(x, y, batch_size=4, epochs=4, shuffle=False, verbose=0, callbacks=[*callbacks, Record()])
    assert isinstance(optimizer._learning_rate, keras.Variable)
    f32 = lambda v: float(np.float32(v))  # noqa: E731
    # epoch 0: the schedule's value at modify() (iteration 0: 0.1), not its decay per iteration;
    # then StepLR from 0.04, halved at epoch 2; kept after its end (epoch 3)
    assert lrs == [f32(0.1)] * S + [f32(0.04)] * S + [f32(0.02)] * S + [f32(0.02)] * S


def test_learning_rate_schedule_without_lr_modifier_is_left_alone() -> None:
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    manager = ScheduledModifierManager.from_yaml(
        "modifiers:\n  - !GMPruningModifier {params: [fc1.weight], init_sparsity: 0.5, final_sparsity: 0.5,"
        " start_epoch: 0, end_epoch: 1, update_frequency: 1}\n"
    )
    model, optimizer, callbacks = manager.modify(keras_twin(), keras.optimizers.SGD(learning_rate=schedule), S)
    assert optimizer._learning_rate is schedule
    model.compile(optimizer=optimizer, loss="mse")
    x, y = _data()
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    assert float(keras.ops.convert_to_numpy(optimizer.learning_rate)) == pytest.approx(0.1 * 0.5**S)
