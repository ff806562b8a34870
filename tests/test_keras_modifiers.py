"""Keras 3 structural modifiers under ``model.fit``: QuantizationModifier (QAT),
LayerPruningModifier and TrainableParamsModifier, checked epoch by epoch from a callback."""

from __future__ import annotations

import os
import re
import warnings

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from recipe_spec_keras.quantization import qat_layers  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402

S = 4  # steps per epoch
BATCH = 16


def small_model() -> keras.Model:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", name="conv1")(inputs)
    x = keras.layers.BatchNormalization(name="bn1")(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(8, 3, name="conv2")(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(32, name="fc1")(x)
    x = keras.layers.ReLU()(x)
    return keras.Model(inputs, keras.layers.Dense(4, name="fc2")(x))


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(S * BATCH, 8, 8, 3)).astype("float32")
    y = np.stack([x[..., c].mean(axis=(1, 2)) for c in range(3)] + [x[:, :4, :4].mean(axis=(1, 2, 3))], 1)
    return x, (3 * y).astype("float32")


def setup(recipe: str):
    model = small_model()
    manager = ScheduledModifierManager.from_yaml(recipe)
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.Adam(0.01), S)
    model.compile(optimizer=optimizer, loss="mse")
    return model, manager, callbacks


class Probe(keras.callbacks.Callback):
    def __init__(self, fn):
        super().__init__()
        self.fn, self.seen = fn, []

    def on_epoch_end(self, epoch, logs=None):
        self.seen.append(self.fn(self.model))


def fit(model, callbacks, probe, epochs):
    x, y = data()
    model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0, callbacks=[*callbacks, probe])


QAT = """
modifiers:
  - !QuantizationModifier
    start_epoch: 1
    disable_quantization_observer_epoch: 3
    freeze_bn_stats_epoch: 3
"""


def test_qat_under_fit() -> None:
    model, manager, callbacks = setup(QAT)
    names_before = [w.path for w in model.weights]
    x, y = data()
    loss_before = model.evaluate(x, y, batch_size=BATCH, verbose=0)

    def look(m):
        fc1 = m.get_layer("fc1")
        sample = x[:8]
        out = {
            "qat": [layer.name for layer in qat_layers(m)],
            "bn_mean": m.get_layer("bn1").moving_mean.numpy().copy(),
            "kernel": fc1.kernel.numpy().copy(),
            "pred": keras.ops.convert_to_numpy(m(sample, training=False)),
        }
        if hasattr(fc1, "input_fake_quant"):
            fq = fc1.input_fake_quant
            out["observer"] = (float(fq.min_val.numpy()), float(fq.max_val.numpy()), float(fq.observed.numpy()))
            out["enabled"] = float(fq.observer_enabled.numpy())
            used = keras.ops.convert_to_numpy(fc1.kernel_fake_quant.fake_quant(fc1.kernel, observe=False))
            out["used_kernel"] = used
        return out

    probe = Probe(look)
    fit(model, callbacks, probe, 5)
    seen = probe.seen
    # epoch 0: float model, nothing quantized
    assert seen[0]["qat"] == [] and "observer" not in seen[0]
    # from epoch 1: every Dense/Conv quantized, names unchanged
    assert seen[1]["qat"] == ["conv1", "conv2", "fc1", "fc2"]
    assert [w.path for w in model.weights if "fake_quant" not in w.path] == names_before
    # the observers were updated inside fit's traced train function
    lo, hi, observed = seen[1]["observer"]
    assert observed == 1.0 and lo <= 0.0 < hi  # fc1 input is post-ReLU
    # the forward uses the fake-quantized kernel: at most 256 distinct values (float: more)
    assert len(np.unique(seen[1]["kernel"])) > 256
    assert len(np.unique(seen[2]["used_kernel"])) <= 256
    assert not np.allclose(seen[2]["used_kernel"], seen[2]["kernel"])
    fc1 = model.get_layer("fc1")
    original = fc1.__dict__["_qat_original_call"]
    sub = keras.Model(model.input, model.get_layer("fc1").input)
    feats = keras.ops.convert_to_numpy(sub(x[:8], training=False))
    quantized = keras.ops.convert_to_numpy(fc1(feats))
    floating = keras.ops.convert_to_numpy(original(feats))
    assert not np.allclose(quantized, floating)
    # observers move in epochs 1-2, frozen from epoch 3 (range and BN stats)
    assert seen[1]["observer"] != seen[2]["observer"]
    assert seen[2]["enabled"] == 1.0 and seen[3]["enabled"] == 0.0
    assert seen[3]["observer"] == seen[4]["observer"]
    assert not np.allclose(seen[1]["bn_mean"], seen[2]["bn_mean"])
    np.testing.assert_array_equal(seen[3]["bn_mean"], seen[4]["bn_mean"])
    assert model.get_layer("bn1").momentum == 1.0
    # training still works under QAT
    assert not np.allclose(seen[3]["kernel"], seen[4]["kernel"])
    loss_after = model.evaluate(x, y, batch_size=BATCH, verbose=0)
    assert loss_after < loss_before


