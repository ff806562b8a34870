"""ACDCPruningModifier: the phase table against SparseML's own formula, the momentum reset at
each dense phase after a compressed one on both backends, and the masks of both backends
step by step (the golden run of sparsify-create case 06 is in tests/test_create.py)."""

from __future__ import annotations

import math
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

from recipe_spec import loads  # noqa: E402
from recipe_spec.schedule import compile_plan  # noqa: E402


def _recipe(start: int, end: int, freq: int, extra: str = "") -> str:
    return f"""
modifiers:
  - !ACDCPruningModifier {{compression_sparsity: 0.75, start_epoch: {start}, end_epoch: {end},
                          update_frequency: {freq}, params: [fc1.weight, fc2.weight]{extra}}}
"""


def _sparseml_targets(start: int, end: int, freq: int, S: int, steps: int) -> list[float | None]:
    """SparseML 1.8, written out independently: an update at start and every ``freq`` epochs
    after the last update while the modifier runs, and at end_epoch; the sparsity an update
    applies is ``get_applied_sparsity_for_epoch`` (dense when the phase number is even and
    ``end - freq > epoch``). The target in force after each step (None before the start)."""
    out: list[float | None] = []
    current: float | None = None
    last_update = None
    for k in range(steps):
        epoch = k / S
        due = (epoch >= start and last_update is None) or (
            last_update is not None and epoch < end and epoch >= last_update + freq) or (
            last_update is not None and epoch >= end and last_update < end)
        if due:
            e = min(epoch, end) if epoch >= end else epoch
            n = math.floor((e - start) / freq)
            current = 0.0 if n % 2 == 0 and end - freq > e else 0.75
            last_update = epoch
        out.append(current)
    return out


@pytest.mark.parametrize("start,end,freq", [(0, 20, 5), (0, 12, 5), (0, 13, 5), (0, 7, 5), (0, 4, 5),
                                            (2, 9, 2), (1, 10, 1), (0, 3, 1)])
def test_phases_follow_sparseml(start: int, end: int, freq: int) -> None:
    S = 2
    plan = compile_plan(loads(_recipe(start, end, freq)), S)
    steps = (end + 2) * S
    current: float | None = None
    got = []
    for k in range(steps):
        for event in plan.events_at(k):
            if event.target == "sparsity":
                current = float(event.value)
        got.append(current)
    assert got == _sparseml_targets(start, end, freq, S, steps)


def test_leave_enabled_false_releases_at_end() -> None:
    plan = compile_plan(loads(_recipe(0, 4, 1, ", leave_enabled: false")), 2)
    assert [(e.step, e.value) for e in plan.iter_events(0) if e.target == "masks"] == [(8, "release")]


