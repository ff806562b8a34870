"""Keras on JAX (``KERAS_BACKEND=jax``; skipped on other backends; ``test_keras_backends.py``
runs this file on JAX, with two CPU devices).

- A custom JAX training loop (``model.stateless_call``, ``optimizer.stateless_apply`` in a
  ``jax.jit`` step, ``runtime.step_begin()`` / ``step_end()`` around it) gives the same per-step
  learning rate, weight decay, masks and weights as ``model.fit``; the LR of every step is the
  core plan's; ``jit_compile=False`` gives ``fit``'s weights too.
- Pruned weights stay exactly 0 through every step of ``fit`` (the masks are enforced inside
  the compiled step, after the update), and the LR changes without tracing the step again.
- ``keras.distribution.DataParallel`` on two CPU devices: every replica holds the same weights
  and masks after training, and each layer's sparsity is the recipe's.
- What does not run on JAX is refused at ``modify()`` with a message naming the backend.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(keras.backend.backend() != "jax", reason="KERAS_BACKEND is not jax")

from keras_nets import LOOP_EPOCHS as EPOCHS  # noqa: E402
from keras_nets import LOOP_RECIPE as RECIPE  # noqa: E402
from keras_nets import LOOP_STEPS as S  # noqa: E402
from keras_nets import keras_twin  # noqa: E402
from keras_nets import loop_data as _data  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402
from recipe_spec.schedule import compile_plan  # noqa: E402


def _row(manager, optimizer) -> dict:
    state = manager.runtime.state
    return {
        "lr": float(state.read(optimizer._learning_rate)),
        "wd": float(state.read(optimizer.weight_decay)),
        "masks": {n: e.mask.copy() for n, e in manager.runtime.masks.params.items()},
    }


def _with_fit(weights: list[np.ndarray], jit_compile: bool = True) -> tuple[list[dict], list[np.ndarray], list[dict]]:
    model = keras_twin()
    model.set_weights(weights)
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(0.1, momentum=0.9), S)
    model.compile(optimizer=optimizer, loss="mse", jit_compile=jit_compile)
    rows: list[dict] = []
    zeros: list[dict] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            rows.append(_row(manager, optimizer))
            # Callback.model syncs the trainer's state: the weights as the step left them
            zeros.append({n: bool(np.all(np.asarray(self.model.get_layer(n.split("/")[0]).kernel.numpy())[~e.mask] == 0))
                          for n, e in manager.runtime.masks.params.items()})

    x, y = _data()
    traced = []
    model.fit(x, y, batch_size=4, epochs=EPOCHS, shuffle=False, verbose=0,
              callbacks=[*callbacks, Record(), keras.callbacks.LambdaCallback(
                  on_train_batch_end=lambda b, logs: traced.append(model.train_function))])
    manager.finalize(model)
    assert len({id(f) for f in traced}) == 1, "the LR and mask changes traced the train step again"
    return rows, model.get_weights(), zeros


def _with_custom_loop(weights: list[np.ndarray]) -> tuple[list[dict], list[np.ndarray]]:
    import jax

    model = keras_twin()
    model.set_weights(weights)
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    model, optimizer, _ = manager.modify(model, keras.optimizers.SGD(0.1, momentum=0.9), S)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.MeanSquaredError()

    def compute_loss(trainable, non_trainable, x, y):
        y_pred, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return loss_fn(y, y_pred), non_trainable

    grad_fn = jax.value_and_grad(compute_loss, has_aux=True)

    @jax.jit
    def train_step(state, x, y):
        trainable, non_trainable, optimizer_values = state
        (_, non_trainable), grads = grad_fn(trainable, non_trainable, x, y)
        trainable, optimizer_values = optimizer.stateless_apply(optimizer_values, grads, trainable)
        return trainable, non_trainable, optimizer_values

    x, y = _data()
    rows: list[dict] = []
    for _ in range(EPOCHS):
        for i in range(S):
            manager.runtime.step_begin()
            groups = (model.trainable_variables, model.non_trainable_variables, optimizer.variables)
            state = tuple([v.value for v in group] for group in groups)
            state = train_step(state, x[i * 4:(i + 1) * 4], y[i * 4:(i + 1) * 4])
            for group, values in zip(groups, state, strict=True):
                for variable, value in zip(group, values, strict=True):
                    variable.assign(value)
            manager.runtime.step_end()
            rows.append(_row(manager, optimizer))
    manager.finalize(model)
    return rows, model.get_weights()


def test_custom_jax_loop_and_fit_agree_step_by_step() -> None:
    keras.utils.set_random_seed(0)
    weights = keras_twin().get_weights()
    fit_rows, fit_weights, zeros = _with_fit(weights)
    loop_rows, loop_weights = _with_custom_loop(weights)
    eager_rows, eager_weights, _ = _with_fit(weights, jit_compile=False)
    plan = compile_plan(ScheduledModifierManager.from_yaml(RECIPE).recipe, S)
    lr_events = [e for k in range(S * EPOCHS) for e in plan.events_at(k) if e.target == "lr"]
    assert lr_events and len(fit_rows) == len(loop_rows) == S * EPOCHS
    lr = None
    for k, (a, b) in enumerate(zip(fit_rows, loop_rows, strict=True)):
        for event in plan.events_at(k):
            if event.target == "lr":
                lr = float(np.float32(event.value))
        assert a["lr"] == b["lr"] == lr, f"lr at step {k}"
        assert a["wd"] == b["wd"], f"weight decay at step {k}"
        assert a["masks"].keys() == b["masks"].keys()
        for name in a["masks"]:
            np.testing.assert_array_equal(a["masks"][name], b["masks"][name], err_msg=f"{name} at step {k}")
        assert all(zeros[k].values()), f"a pruned weight is not 0 after step {k}: {zeros[k]}"
    assert fit_rows[-1]["masks"], "the recipe pruned nothing"
    for got, want in zip(loop_weights, fit_weights, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(eager_weights, fit_weights, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_data_parallel_replicas_end_identical() -> None:
    import jax

    devices = jax.devices("cpu")
    if len(devices) < 2:
        pytest.skip("needs two CPU devices: XLA_FLAGS=--xla_force_host_platform_device_count=2")
    keras.utils.set_random_seed(0)
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices[:2]))
    try:
        model = keras_twin()
        manager = ScheduledModifierManager.from_yaml(RECIPE)
        model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(0.1, momentum=0.9), S)
        model.compile(optimizer=optimizer, loss="mse")
        x, y = _data()
        model.fit(x, y, batch_size=4, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=callbacks)
        held = {n: e.mask.copy() for n, e in manager.runtime.masks.params.items()}
        manager.finalize(model)
        assert held
        for variable in model.trainable_variables:
            shards = [np.asarray(s.data) for s in variable.value.addressable_shards]
            assert len(shards) == 2
            np.testing.assert_array_equal(shards[0], shards[1], err_msg=variable.path)
            name = variable.path.removeprefix(f"{model.name}/")
            if name in held:
                for shard in shards:
                    assert (shard[~held[name]] == 0).all(), name
                assert abs(float((shards[0] == 0).mean()) - 0.75) < 0.01, name
    finally:
        keras.distribution.set_distribution(None)


REFUSED = {
    "M-FAC": "- !MFACPruningModifier {params: [fc1.weight], init_sparsity: 0.1, final_sparsity: 0.5, "
             "start_epoch: 0, end_epoch: 2, update_frequency: 1, num_grads: 4}",
    "distillation": "- !DistillationModifier {start_epoch: 0, end_epoch: 2, hardness: 0.5, temperature: 2.0}",
}


@pytest.mark.parametrize("what", list(REFUSED))
def test_refused_at_modify_naming_the_backend(what: str) -> None:
    manager = ScheduledModifierManager.from_yaml("modifiers:\n  " + REFUSED[what])
    model = keras_twin()
    teacher = {"distillation_teacher": keras_twin()} if what == "distillation" else {}
    with pytest.raises(NotImplementedError, match="KERAS_BACKEND='jax'"):
        manager.modify(model, keras.optimizers.SGD(0.1), S, **teacher)


def test_mixed_precision_refused_at_modify() -> None:
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    with pytest.raises(NotImplementedError, match="LossScaleOptimizer.*KERAS_BACKEND='jax'"):
        manager.modify(keras_twin(), optimizer, S)


def test_the_masks_add_one_array_to_the_trainers_state() -> None:
    """The JAX trainer carries every state array through every step, at a cost per array: the
    step masks of all the weights travel as one packed uint8 array, with no flag beside it,
    and a fit with mask events in it ends with the update masks all True again (the zeroing
    of an event's weights ran at its own step only)."""
    recipe = ("modifiers:\n  - !GMPruningModifier {params: __ALL_PRUNABLE__, init_sparsity: 0.3, "
              "final_sparsity: 0.6, start_epoch: 0, end_epoch: 2, update_frequency: 0.5}\n")
    keras.utils.set_random_seed(0)
    bare = keras_twin()
    bare.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    model = keras_twin()
    manager = ScheduledModifierManager.from_yaml(recipe)
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(0.1, momentum=0.9), S)
    model.compile(optimizer=optimizer, loss="mse")
    x, y = _data()
    bare.fit(x, y, batch_size=4, epochs=1, verbose=0)
    model.fit(x, y, batch_size=4, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=callbacks)
    assert len(model.optimizer.variables) == len(bare.optimizer.variables) + 1
    extra = [v for v in model.optimizer.variables if v.dtype in ("bool", "uint8")]
    assert [v.dtype for v in extra] == ["uint8"]
    packed = manager.runtime.step_masks.packed
    assert extra[0] is packed.variable
    update_bit = 1 << 1
    assert np.all(np.asarray(keras.ops.convert_to_numpy(packed.variable.value)) & update_bit)
    sparsities = [1 - e.mask.mean() for e in manager.runtime.masks.params.values()]
    assert len(sparsities) == 4 and all(0.55 < s < 0.65 for s in sparsities)