def test_qat_ignore_and_submodules() -> None:
    model, manager, callbacks = setup(QAT + "    ignore: [Conv2D]\n")
    fit(model, callbacks, Probe(lambda m: None), 2)
    assert [layer.name for layer in qat_layers(model)] == ["fc1", "fc2"]
    model, manager, callbacks = setup(QAT + "    submodules: [fc2]\n")
    fit(model, callbacks, Probe(lambda m: None), 2)
    assert [layer.name for layer in qat_layers(model)] == ["fc2"]


def test_layer_pruning_identity_window() -> None:
    model, manager, callbacks = setup(
        "modifiers:\n  - !LayerPruningModifier {layers: [bn1], start_epoch: 1, end_epoch: 3}\n"
    )
    t = np.random.default_rng(2).normal(3.0, 2.0, size=(2, 8, 8, 8)).astype("float32")

    def look(m):
        bn = m.get_layer("bn1")
        return np.allclose(keras.ops.convert_to_numpy(bn(t, training=False)), t), bn.moving_mean.numpy().copy(), bn.gamma.trainable

    probe = Probe(look)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(model, callbacks, probe, 5)
    identity = [s[0] for s in probe.seen]
    assert identity == [False, True, True, False, False]
    assert [s[2] for s in probe.seen] == [True, False, False, True, True]  # no parameters while removed
    assert not [w for w in caught if "Gradients do not exist" in str(w.message)]
    means = [s[1] for s in probe.seen]
    np.testing.assert_array_equal(means[0], means[2])  # no BN statistics while it is an identity
    assert not np.allclose(means[2], means[3])  # restored: it trains again
    assert model.get_layer("bn1").name == "bn1"


@pytest.mark.parametrize(("layers", "why"), [
    ("conv2", "Conv2D of kernel (3, 3) without padding"),  # 8 -> 8 channels, valid padding
    ("[fc1]", "Dense from 288 to 32 units"),
    ("[bn1, fc2]", "Dense from 32 to 4 units"),
])
def test_layer_pruning_shape_change_is_refused_at_modify(layers: str, why: str) -> None:
    """A removed layer that changes the shape is P010 at modify(), located at its entry of
    ``layers``, before the model changes (it used to be a ValueError at its start step)."""
    from recipe_spec import RecipeError

    with pytest.raises(RecipeError, match=rf"2:\d+: P010 \[error\] .*{re.escape(why)}") as caught:
        setup(f"modifiers:\n  - !LayerPruningModifier {{layers: {layers}, start_epoch: 1, end_epoch: 2}}\n")
    assert len(caught.value.diagnostics) == 1


@pytest.mark.parametrize(("args", "line"), [
    ("    ignore: [Conv2D, Dense]\n", 7),
    ("    submodules: [bn1]\n", 7),
])
def test_qat_with_no_layer_to_quantize_is_refused_at_modify(args: str, line: int) -> None:
    """P007 is an error at modify() on Keras too (it was a ValueError at the start step)."""
    from recipe_spec import RecipeError

    with pytest.raises(RecipeError, match=rf"{line}:\d+: P007 \[error\] .*no Dense or Conv layer"):
        setup(QAT + args)


