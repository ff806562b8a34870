"""Masks are enforced by selection (``where``), not multiplication, on both backends: weights
and gradients that become NaN or infinite after the last mask update keep their pruned entries
exactly 0 (NaN * 0 is NaN), and the optimizer state of pruned weights stays finite."""

from __future__ import annotations

import os

import numpy as np
import pytest

import recipe_spec

RECIPE = """
modifiers:
  - !GMPruningModifier {params: [%s], init_sparsity: 0.5, final_sparsity: 0.75,
                        start_epoch: 0, end_epoch: 1, update_frequency: 1}
"""


def test_torch_nan_weights_and_gradients_keep_pruned_zeros() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    manager = recipe_spec.loads(RECIPE % "weight").compile("torch")
    opt = manager.modify(model, opt, steps_per_epoch=2)
    for _ in range(3):  # the last mask update is step 2
        opt.zero_grad()
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
    pruned = model.weight.detach() == 0
    assert int(pruned.sum()) == 24
    # a NaN gradient: the hook selects, so pruned gradients are exactly 0
    opt.zero_grad()
    x = torch.randn(2, 8)
    x[0] = float("nan")  # every raw gradient entry is NaN
    model(x).sum().backward()
    assert torch.isnan(model.weight.grad[~pruned]).all()
    assert bool((model.weight.grad[pruned] == 0).all())
    opt.step()
    assert torch.isnan(model.weight).any(), "the NaN reached the kept weights"
    assert bool((model.weight.detach()[pruned] == 0).all()), "pruned weights stay exactly 0"
    assert not bool(torch.signbit(model.weight.detach()[pruned]).any())  # +0.0
    buf = opt.state[model.weight]["momentum_buffer"]
    assert bool(torch.isfinite(buf[pruned]).all()), "pruned momentum never sees the NaN"
    # weights written NaN / inf in place: the forward pre-hook re-masks them
    with torch.no_grad():
        model.weight.fill_(float("inf"))
        model.weight[0, 0] = float("nan")
    model(torch.randn(2, 8))
    assert bool((model.weight.detach()[pruned] == 0).all())
    manager.finalize(model)
    assert bool((model.weight.detach()[pruned] == 0).all())


def test_keras_nan_weights_and_gradients_keep_pruned_zeros() -> None:
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, name="d")])
    opt = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    manager = recipe_spec.loads(RECIPE % "d/kernel").compile("keras")
    model, opt, callbacks = manager.modify(model, opt, steps_per_epoch=2)
    model.compile(optimizer=opt, loss="mse")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 8)).astype("float32"), rng.normal(size=(6, 4)).astype("float32")
    model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)  # steps 0-2
    kernel = model.get_layer("d").kernel
    pruned = np.asarray(keras.ops.convert_to_numpy(kernel)) == 0
    assert int(pruned.sum()) == 24
    bad = x[:2].copy()
    bad[0] = np.nan  # every raw gradient entry is NaN, and so are the kept weights after
    model.fit(bad, y[:2], batch_size=2, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    value = np.asarray(keras.ops.convert_to_numpy(kernel))
    assert np.isnan(value).any(), "the NaN reached the kept weights"
    assert (value[pruned] == 0).all() and not np.signbit(value[pruned]).any(), "pruned weights stay exactly +0"
    momentum = [v for v in opt.variables if v.name.endswith("_momentum") and tuple(v.shape) == pruned.shape]
    assert momentum and np.isfinite(np.asarray(keras.ops.convert_to_numpy(momentum[0]))[pruned]).all(), \
        "the pruned gradient was selected before the update: the momentum never sees the NaN"
    manager.finalize(model)
    assert (np.asarray(keras.ops.convert_to_numpy(kernel))[pruned] == 0).all()
