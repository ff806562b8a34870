"""Mixed precision with a recipe on Keras 3 (``recipe_spec_keras.precision``).

With the ``mixed_float16`` policy, ``compile`` wraps the optimizer in a LossScaleOptimizer that
skips updates with non-finite gradients: such a step must not advance the schedule, and the
batch after it retries the step without applying its events twice. From the step where QAT
starts the layers compute in float32, with one warning.
"""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from recipe_spec_keras.quantization import qat_layers  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402

PRUNE_AND_LR = """
modifiers:
  - !EpochRangeModifier {start_epoch: 0, end_epoch: 2}
  - !LearningRateFunctionModifier {start_epoch: 0, end_epoch: 2, lr_func: linear, init_lr: 0.1, final_lr: 0.01}
  - !GMPruningModifier {params: [fc1/kernel], init_sparsity: 0.1, final_sparsity: 0.7,
                        start_epoch: 0, end_epoch: 1.5, update_frequency: 0.25}
"""

#: inputs that overflow float16 and float32 alike: inf loss, non-finite gradients
HUGE = 1e30


@pytest.fixture
def mixed_float16():
    """Build models under the ``mixed_float16`` policy; the global policy is restored after."""
    previous = keras.mixed_precision.dtype_policy()
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        yield
    finally:
        keras.mixed_precision.set_dtype_policy(previous)


def _dense_net() -> keras.Model:
    keras.utils.set_random_seed(0)
    inp = keras.Input((8,))
    h = keras.layers.Dense(16, activation="relu", name="fc1")(inp)
    return keras.Model(inp, keras.layers.Dense(2, name="fc2", dtype="float32")(h))


def _fit(model: keras.Model, recipe: str, steps: int, inf_at: set[int] = frozenset(), epochs: int = 1,
         optimizer: object = None) -> tuple[ScheduledModifierManager, list[tuple]]:
    """Fit ``steps`` real batches (plus one HUGE batch before each real batch k in ``inf_at``);
    returns the manager and (step_count, lr, zeros in fc1, skipped) after every batch."""
    manager = ScheduledModifierManager.from_yaml(recipe)
    model, optimizer, callbacks = manager.modify(model, optimizer or keras.optimizers.SGD(0.1), steps_per_epoch=4)
    model.compile(optimizer=optimizer, loss="mse")
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(4, *model.input_shape[1:])).astype("float32") for _ in range(steps)]
    ys = [rng.normal(size=(4, 2)).astype("float32") for _ in range(steps)]
    for k in sorted(inf_at, reverse=True):
        xs.insert(k, np.full_like(xs[k], HUGE))
        ys.insert(k, ys[k])
    seen: list[tuple] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            runtime = manager.runtime
            seen.append((runtime.step_count, round(float(optimizer.learning_rate.numpy()), 6),
                         int((model.get_layer("fc1").kernel.numpy() == 0).sum()), runtime.mixed_precision.skipped))

    model.fit(np.concatenate(xs), np.concatenate(ys), batch_size=4, epochs=epochs, shuffle=False,
              callbacks=[*callbacks, Record()], verbose=0)
    return manager, seen


def _real_steps(seen: list[tuple]) -> list[tuple]:
    """The records of the batches whose step the optimizer applied (the counter moved)."""
    out, last = [], 0
    for record in seen:
        if record[0] != last:
            out.append(record[:3])
            last = record[0]
    return out


def test_skipped_steps_leave_the_schedule_and_match_float32(mixed_float16) -> None:
    keras.mixed_precision.set_dtype_policy("float32")
    _, plain = _fit(_dense_net(), PRUNE_AND_LR, 8)
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    manager, mixed = _fit(_dense_net(), PRUNE_AND_LR, 8, inf_at={2, 5})
    assert type(manager.runtime.model.optimizer).__name__ == "LossScaleOptimizer"
    assert manager.runtime.model.get_layer("fc1").compute_dtype == "float16"
    assert manager.runtime.mixed_precision.skipped >= 2
    # every batch the loss scale skipped left the counter where it was...
    for before, after in zip(mixed, mixed[1:], strict=False):
        assert after[0] == before[0] + (after[3] == before[3])
    # ...and the real steps ran the float32 run's schedule: LR and sparsity per step
    assert _real_steps(mixed) == [s[:3] for s in plain]
    assert [s[0] for s in plain] == list(range(1, 9)) and len({s[2] for s in plain}) > 3