def test_trainable_params_freeze_and_restore_under_fit() -> None:
    model, manager, callbacks = setup(
        "modifiers:\n  - !TrainableParamsModifier {params: ['re:conv1/.*'], trainable: false, start_epoch: 1, end_epoch: 2}\n"
    )
    probe = Probe(lambda m: m.get_layer("conv1").kernel.numpy().copy())
    fit(model, callbacks, probe, 3)
    k0, k1, k2 = probe.seen
    np.testing.assert_array_equal(k0, k1)  # frozen during epoch 1
    assert not np.allclose(k1, k2)  # trains again after the restore
    assert model.get_layer("conv1").kernel.trainable


def test_a_step_with_no_event_does_no_work_per_weight_outside_the_compiled_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Masks held, no event due: the compiled train step enforces them (gradients masked, the
    held masks applied after the update, where the optimizer's momentum would move a pruned
    weight), and the recipe's callback neither reads, writes nor assigns any weight or mask, nor
    reads a flag from the device."""
    from recipe_spec_keras import jax_state, optim, pruning

    model, manager, callbacks = setup(
        "modifiers:\n  - !GMPruningModifier {params: __ALL_PRUNABLE__, init_sparsity: 0.5, "
        "final_sparsity: 0.7, start_epoch: 1, end_epoch: 2, update_frequency: 1}\n"
    )
    x, y = data()
    model.fit(x, y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0, callbacks=callbacks)  # events end at step 8
    calls: dict[str, int] = {}

    def counting(owner: object, name: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args: object, **kwargs: object) -> object:
            calls[name] = calls.get(name, 0) + 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    for owner, name in [(pruning.MaskSet, "apply"), (pruning.MaskSet, "update"), (pruning, "_assign_masked"),
                        (jax_state.StateAccess, "read"), (jax_state.StateAccess, "write"),
                        (jax_state.StateAccess, "sync"), (optim, "host_flag")]:
        counting(owner, name)
    seen: list[dict[str, int]] = []

    class Snapshot(keras.callbacks.Callback):  # after the recipe's callback: its calls within the steps
        def on_train_batch_begin(self, batch, logs=None):
            if not seen:
                seen.append(dict(calls))

        def on_train_end(self, logs=None):
            seen.append(dict(calls))

    runtime = manager.runtime
    before = runtime.step_count
    model.fit(x, y, batch_size=BATCH, epochs=5, initial_epoch=3, shuffle=False, verbose=0,
              callbacks=[*callbacks, Snapshot()])
    assert runtime.step_count == before + 2 * S
    assert seen[0] == seen[1], "work per weight outside the compiled step"  # a fit's start masks once
    for entry in runtime.masks.params.values():
        assert 0.69 < 1 - entry.mask.mean() < 0.71
        value = keras.ops.convert_to_numpy(entry.variable.value)
        assert not value[~entry.mask].any(), entry.name
        assert value[entry.mask].any(), entry.name  # the kept weights still train


def test_batch_ends_run_asynchronously_and_a_step_ends_the_same_either_way() -> None:
    """The recipe's callback alone lets Keras dispatch batch ends from a worker thread (no read
    of the losses after every batch) where the backend allows it; the fit is the same step for
    step as one where another callback's batch-end hook makes Keras call them in the fit's
    thread, which sees each step already ended (its step counter advanced)."""
    from keras.src import backend

    recipe = ("modifiers:\n  - !GMPruningModifier {params: __ALL_PRUNABLE__, init_sparsity: 0.3, "
              "final_sparsity: 0.7, start_epoch: 0, end_epoch: 2, update_frequency: 0.5}\n")
    x, y = data()
    results = []
    for extra in (False, True):
        model, manager, callbacks = setup(recipe)
        seen: list[int] = []

        class Ends(keras.callbacks.Callback):
            def __init__(self, runtime: object, seen: list[int]) -> None:
                super().__init__()
                self.runtime, self.seen = runtime, seen

            def on_train_batch_end(self, batch, logs=None):
                self.seen.append(self.runtime.step_count)

        listed = [*callbacks, *([Ends(manager.runtime, seen)] if extra else [])]
        assert keras.callbacks.CallbackList(listed, model=model)._async_train == (backend.IS_THREAD_SAFE and not extra)
        model.fit(x, y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0, callbacks=listed)
        assert manager.runtime.step_count == 3 * S
        if extra:
            assert seen == list(range(1, 3 * S + 1))
        results.append([keras.ops.convert_to_numpy(w) for w in model.weights])
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)
