"""DistillationModifier on Keras 3 (``recipe_spec_keras.distillation``): SparseML's KL term in
``keras.ops`` against the PyTorch backend's and NumPy; the loss ``model.fit`` trains on
(hardness 0 and 1, the active window); step-by-step parity with the PyTorch backend with a
given teacher and with ``"self"``; a custom loop's ``loss_update`` traced once; resuming a
self-distillation run; ``"disable"``."""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from recipe_spec_keras.distillation import kl_logsoftmax  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

B = 4  # batch size


def _recipe(hardness: float = 0.5, temperature: float = 2.0, start: float = 0, end: float = -1) -> str:
    return (
        "modifiers:\n"
        f"  - !DistillationModifier {{start_epoch: {start}, end_epoch: {end}, hardness: {hardness}, "
        f"temperature: {temperature}}}\n"
    )


def _mlp(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((6,))
    hidden = keras.layers.Dense(8, activation="relu", name="fc1")(inputs)
    return keras.Model(inputs, keras.layers.Dense(4, name="fc2")(hidden))


def _torch_twin(model: keras.Model) -> nn.Module:
    net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))
    with torch.no_grad():
        for layer, name in ((net[0], "fc1"), (net[2], "fc2")):
            kernel, bias = model.get_layer(name).get_weights()
            layer.weight.copy_(torch.from_numpy(kernel.T.copy()))
            layer.bias.copy_(torch.from_numpy(bias))
    return net


def _data(steps: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.normal(size=(steps * B, 6)).astype("float32"),
            rng.normal(size=(steps * B, 4)).astype("float32"))


def _np_kl(s: np.ndarray, t: np.ndarray, temp: float) -> float:
    """KL(softmax(t/T) || softmax(s/T)) per row (last axis), averaged over rows, times T²."""
    def log_softmax(v: np.ndarray) -> np.ndarray:
        v = v.astype(np.float64) / temp
        v = v - v.max(-1, keepdims=True)
        return v - np.log(np.exp(v).sum(-1, keepdims=True))
    ls, lt = log_softmax(s), log_softmax(t)
    return float((np.exp(lt) * (lt - ls)).sum(-1).mean() * temp ** 2)


def _value(x) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


def _weights(model: keras.Model) -> list[np.ndarray]:
    return [np.array(w) for w in model.get_weights()]


def _fit(model, callbacks, steps: int, extra: list | None = None) -> None:
    x, y = _data(steps)
    model.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0, callbacks=[*callbacks, *(extra or [])])


def _setup(text: str, teacher, steps_per_epoch: int = 2, seed: int = 0):
    model = _mlp(seed)
    manager = ScheduledModifierManager.from_yaml(text)
    model, opt, callbacks = manager.modify(model, keras.optimizers.SGD(0.1), steps_per_epoch,
                                           distillation_teacher=teacher)
    model.compile(optimizer=opt, loss="mse")
    return model, manager, callbacks


# -- (a) the KL term ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 7), (2, 5, 7)])
@pytest.mark.parametrize("temperature", [1.0, 3.0])
def test_the_kl_term_equals_the_torch_backends_and_numpys(shape, temperature) -> None:
    from recipe_spec_torch.distillation import kl_logsoftmax as torch_kl

    rng = np.random.default_rng(1)
    s, t = rng.normal(size=shape).astype("float32") * 3, rng.normal(size=shape).astype("float32") * 3
    got = float(_value(kl_logsoftmax(keras.ops.convert_to_tensor(s), keras.ops.convert_to_tensor(t), temperature)))
    want = float(torch_kl(torch.from_numpy(s), torch.from_numpy(t), temperature))
    assert got == pytest.approx(want, rel=1e-5)
    assert got == pytest.approx(_np_kl(s, t, temperature), rel=1e-5)
    with pytest.raises(ValueError, match="same shape"):
        kl_logsoftmax(keras.ops.ones((4, 7)), keras.ops.ones((4, 6)), 1.0)


# -- (b) hardness 0 and 1 through fit ------------------------------------------------------------
def test_hardness_zero_trains_exactly_as_without_distillation() -> None:
    plain = _mlp(0)
    plain.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    _fit(plain, [], 3)
    model, _, callbacks = _setup(_recipe(hardness=0.0), _mlp(1))
    _fit(model, callbacks, 3)
    for a, b in zip(_weights(model), _weights(plain), strict=True):
        assert np.array_equal(a, b)


