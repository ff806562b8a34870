"""``recipe_spec_keras.pruning.MaskSet``: masks applied on the device (a cached copy of each mask)
give the same bits as the NumPy reference (``np.where(mask, value, 0)`` through the host), the
device copy follows every change of the mask, and a whole ``fit`` gives bit-identical weights and
masks with the device path and with the host reference."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from recipe_spec_keras import pruning  # noqa: E402
from recipe_spec_keras.pruning import MaskSet  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _reference(value: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.where(mask, value, np.zeros((), value.dtype))


def _reference_apply(self: MaskSet, changed_only: bool = False) -> None:
    """The host implementation the device path replaces: applied every time it is called."""
    for entry in self.params.values():
        value = np.asarray(keras.ops.convert_to_numpy(entry.variable))
        if not entry.mask.all():
            entry.variable.assign(_reference(value, entry.mask))


@pytest.fixture(params=["batched", "per-variable"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of applying: one ``tf.function`` for all masks, and ``keras.ops`` per variable
    (what other Keras backends use)."""
    if request.param == "per-variable":
        monkeypatch.setattr(pruning, "_batched", lambda entries: None)
    return request.param


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_apply_is_bit_identical_to_the_host_reference(dtype: str, path: str) -> None:
    rng = np.random.default_rng(0)
    masks = MaskSet()
    cases = []
    for i, shape in enumerate([(5, 7, 3), (4, 6), (9,)]):
        value = rng.normal(size=shape).astype("float32")
        value.flat[:3] = [-0.0, np.nan, -np.inf]  # masked below: must become +0.0
        value.flat[3:6] = [-0.0, np.inf, -1e-30]  # kept: bits untouched (-0.0 stays -0.0)
        mask = rng.random(shape) < 0.5
        mask.flat[:3] = False
        mask.flat[3:6] = True
        if i == 2:
            mask[:] = True  # all True: left alone
        variable = keras.Variable(value, dtype=dtype)
        cases.append((variable, keras.ops.convert_to_numpy(variable).copy(), mask))
        masks.hold(f"w{i}", variable, "Dense", 0, mask=mask)
    masks.apply()
    assert (masks._batch[1] is not None) == (path == "batched" and keras.backend.backend() == "tensorflow")
    for variable, start, mask in cases:
        got = keras.ops.convert_to_numpy(variable)
        want = _reference(start, mask)
        assert got.dtype == want.dtype
        assert np.array_equal(_bits(got), _bits(want))
        assert np.signbit(got[~mask]).sum() == 0  # +0.0, not -0.0


def test_the_device_mask_follows_every_change(path: str) -> None:
    rng = np.random.default_rng(1)
    variable = keras.Variable(rng.normal(size=(6, 8)).astype("float32"))
    masks = MaskSet()
    entry = masks.hold("w", variable, "Dense", 0)  # all True: nothing applied

    def check(mask: np.ndarray) -> None:
        dense = rng.normal(size=(6, 8)).astype("float32")
        variable.assign(dense)
        masks.apply()
        assert np.array_equal(_bits(keras.ops.convert_to_numpy(variable)), _bits(_reference(dense, mask)))

    check(np.ones((6, 8), bool))
    first = rng.random((6, 8)) < 0.5
    masks.hold("w", variable, "Dense", 0, mask=first)  # in place, through hold
    assert np.array_equal(entry.mask, first)
    check(first)
    masks.update([entry], 0.75, "unstructured", False, step=3)  # in place, through update
    assert (~entry.mask).sum() == 36 and entry.applied_sparsity == 0.75
    check(entry.mask.copy())
    replaced = rng.random((6, 8)) < 0.5
    entry.mask = replaced.copy()  # a new array
    check(replaced)
    entry.mask[...] = ~replaced  # in place, outside MaskSet: invalidate() says so
    masks.invalidate()
    check(~replaced)
    entry.mask[...] = True
    masks.invalidate()
    check(np.ones((6, 8), bool))


def test_changed_only_skips_an_apply_when_nothing_changed() -> None:
    variable = keras.Variable(np.arange(1.0, 13.0, dtype="float32").reshape(3, 4))
    mask = np.arange(12).reshape(3, 4) % 2 == 0
    masks = MaskSet()
    masks.hold("w", variable, "Dense", 0, mask=mask)
    masks.apply(changed_only=True)  # a new mask: applied
    assert np.array_equal(keras.ops.convert_to_numpy(variable), _reference(np.arange(1.0, 13.0).reshape(3, 4), mask))
    variable.assign(np.ones((3, 4), "float32"))
    masks.apply(changed_only=True)  # nothing changed since the last apply: skipped
    assert (keras.ops.convert_to_numpy(variable) == 1).all()
    masks.apply()
    assert np.array_equal(keras.ops.convert_to_numpy(variable), mask.astype("float32"))
    variable.assign(np.ones((3, 4), "float32"))
    masks.hold("w", variable, "Dense", 0, mask=~mask)  # changed: applied
    masks.apply(changed_only=True)
    assert np.array_equal(keras.ops.convert_to_numpy(variable), (~mask).astype("float32"))
    variable.assign(np.ones((3, 4), "float32"))
    masks.invalidate()
    masks.apply(changed_only=True)
    assert np.array_equal(keras.ops.convert_to_numpy(variable), (~mask).astype("float32"))