def test_retried_step_applies_its_events_once(mixed_float16, monkeypatch) -> None:
    """A freeze and the QAT start at a skipped step: the retry does not apply them again (a
    second freeze would save the frozen flags as the ones to restore, so the kernel would stay
    frozen after the modifier's end)."""
    from recipe_spec_keras.manager import KerasManager

    applied: list[tuple[int, str]] = []
    for target in ("trainable", "quantization"):
        original = getattr(KerasManager, f"_on_{target}")

        def counted(self, event, m, original=original, target=target):  # type: ignore[no-untyped-def]
            applied.append((self.step_count, target))
            return original(self, event, m)

        monkeypatch.setattr(KerasManager, f"_on_{target}", counted)
    recipe = """
modifiers:
  - !EpochRangeModifier {start_epoch: 0, end_epoch: 2}
  - !TrainableParamsModifier {params: [fc1/kernel], trainable: false, start_epoch: 0.5, end_epoch: 1}
  - !QuantizationModifier {start_epoch: 0.5}
"""
    model = _dense_net()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        manager, seen = _fit(model, recipe, 8, inf_at={2})
    runtime = manager.runtime
    # the HUGE batch was step 2's first try: skipped, and the counter stayed on 2
    assert any(record[0] == 2 and record[3] > previous[3] for previous, record in zip(seen, seen[1:], strict=False))
    assert applied == [(2, "trainable"), (2, "quantization"), (4, "trainable")]
    assert model.get_layer("fc1").kernel.trainable  # restored at epoch 1, to the flags before
    assert runtime.step_count == 8 and len(qat_layers(model)) == 2
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)


def test_quantization_switches_layers_to_float32_with_one_warning(mixed_float16) -> None:
    keras.utils.set_random_seed(0)
    inp = keras.Input((6, 6, 3))
    h = keras.layers.BatchNormalization(name="bn1")(keras.layers.Conv2D(4, 3, name="conv1")(inp))
    h = keras.layers.Dense(16, activation="relu", name="fc1")(keras.layers.Flatten()(h))
    model = keras.Model(inp, keras.layers.Dense(2, name="fc2")(h))
    keras.mixed_precision.set_dtype_policy("float32")  # the layers keep their mixed policies
    manager = ScheduledModifierManager.from_yaml("""
modifiers:
  - !EpochRangeModifier {start_epoch: 0, end_epoch: 3}
  - !QuantizationModifier {start_epoch: 1}
""")
    assert manager.autocast_enabled(epoch=0.5) and not manager.autocast_enabled(epoch=1)
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(0.05), steps_per_epoch=2)
    model.compile(optimizer=optimizer, loss="mse")
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(8, 6, 6, 3)).astype("float32"), rng.normal(size=(8, 2)).astype("float32")
    dtypes: list[tuple] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
            step = manager.runtime.step_count
            dtypes.append((step, model.get_layer("fc1").compute_dtype, model.get_layer("conv1").compute_dtype))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, callbacks=[*callbacks, Record()], verbose=0)
    ours = [str(w.message) for w in caught if "quantization-aware training starts" in str(w.message)]
    assert len(ours) == 1 and "step 2 (epoch 1)" in ours[0] and "float32" in ours[0]
    assert all(d[1:] == ("float16", "float16") for d in dtypes if d[0] < 2)
    assert all(d[1:] == ("float32", "float32") for d in dtypes if d[0] >= 2)
    assert [layer.dtype_policy.name for layer in model.layers] == ["float32"] * len(model.layers)
    assert len(qat_layers(model)) == 3 and manager.runtime.quantization is not None
    assert model(x, training=True).dtype == "float32"
    assert np.isfinite(history.history["loss"]).all()
    assert manager.runtime.step_count == 6 - manager.runtime.mixed_precision.skipped


def test_float32_fit_reads_no_iterations() -> None:
    """Without a LossScaleOptimizer nothing is read per step and nothing is skipped."""
    manager, seen = _fit(_dense_net(), PRUNE_AND_LR, 3)
    assert manager.runtime.mixed_precision._before is None
    assert [s[0] for s in seen] == [1, 2, 3] and manager.runtime.mixed_precision.skipped == 0
    with pytest.raises(TypeError, match="keras backend has no scaler"):
        manager.wrap_scaler(object())