def test_hardness_one_trains_on_the_pure_distillation_loss() -> None:
    teacher = _mlp(1)
    model, _, callbacks = _setup(_recipe(hardness=1.0, temperature=3.0), teacher)
    x, y = _data(1)
    before = [tf.Variable(w) for w in _weights(model)]
    losses = []

    class Loss(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            losses.append(float(logs["loss"]))

    _fit(model, callbacks, 1, [Loss()])
    k1, b1, k2, b2 = before  # the same step by hand: SGD on the KL term only, no MSE
    with tf.GradientTape() as tape:
        out = tf.matmul(tf.nn.relu(tf.matmul(x, k1) + b1), k2) + b2
        t_out = teacher(x, training=False)
        kl = tf.reduce_sum(tf.nn.softmax(t_out / 3) * (tf.nn.log_softmax(t_out / 3) - tf.nn.log_softmax(out / 3)), -1)
        distill = tf.reduce_mean(kl) * 9.0
    grads = tape.gradient(distill, before)
    assert losses[0] == pytest.approx(float(distill), rel=1e-5)
    assert float(distill) == pytest.approx(_np_kl(out.numpy(), t_out.numpy(), 3.0), rel=1e-5)
    for w, v, g in zip(_weights(model), before, grads, strict=True):
        np.testing.assert_allclose(w, v.numpy() - 0.1 * g.numpy(), rtol=1e-5, atol=1e-6)


# -- (c) parity with the PyTorch backend ---------------------------------------------------------
@pytest.mark.parametrize("teacher_kind", ["model", "self"])
def test_step_by_step_parity_with_pytorch(teacher_kind: str) -> None:
    """start_epoch 1, end_epoch 3 at 2 steps an epoch, 8 steps: plain, distilled (steps 2-5),
    plain again; the student's weights after every step agree with the PyTorch backend's."""
    steps, text = 8, _recipe(hardness=0.6, temperature=2.0, start=1, end=3)
    kteacher = _mlp(1) if teacher_kind == "model" else "self"
    model, manager, callbacks = _setup(text, kteacher)
    net = _torch_twin(model)
    tteacher = _torch_twin(kteacher) if teacher_kind == "model" else "self"
    tman = ScheduledModifierManager.from_yaml(text)
    topt = tman.modify(net, torch.optim.SGD(net.parameters(), lr=0.1), 2, distillation_teacher=tteacher)
    x, y = _data(steps)
    torch_weights = []
    for k in range(steps):
        xb, yb = torch.from_numpy(x[k * B:(k + 1) * B]), torch.from_numpy(y[k * B:(k + 1) * B])
        out = net(xb)
        loss = tman.loss_update(nn.functional.mse_loss(out, yb), student_outputs=out, student_inputs=xb)
        topt.zero_grad()
        loss.backward()
        topt.step()
        torch_weights.append([p.detach().numpy().copy() for p in net.parameters()])
    keras_weights = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            keras_weights.append([w.T for w in _weights(self.model)])

    _fit(model, callbacks, steps, [Record()])
    assert len(keras_weights) == steps
    for k in range(steps):
        for kw, tw in zip(keras_weights[k], torch_weights[k], strict=True):
            np.testing.assert_allclose(kw, tw, rtol=1e-5, atol=1e-6, err_msg=f"step {k}")
    if teacher_kind == "self":  # the copy was dropped at the end step
        assert not manager.runtime.distillation.teachers and not tman.runtime.distillation.teachers


# -- (d) the window, through fit and in a custom loop --------------------------------------------
def test_fit_trains_on_the_plain_loss_outside_the_window_without_retracing() -> None:
    """start_epoch 1, end_epoch 2 at 2 steps an epoch: steps 2 and 3 distil, 0, 1, 4, 5 not; the
    loss of each step (from fit's running mean) is the plain or the mixed loss computed by hand
    from the weights before it, and the train function is traced once."""
    teacher = _mlp(1)
    model, manager, callbacks = _setup(_recipe(hardness=0.7, start=1, end=2), teacher)
    x, y = _data(6)
    expected, means, functions = [], [], set()

    class Check(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            xb, yb = x[batch * B:(batch + 1) * B], y[batch * B:(batch + 1) * B]
            out = _value(self.model(xb))
            plain = float(np.mean((out - yb) ** 2))
            distill = _np_kl(out, _value(teacher(xb)), 2.0)
            expected.append((plain, 0.3 * plain + 0.7 * distill))

        def on_train_batch_end(self, batch, logs=None):
            means.append(float(logs["loss"]))
            functions.add(id(self.model.train_function))

    _fit(model, callbacks, 6, [Check()])
    losses = [means[0]] + [(k + 1) * means[k] - k * means[k - 1] for k in range(1, 6)]
    for k, (got, (plain, mixed)) in enumerate(zip(losses, expected, strict=True)):
        assert abs(plain - mixed) > 1e-3
        assert got == pytest.approx(mixed if k in (2, 3) else plain, rel=1e-4), k
    assert len(functions) == 1


def _custom_step(model, manager, opt):
    """A custom TensorFlow training step with the recipe's ``loss_update`` (MSE task loss);
    it returns the plain loss, the mixed loss and the outputs."""

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            plain = tf.reduce_mean(tf.square(out - y))
            loss = manager.loss_update(plain, student_outputs=out, student_inputs=x)
        opt.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        return plain, loss, out

    return train_step


def test_a_custom_loop_traced_once_follows_the_window() -> None:
    teacher = _mlp(1)
    model = _mlp(0)
    manager = ScheduledModifierManager.from_yaml(_recipe(hardness=1.0, start=1, end=2))
    model, opt, _ = manager.modify(model, keras.optimizers.SGD(0.1), 2, distillation_teacher=teacher)
    x, y = _data(1)

    train_step = _custom_step(model, manager, opt)

    active = []
    for _ in range(6):
        manager.runtime.step_begin()
        plain, loss, out = train_step(x, y)
        manager.runtime.step_end()
        active.append(float(loss) != float(plain))
        if active[-1]:
            assert float(loss) == pytest.approx(_np_kl(out.numpy(), _value(teacher(x)), 2.0), rel=1e-5)
        else:
            assert float(loss) == float(plain)
    assert active == [False, False, True, True, False, False]
    assert train_step.experimental_get_tracing_count() == 1


def test_self_distillation_in_a_custom_loop_takes_the_copy_at_the_start_step() -> None:
    model = _mlp(0)
    manager = ScheduledModifierManager.from_yaml(_recipe(hardness=0.5, start=1))
    model, opt, _ = manager.modify(model, keras.optimizers.SGD(0.1), 2, distillation_teacher="self")
    x, y = _data(1)

    train_step = _custom_step(model, manager, opt)

    dist = manager.runtime.distillation
    losses = []
    for k in range(5):
        if k == 2:
            at_start = _weights(model)
        manager.runtime.step_begin()
        assert bool(dist.teachers) == (k >= 2)
        plain, loss, out = train_step(x, y)
        losses.append((float(plain), float(loss)))
        manager.runtime.step_end()
    assert losses[1][1] == losses[1][0]
    # the copy is the student at the start step: its distillation term is 0 there
    assert losses[2][1] == pytest.approx(0.5 * losses[2][0], rel=1e-6)
    teacher = dist.teachers[0]
    distill = _np_kl(out.numpy(), _value(teacher(x)), 2.0)
    assert distill > 1e-4 and losses[4][1] == pytest.approx(0.5 * losses[4][0] + 0.5 * distill, rel=1e-5)
    assert teacher is not model and not teacher.trainable_weights
    for a, b in zip(teacher.get_weights(), at_start, strict=True):
        assert np.array_equal(a, b)
    manager.finalize(model)
    assert not dist.teachers and "compute_loss" not in vars(model)


# -- (e) save and resume ---------------------------------------------------------------------------
def test_resuming_keeps_the_self_distillation_teacher(tmp_path) -> None:
    """Checkpointed after epoch 1 (the copy taken at step 0) and resumed in a fresh model and
    manager: the teacher and the weights of every later step match an uninterrupted run."""
    text = _recipe(hardness=0.5, start=0)
    model, manager, callbacks = _setup(text, "self")
    path = str(tmp_path / "ckpt.keras")
    x, y = _data(2)
    model.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0,
              callbacks=[*callbacks, manager.runtime.checkpoint_callback(path)])
    teacher_saved = _weights(manager.runtime.distillation.teachers[0])
    model.fit(x, y, batch_size=B, epochs=3, initial_epoch=1, shuffle=False, verbose=0, callbacks=callbacks)

    loaded = keras.saving.load_model(path)
    manager2 = ScheduledModifierManager.from_yaml(text)
    loaded, _, callbacks2 = manager2.modify(loaded, loaded.optimizer, 2, distillation_teacher="self")
    epoch = manager2.runtime.restore(path)
    assert epoch == 1
    teacher2 = manager2.runtime.distillation.teachers[0]
    for a, b in zip(teacher2.get_weights(), teacher_saved, strict=True):
        assert np.array_equal(a, b)
    assert not teacher2.trainable_weights
    loaded.fit(x, y, batch_size=B, epochs=3, initial_epoch=epoch, shuffle=False, verbose=0, callbacks=callbacks2)
    for a, b in zip(_weights(loaded), _weights(model), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


# -- (f) disable, no distillation, errors, JAX ------------------------------------------------------
def test_disable_warns_and_leaves_the_loss_alone() -> None:
    for teacher in ("disable", None):
        model = _mlp(0)
        manager = ScheduledModifierManager.from_yaml(_recipe(hardness=1.0))
        with pytest.warns(UserWarning, match="distillation_teacher is 'disable'"):
            kwargs = {} if teacher is None else {"distillation_teacher": teacher}
            model, opt, callbacks = manager.modify(model, keras.optimizers.SGD(0.1), 2, **kwargs)
        assert "compute_loss" not in vars(model)
        loss = keras.ops.convert_to_tensor(1.0)
        assert manager.loss_update(loss) is loss
    model.compile(optimizer=opt, loss="mse")
    _fit(model, callbacks, 2)
    plain = _mlp(0)
    plain.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    _fit(plain, [], 2)
    for a, b in zip(_weights(model), _weights(plain), strict=True):
        assert np.array_equal(a, b)


def test_without_distillation_a_teacher_is_ignored() -> None:
    model = _mlp(0)
    manager = ScheduledModifierManager.from_yaml("modifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 2}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        manager.modify(model, keras.optimizers.SGD(0.1), 2, distillation_teacher=_mlp(1))
    loss = keras.ops.convert_to_tensor(1.0)
    assert manager.loss_update(loss) is loss
    assert "compute_loss" not in vars(model)


def test_errors(monkeypatch) -> None:
    model, manager, _ = _setup(_recipe(hardness=0.5, start=1), _mlp(1))
    loss = keras.ops.convert_to_tensor(1.0)
    # not active yet, but a traced step keeps what it saw: the outputs are needed now
    with pytest.raises(ValueError, match=r"line 2.*distils on steps 2 to the end.*student_outputs"):
        manager.loss_update(loss)
    with pytest.raises(ValueError, match="same shape"):
        m2, manager2, _ = _setup(_recipe(hardness=0.5), keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)]))
        x = np.zeros((2, 6), "float32")
        manager2.runtime.step_begin()
        manager2.loss_update(loss, student_outputs=m2(x), student_inputs=x)
    with pytest.raises(ValueError, match="unrecognized value for distillation_teacher"):
        ScheduledModifierManager.from_yaml(_recipe()).modify(_mlp(0), keras.optimizers.SGD(0.1), 2,
                                                             distillation_teacher="teacher.keras")
    with pytest.raises(RuntimeError, match="modify"):
        ScheduledModifierManager.from_yaml(_recipe()).loss_update(loss)

    class Sub(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.d = keras.layers.Dense(3)

        def call(self, x):
            return self.d(x)

    sub = Sub()
    sub(np.zeros((1, 6), "float32"))
    with pytest.raises(ValueError, match="clone_model.*pass a teacher model"):
        ScheduledModifierManager.from_yaml(_recipe()).modify(sub, keras.optimizers.SGD(0.1), 2, distillation_teacher="self")
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(NotImplementedError, match="KERAS_BACKEND='jax'"):
        ScheduledModifierManager.from_yaml(_recipe()).modify(_mlp(0), keras.optimizers.SGD(0.1), 2,
                                                             distillation_teacher=_mlp(1))