# -- the momentum reset, PyTorch ------------------------------------------------------------------
def _torch_run(reset: bool) -> list[tuple[int, float, float]]:
    """(step, sparsity of fc1 after the step, |momentum of fc1| before the step)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("fc1", torch.nn.Linear(6, 12))
    model.add_module("relu", torch.nn.ReLU())
    model.add_module("fc2", torch.nn.Linear(12, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    extra = "" if reset else ", momentum_buffer_reset: false"
    manager = loads(_recipe(0, 4, 1, extra + ", global_sparsity: false")).compile("torch")
    wrapped = manager.modify(model, opt, steps_per_epoch=2)
    x, y = torch.randn(8, 6), torch.randn(8, 3)
    out = []
    seen: dict[int, float] = {}
    assert wrapped is opt

    def before(optimizer, args, kwargs):  # after the recipe's own pre-hook: what the step starts from
        buf = optimizer.state.get(model.fc1.weight, {}).get("momentum_buffer")
        seen[manager.step_count] = float(buf.abs().sum()) if buf is not None else 0.0

    opt.register_step_pre_hook(before)
    for k in range(10):
        wrapped.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        wrapped.step()
        out.append((k, float((model.fc1.weight == 0).float().mean()), seen[k]))
    return out


def test_torch_momentum_reset_at_dense_phase() -> None:
    run = _torch_run(reset=True)
    # phases of 2 steps: dense 0-1, compressed 2-3, dense 4-5, compressed 6-7 (end 8); step 4's
    # gradient was masked when it was computed (before the step's mask change), so the pruned
    # weights re-enter from step 5, with fresh momentum
    sparsity = [round(s, 2) for _, s, _ in run[:8]]
    assert sparsity[:4] == [0.0, 0.0, 0.75, 0.75] and sparsity[6:] == [0.75, 0.75]
    assert sparsity[4] == 0.75 and sparsity[5] < 0.75
    assert run[4][2] == 0.0  # zeroed before the first step of the second dense phase
    assert run[3][2] > 0.0 and run[5][2] > 0.0
    kept = _torch_run(reset=False)
    assert kept[4][2] > 0.0  # momentum_buffer_reset: false keeps it
    assert run[0][2] == 0.0 and run[1][2] > 0.0  # the first dense phase follows no compressed one


def test_torch_reset_covers_adam_first_moment() -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec_torch.optim import reset_momentum

    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([p], lr=0.1)
    p.grad = torch.ones(3)
    opt.step()
    assert reset_momentum(opt) == 1
    assert float(opt.state[p]["exp_avg"].abs().sum()) == 0.0 and float(opt.state[p]["exp_avg_sq"].sum()) > 0


# -- the momentum reset, Keras ---------------------------------------------------------------------
def test_keras_momentum_reset_at_dense_phase() -> None:
    keras = pytest.importorskip("keras")
    import numpy as np

    inputs = keras.Input((6,))
    hidden = keras.layers.Dense(12, activation="relu", name="fc1")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3, name="fc2")(hidden))
    manager = loads(_recipe(0, 4, 1, ", global_sparsity: false")).compile("keras")
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(0.05, momentum=0.9), 2)
    model.compile(optimizer=optimizer, loss="mse")
    seen: list[float] = []
    sparsity: list[float] = []

    class Probe(keras.callbacks.Callback):
        # ``self.model``, not ``model``: on JAX, Callback.model hands the trainer's state back
        # to the variables first (KERAS_BACKEND=jax runs this file too)
        def on_train_batch_begin(self, batch, logs=None):  # after the recipe's callback
            seen.append(sum(float(np.abs(keras.ops.convert_to_numpy(v)).sum())
                            for v in self.model.optimizer.variables if v.name.endswith("_momentum")))

        def on_train_batch_end(self, batch, logs=None):
            sparsity.append(float((self.model.get_layer("fc1").get_weights()[0] == 0).mean()))

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(80, 6)).astype("float32"), rng.normal(size=(80, 3)).astype("float32")
    model.fit(x, y, batch_size=8, epochs=1, steps_per_epoch=10, shuffle=False, verbose=0,
              callbacks=[*callbacks, Probe()])
    rounded = [round(s, 2) for s in sparsity[:8]]
    assert rounded[:4] == [0.0, 0.0, 0.75, 0.75] and rounded[6:] == [0.75, 0.75]
    # the dense phase's first gradient was masked by the compressed mask (as on PyTorch) and the
    # momentum was reset: re-admitted weights first move at the next step
    assert rounded[4] == 0.75 and rounded[5] < 0.75
    assert seen[4] == 0.0 and seen[3] > 0.0 and seen[5] > 0.0


def test_keras_reset_covers_adam_first_moment() -> None:
    keras = pytest.importorskip("keras")
    import numpy as np
    from recipe_spec_keras.optim import reset_momentum

    v = keras.Variable(np.ones(3, "float32"))
    opt = keras.optimizers.Adam(0.1)
    opt.apply([keras.ops.ones(3)], [v])
    assert reset_momentum(opt) == 1
    moments = {w.name.rsplit("_", 1)[-1]: float(np.abs(keras.ops.convert_to_numpy(w)).sum())
               for w in opt.variables if w.name.endswith(("_momentum", "_velocity"))}
    assert moments["momentum"] == 0.0 and moments["velocity"] > 0.0
