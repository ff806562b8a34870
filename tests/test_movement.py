"""MovementPruningModifier: the scores and masks against a plain PyTorch loop that follows
SparseML's MovementPruningParamsScorer written out here, step by step; the Keras backend
against PyTorch; resume; what is refused; and create.initialize(pruning="movement")."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from recipe_spec import loads  # noqa: E402
from recipe_spec.validation import validate  # noqa: E402

torch = pytest.importorskip("torch")

RECIPE = """
modifiers:
  - !MovementPruningModifier {params: [fc1.weight, fc2.weight], init_sparsity: 0.1, final_sparsity: 0.6,
                              start_epoch: 1, end_epoch: 3, update_frequency: 1}
"""
S, STEPS = 2, 8


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(STEPS, 16, 8)).astype("float32"), rng.normal(size=(STEPS, 16, 4)).astype("float32")


def _targets() -> dict[int, float]:
    """The sparsity of each update step: cubic from 0.1 (epoch 1) to 0.6 (epoch 3), yearly."""
    return {2: 0.1, 4: 0.6 + (0.1 - 0.6) * (1 - 0.5) ** 3, 6: 0.6}


def _reference(net: Net) -> list[dict[str, np.ndarray]]:
    """SparseML's loop by hand: score -= 0.01 * masked grad * w before every step; at an update
    step the lowest round(s*n) scores are pruned and the weights zeroed, then SGD."""
    X, Y = _data()
    names = ("fc1", "fc2")
    scores = {n: torch.zeros_like(getattr(net, n).weight) for n in names}
    masks = {n: torch.ones_like(getattr(net, n).weight, dtype=torch.bool) for n in names}
    out = []
    for k in range(STEPS):
        net.zero_grad()
        torch.nn.functional.mse_loss(net(torch.tensor(X[k])), torch.tensor(Y[k])).backward()
        with torch.no_grad():
            for n in names:
                w = getattr(net, n).weight
                w.grad.mul_(masks[n])  # the mask hook during backward: the mask before this step
                scores[n] += -0.01 * w.grad * w
            if k in _targets():
                for n in names:
                    flat = scores[n].flatten()
                    pruned = torch.argsort(flat, stable=True)[: round(_targets()[k] * flat.numel())]
                    keep = torch.ones_like(flat, dtype=torch.bool)
                    keep[pruned] = False
                    masks[n] = keep.view_as(scores[n])
                    getattr(net, n).weight.mul_(masks[n])
            for p in net.parameters():
                p -= 0.1 * p.grad
            for n in names:
                getattr(net, n).weight.mul_(masks[n])
        out.append({n: (getattr(net, n).weight != 0).numpy().copy() for n in names})
    return out


def _run_torch(net: Net, steps: range = range(STEPS), state=None):
    X, Y = _data()
    manager = loads(RECIPE).compile("torch")
    opt = manager.modify(net, torch.optim.SGD(net.parameters(), lr=0.1), S)
    if state is not None:
        manager.load_state_dict(state)
    masks = []
    for k in steps:
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(torch.tensor(X[k])), torch.tensor(Y[k])).backward()
        opt.step()
        masks.append({n: (getattr(net, n).weight != 0).numpy().copy() for n in ("fc1", "fc2")})
    return manager, masks


def test_torch_matches_the_loop_written_out() -> None:
    torch.manual_seed(0)
    net = Net()
    twin = Net()
    twin.load_state_dict(net.state_dict())
    want = _reference(twin)
    _, got = _run_torch(net)
    for k in range(STEPS):
        for n in ("fc1", "fc2"):
            np.testing.assert_array_equal(got[k][n], want[k][n], err_msg=f"{n} at step {k}")
    assert abs(float((net.fc1.weight == 0).float().mean()) - 0.6) < 1 / 128
    torch.testing.assert_close(net.fc1.weight, twin.fc1.weight)


def test_scores_rank_movement_not_magnitude() -> None:
    """The masks are not magnitude masks: some kept weights are smaller than some pruned ones
    were (movement keeps weights moving away from zero)."""
    torch.manual_seed(0)
    net = Net()
    before = net.fc1.weight.detach().abs().clone()
    manager, masks = _run_torch(net, range(3))
    kept = masks[2]["fc1"]
    magnitude = before.flatten().argsort()[: round(0.1 * 128)]
    assert not np.array_equal(~kept.flatten()[magnitude.numpy()], np.ones(len(magnitude), bool))


def test_resume_continues_the_scores() -> None:
    torch.manual_seed(0)
    net = Net()
    twin = Net()
    twin.load_state_dict(net.state_dict())
    _, whole = _run_torch(twin)
    manager, _ = _run_torch(net, range(3))
    state = manager.state_dict()
    assert state["second_order"]["0"]["scores"] is not None
    resumed = Net()
    resumed.load_state_dict(net.state_dict())
    _, rest = _run_torch(resumed, range(3, STEPS), state=state)
    for n in ("fc1", "fc2"):
        np.testing.assert_array_equal(rest[-1][n], whole[-1][n])


def test_keras_matches_torch_step_by_step() -> None:
    keras = pytest.importorskip("keras")
    torch.manual_seed(0)
    net = Net()
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(16, activation="relu", name="fc1")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(4, name="fc2")(hidden))
    for n in ("fc1", "fc2"):
        model.get_layer(n).set_weights([getattr(net, n).weight.detach().numpy().T, getattr(net, n).bias.detach().numpy()])
    manager = loads(RECIPE).compile("keras")
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(0.1), S)
    model.compile(optimizer=optimizer, loss="mse")
    keras_masks: list[dict[str, np.ndarray]] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            held = manager.masks.params  # the masks in force (Keras kernels: (in, out))
            keras_masks.append({n: held[f"{n}/kernel"].mask.T.copy() if f"{n}/kernel" in held else np.ones((1,), bool)
                                for n in ("fc1", "fc2")})

    X, Y = _data()
    model.fit(X.reshape(-1, 8), Y.reshape(-1, 4), batch_size=16, epochs=1, steps_per_epoch=STEPS,
              shuffle=False, verbose=0, callbacks=[*callbacks, Record()])
    torch_masks = _torch_held(net)
    for k in range(STEPS):
        for n in ("fc1", "fc2"):
            np.testing.assert_array_equal(keras_masks[k][n], torch_masks[k][n], err_msg=f"{n} at step {k}")
    # weights never pruned followed the same updates
    never = torch_masks[2]["fc2"] & torch_masks[4]["fc2"] & torch_masks[-1]["fc2"]
    np.testing.assert_allclose(model.get_layer("fc2").get_weights()[0].T[never],
                               net.fc2.weight.detach().numpy()[never], atol=1e-5)


def _torch_held(net: Net) -> list[dict[str, np.ndarray]]:
    """The masks in force after each step of the PyTorch run (Keras's raw gradients move a
    weight re-admitted at a step in that very step, PyTorch's masked ones from the next: the
    held masks compare exactly, the weights where they were ever pruned do not)."""
    X, Y = _data()
    manager = loads(RECIPE).compile("torch")
    opt = manager.modify(net, torch.optim.SGD(net.parameters(), lr=0.1), S)
    out = []
    for k in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(torch.tensor(X[k])), torch.tensor(Y[k])).backward()
        opt.step()
        held = manager.masks.params
        out.append({n: held[f"{n}.weight"].mask.numpy().copy() if f"{n}.weight" in held else np.ones((1,), bool)
                    for n in ("fc1", "fc2")})
    return out


def test_signed_scores_refuse_magnitude_mask_types() -> None:
    text = RECIPE.replace("update_frequency: 1}", "update_frequency: 1, mask_type: filter}")
    found = [d for d in validate(text, backend="torch") if d.severity.value == "error"]
    assert [d.code for d in found] == ["M006"] and "signed" in found[0].message
    assert not [d for d in validate(RECIPE.replace("update_frequency: 1}", "update_frequency: 1, mask_type: block4}"),
                                    backend="torch") if d.severity.value == "error"]


def test_one_shot_is_refused() -> None:
    net = Net()
    manager = loads(RECIPE).compile("torch")
    with pytest.raises(ValueError, match="one-shot apply"):
        manager.apply(net)


def test_create_movement_is_layerwise_by_default() -> None:
    from recipe_spec import create

    torch.manual_seed(0)
    net = Net()
    manager, opt = create.initialize(net, torch.optim.SGD(net.parameters(), lr=0.1), 2, pruning="movement",
                                     quantization=False, recipe_variables={"num_epochs": 4.0})
    (m,) = [m for m in manager.modifiers if m.type == "MovementPruningModifier"]
    assert "global_sparsity" not in m.args
    X, Y = _data()
    for k in range(8):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(torch.tensor(X[k])), torch.tensor(Y[k])).backward()
        opt.step()
    for layer in (net.fc1, net.fc2):  # each layer at the target: layer-wise
        assert abs(float((layer.weight == 0).float().mean()) - 0.8) <= 1 / layer.weight.numel()
    with pytest.raises(ValueError, match="cannot be global"):
        create.initialize(Net(), torch.optim.SGD(Net().parameters(), lr=0.1), 2, pruning="movement",
                          recipe_variables={"global_sparsity": True})


def test_backends_declare_it() -> None:
    from recipe_spec.modifiers import supported_by
    from recipe_spec.registry import supported_modifiers

    assert "MovementPruningModifier" not in supported_by(frozenset({"masks", "scores:magnitude", "gradients"}))
    assert "MovementPruningModifier" in supported_modifiers("torch")
    assert "MovementPruningModifier" in supported_modifiers("keras")
