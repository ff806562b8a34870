"""Every `create.initialize` option trains a small real network end to end, on PyTorch and on
Keras: the loss stays finite and falls, the pruned layers end at the `sparsity` variable
(globally or layer by layer as the option says), held zeros stay zero, QAT is running when
the recipe says so. The schedules themselves are checked elsewhere (test_create.py's golden
cases, test_acdc.py, test_movement.py, the second-order and distillation tests)."""

from __future__ import annotations

import math
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from recipe_spec import create  # noqa: E402

S = 4  # steps per epoch
VARIABLES = {"num_epochs": 4.0, "sparsity": 0.75, "init_lr": 0.02, "final_lr": 0.001}
# (pruning, quantization, distillation, lr): what the run must show
OPTIONS = [
    (True, True, False, "linear"),
    ("gmp", False, False, "cosine"),
    (False, False, False, "step"),
    (None, True, False, "exponential"),
    ("acdc", False, False, "linear"),
    ("mfac", False, False, "multistep"),
    ("obs", False, False, "linear"),
    ("movement", False, False, "cyclic_linear"),
    ("constant", True, False, "linear"),
    ("transfer", False, True, "linear"),
    (True, False, True, "cosine"),
]
GLOBAL = {True, "gmp", "acdc", "mfac", "obs"}  # the global_sparsity variable defaults to True
LAYERWISE = {"movement"}  # movement pruning is always layer-wise


def _ids(option) -> str:
    return "-".join(str(x) for x in option)


def _data(n_in: int, n_out: int):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(S * 8, n_in)).astype("float32")
    w = rng.normal(size=(n_in, n_out)).astype("float32")
    return x, (x @ w / math.sqrt(n_in)).astype("float32")


def _check_sparsity(option, weights: dict[str, np.ndarray], zeros_before: dict[str, np.ndarray]) -> None:
    pruning = option[0]
    counts = {n: (w == 0).sum() for n, w in weights.items()}
    if pruning in GLOBAL:
        total = sum(w.size for w in weights.values())
        assert abs(sum(counts.values()) / total - 0.75) <= 1 / total + 1e-9, counts
    elif pruning in LAYERWISE:
        for n, w in weights.items():
            assert abs(counts[n] / w.size - 0.75) <= 1 / w.size + 1e-9, (n, counts[n] / w.size)
    else:
        if pruning is None or (pruning is False and not option[1]):
            return  # no pruning modifier: the zeros the model had may regrow
        for n, w in weights.items():  # constant, transfer, False with QAT: the zeros are held
            assert (w[zeros_before[n]] == 0).all(), n


# -- PyTorch ---------------------------------------------------------------------------------------
torch = pytest.importorskip("torch")


def _torch_net():
    torch.manual_seed(0)
    net = torch.nn.Sequential()
    net.add_module("fc1", torch.nn.Linear(12, 32))
    net.add_module("relu", torch.nn.ReLU())
    net.add_module("fc2", torch.nn.Linear(32, 32))
    net.add_module("relu2", torch.nn.ReLU())
    net.add_module("fc3", torch.nn.Linear(32, 4))
    with torch.no_grad():  # some zeros the model already has (sparse transfer holds them)
        net.fc1.weight[:, :3] = 0.0
    return net


@pytest.mark.parametrize("option", OPTIONS, ids=_ids)
def test_torch_option_trains(option) -> None:
    pruning, quantization, distillation, lr = option
    net = _torch_net()
    x, y = _data(12, 4)
    batches = [(torch.tensor(x[i * 8:(i + 1) * 8]), torch.tensor(y[i * 8:(i + 1) * 8])) for i in range(S)]
    zeros_before = {n: (getattr(net, n).weight.detach() == 0).numpy() for n in ("fc1", "fc2", "fc3")}
    extra = {}
    if pruning in ("mfac", "obs"):
        def build(_kwargs):
            for i in range(1024 if pruning == "obs" else 64):  # the template's num_grads
                bx, by = batches[i % S]
                yield (bx,), {}, by
        extra["grad_sampler"] = {"data_loader_builder": build, "loss_function": torch.nn.functional.mse_loss}
    optimizer = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9)
    manager, optimizer = create.initialize(
        net, optimizer, S, pruning=pruning, quantization=quantization, lr=lr, distillation=distillation,
        recipe_variables=VARIABLES, **extra)
    assert manager.max_epochs == 4
    losses = []
    for _ in range(manager.max_epochs):
        for bx, by in batches:
            optimizer.zero_grad()
            out = net(bx)
            loss = torch.nn.functional.mse_loss(out, by)
            if distillation:
                loss = manager.loss_update(loss, student_outputs=out, student_inputs=bx)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    assert all(math.isfinite(v) for v in losses)
    assert np.mean(losses[-S:]) < np.mean(losses[:S])
    if quantization:
        assert manager.runtime.quantization is not None  # QAT started and is running
    manager.finalize(net)
    weights = {n: getattr(net, n).weight.detach().numpy() for n in ("fc1", "fc2", "fc3")}
    _check_sparsity(option, weights, zeros_before)


# -- Keras ----------------------------------------------------------------------------------------
def _keras_net():
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    inputs = keras.Input((12,))
    h = keras.layers.Dense(32, activation="relu", name="fc1")(inputs)
    h = keras.layers.Dense(32, activation="relu", name="fc2")(h)
    model = keras.Model(inputs, keras.layers.Dense(4, name="fc3")(h))
    kernel, bias = model.get_layer("fc1").get_weights()
    kernel[:3, :] = 0.0  # input rows: the same zeros as the PyTorch net's fc1.weight[:, :3]
    model.get_layer("fc1").set_weights([kernel, bias])
    return keras, model


@pytest.mark.parametrize("option", OPTIONS, ids=_ids)
def test_keras_option_trains(option) -> None:
    pruning, quantization, distillation, lr = option
    keras, model = _keras_net()
    x, y = _data(12, 4)
    zeros_before = {n: model.get_layer(n).get_weights()[0] == 0 for n in ("fc1", "fc2", "fc3")}
    extra = {}
    if pruning in ("mfac", "obs"):
        def build(_kwargs):
            for i in range(1024 if pruning == "obs" else 64):  # the template's num_grads
                j = i % S
                yield (x[j * 8:(j + 1) * 8],), {}, y[j * 8:(j + 1) * 8]
        extra["grad_sampler"] = {"data_loader_builder": build,
                                 "loss_function": lambda out, target: keras.ops.mean((out - target) ** 2)}
    manager, (model, optimizer, callbacks) = create.initialize(
        model, keras.optimizers.SGD(0.02, momentum=0.9), S, pruning=pruning, quantization=quantization, lr=lr,
        distillation=distillation,
        recipe_variables=VARIABLES, **extra)
    model.compile(optimizer=optimizer, loss="mse")
    history = model.fit(x, y, batch_size=8, epochs=manager.max_epochs, shuffle=False, verbose=0, callbacks=callbacks)
    losses = history.history["loss"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    if quantization:
        assert manager.runtime.quantization is not None
    manager.finalize(model)
    weights = {n: model.get_layer(n).get_weights()[0] for n in ("fc1", "fc2", "fc3")}
    _check_sparsity(option, weights, zeros_before)