def test_weights_written_between_fits_are_masked_before_the_next_forward() -> None:
    """``set_weights`` between two fits: the next fit's first forward already sees the masks."""
    inputs = keras.Input((6,))
    model = keras.Model(inputs, keras.layers.Dense(4, name="fc", use_bias=False)(inputs))
    manager = ScheduledModifierManager.from_yaml(
        "modifiers:\n  - !GMPruningModifier {params: [fc.weight], init_sparsity: 0.5, final_sparsity: 0.5,"
        " start_epoch: 0, end_epoch: 5, update_frequency: 5}\n"
    )
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(0.0), steps_per_epoch=2)
    model.compile(optimizer=optimizer, loss="mse")
    x, y = np.ones((4, 6), "float32"), np.zeros((4, 4), "float32")
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
    mask = manager.runtime.masks.params["fc/kernel"].mask.copy()
    assert mask.sum() == 12  # half of the 24 weights kept
    model.get_layer("fc").set_weights([np.ones((6, 4), "float32")])
    seen: list[np.ndarray] = []

    class Forward(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(keras.ops.convert_to_numpy(self.model.get_layer("fc").kernel).copy())

    model.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False, callbacks=[*callbacks, Forward()])
    assert np.array_equal(seen[0], mask.astype("float32"))

RECIPE = """
modifiers:
  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 3}
  - !GMPruningModifier {params: __ALL_PRUNABLE__, init_sparsity: 0.1, final_sparsity: 0.75,
                        start_epoch: 0.5, end_epoch: 2, update_frequency: 0.5}
"""
S = 4


def _fit(weights: list[np.ndarray], mode: str) -> tuple[list[list[np.ndarray]], list[dict[str, np.ndarray]]]:
    inputs = keras.Input((8, 8, 2))
    h = keras.layers.Conv2D(4, 3, name="conv1", activation="relu")(inputs)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(12, name="fc1", activation="relu")(h)
    model = keras.Model(inputs, keras.layers.Dense(3, name="fc2")(h))
    model.set_weights(weights)
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(learning_rate=0.1, momentum=0.9), S)
    model.compile(optimizer=optimizer, loss="mse", **({mode: True} if mode else {}))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(S * 4, 8, 8, 2)).astype("float32")
    y = rng.normal(size=(S * 4, 3)).astype("float32")
    seen: list[list[np.ndarray]] = []
    masks: list[dict[str, np.ndarray]] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append([np.array(w) for w in self.model.get_weights()])
            masks.append({n: e.mask.copy() for n, e in manager.runtime.masks.params.items()})

    model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0, callbacks=[*callbacks, Record()])
    model.fit(x, y, batch_size=4, epochs=3, initial_epoch=2, shuffle=False, verbose=0, callbacks=[*callbacks, Record()])
    return seen, masks


@pytest.mark.parametrize("mode", ["", "run_eagerly", "jit_compile"])
def test_fit_matches_the_host_reference_bit_for_bit(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    keras.utils.set_random_seed(3)
    probe = keras.Sequential([keras.Input((8, 8, 2)), keras.layers.Conv2D(4, 3), keras.layers.Flatten(),
                              keras.layers.Dense(12), keras.layers.Dense(3)])
    weights = probe.get_weights()
    device_weights, device_masks = _fit(weights, mode)
    with monkeypatch.context() as m:
        m.setattr(MaskSet, "apply", _reference_apply)
        host_weights, host_masks = _fit(weights, mode)
    assert len(device_weights) == len(host_weights) == S * 3
    for step, (dw, hw, dm, hm) in enumerate(zip(device_weights, host_weights, device_masks, host_masks, strict=True)):
        assert dm.keys() == hm.keys(), step
        for name in dm:
            assert np.array_equal(dm[name], hm[name]), (step, name)
        for a, b in zip(dw, hw, strict=True):
            assert np.array_equal(_bits(a), _bits(b)), step
    assert set(device_masks[-1]) == {"conv1/kernel", "fc1/kernel", "fc2/kernel"}
    assert all((~m).sum() == round(m.size * 0.75) for m in device_masks[-1].values())


MIRRORED = """
import os, json
os.environ["KERAS_BACKEND"] = "tensorflow"
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, numpy as np
from recipe_spec_keras.pruning import MaskSet

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(0)
values = [rng.normal(size=s).astype("float32") for s in [(3, 3, 2, 4), (10, 6), (6,)]]
values[0].flat[:3] = [-0.0, np.nan, -np.inf]
masks = [rng.random(v.shape) < 0.5 for v in values]
masks[0].flat[:3] = False
masks[2][:] = True  # all True: never assigned
with strategy.scope():
    variables = [keras.Variable(v) for v in values]
held = MaskSet()
for i, (variable, mask) in enumerate(zip(variables, masks)):
    held.hold(f"v{i}", variable, "Dense", 0, mask=mask)
ok = []
for round_ in range(3):
    held.apply()
    for variable, value, mask in zip(variables, values, masks):
        want = np.where(mask, value, np.zeros((), value.dtype)).view(np.uint32)
        local = [np.asarray(r).view(np.uint32) for r in strategy.experimental_local_results(variable.value)]
        ok.append(len(local) == 2 and all(np.array_equal(r, want) for r in local))
    values = [rng.normal(size=v.shape).astype("float32") for v in values]
    for variable, value in zip(variables, values):
        variable.assign(value)
    masks[1] = rng.random(masks[1].shape) < 0.5
    held.hold("v1", variables[1], "Dense", 0, mask=masks[1])
print("RESULT" + json.dumps({"ok": ok, "batched": held._batch is not None and held._batch[1] is not None}))
"""


def test_apply_under_mirrored_strategy_is_bit_identical_on_every_replica() -> None:
    import json
    import subprocess
    import sys

    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, "-c", MIRRORED], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.split("RESULT", 1)[1])
    assert result["batched"] and len(result["ok"]) == 9 and all(result["ok"]), result
