"""Every modifier a backend lists in ``schemas/backends.json`` really runs there (issue 16 item
5): a recipe using it trains a small model, and what the run leaves (weights, LR, weight decay,
trainable flags, module structure, the outputs on a fixed input) must differ from the same run
without the modifier. A modifier listed without a recipe here fails ("no check for X"), so a
backend cannot claim a modifier nobody showed it runs.

EpochRangeModifier only sets the schedule's length: its check is ``max_epochs``.
MovementPruningModifier must also differ from magnitude pruning of the same schedule.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from recipe_spec import ScheduledModifierManager  # noqa: E402

LISTED = json.loads((Path(__file__).parents[1] / "schemas" / "backends.json").read_text())["backends"]
S, EPOCHS = 4, 4

#: one recipe line per modifier; {w1}/{w2}: the two hidden weights in the backend's names
RECIPES = {
    "ACDCPruningModifier": "!ACDCPruningModifier {params: [{w1}, {w2}], compression_sparsity: 0.7, start_epoch: 0, end_epoch: 4, update_frequency: 1}",
    "ConstantPruningModifier": "!ConstantPruningModifier {params: [{w1}], start_epoch: 0, end_epoch: 4}",
    "DistillationModifier": "!DistillationModifier {start_epoch: 0, end_epoch: -1, hardness: 0.5, temperature: 2.0}",
    "EpochRangeModifier": "!EpochRangeModifier {start_epoch: 0, end_epoch: 7}",
    "GMPruningModifier": "!GMPruningModifier {params: [{w1}], init_sparsity: 0.3, final_sparsity: 0.7, start_epoch: 0, end_epoch: 2, update_frequency: 1}",
    "GlobalMagnitudePruningModifier": "!GlobalMagnitudePruningModifier {params: [{w1}, {w2}], init_sparsity: 0.3, final_sparsity: 0.7, start_epoch: 0, end_epoch: 2, update_frequency: 1}",
    "LayerPruningModifier": "!LayerPruningModifier {layers: [{mid}], start_epoch: 0, end_epoch: 4}",
    "LearningRateFunctionModifier": "!LearningRateFunctionModifier {lr_func: linear, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 4}",
    "LearningRateModifier": "!LearningRateModifier {lr_class: StepLR, lr_kwargs: {step_size: 1, gamma: 0.5}, init_lr: 0.05, start_epoch: 0, end_epoch: 4}",
    "MFACPruningModifier": "!MFACPruningModifier {params: [{w1}], init_sparsity: 0.3, final_sparsity: 0.6, start_epoch: 0, end_epoch: 2, update_frequency: 1, num_grads: 4, fisher_block_size: 8}",
    "MagnitudePruningModifier": "!MagnitudePruningModifier {params: [{w1}], init_sparsity: 0.3, final_sparsity: 0.7, start_epoch: 0, end_epoch: 2, update_frequency: 1}",
    "MovementPruningModifier": "!MovementPruningModifier {params: [{w1}], init_sparsity: 0.3, final_sparsity: 0.7, start_epoch: 1, end_epoch: 3, update_frequency: 1}",
    "OBSPruningModifier": "!OBSPruningModifier {params: [{w1}], init_sparsity: 0.3, final_sparsity: 0.6, start_epoch: 0, end_epoch: 2, update_frequency: 1, num_grads: 4, fisher_block_size: 8}",
    "QuantizationModifier": "!QuantizationModifier {start_epoch: 1}",
    "SetLearningRateModifier": "!SetLearningRateModifier {learning_rate: 0.001, start_epoch: 1}",
    "SetWeightDecayModifier": "!SetWeightDecayModifier {weight_decay: 0.5, start_epoch: 1}",
    "TrainableParamsModifier": "!TrainableParamsModifier {params: [{w1}], trainable: false, start_epoch: 0, end_epoch: -1}",
}
#: the "without it" run: EpochRangeModifier gives the same length and does nothing else
BASELINE = "!EpochRangeModifier {start_epoch: 0, end_epoch: 4}"
MOVEMENT_AS_MAGNITUDE = RECIPES["MovementPruningModifier"].replace("MovementPruningModifier", "GMPruningModifier")
NAMES = {"torch": {"w1": "fc1.weight", "w2": "fc2.weight", "mid": "mid"},
         "keras": {"w1": "fc1/kernel", "w2": "fc2/kernel", "mid": "mid"}}

CASES = [(b, m) for b in sorted(LISTED) for m in LISTED[b]["modifiers"]]


def _recipe(line: str, backend: str) -> str:
    for key, value in NAMES[backend].items():
        line = line.replace("{" + key + "}", value)
    return f"modifiers:\n  - {line}\n"


# -- torch ---------------------------------------------------------------------------------
def _torch_run(line: str, needs: set[str]) -> dict[str, Any]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("fc1", torch.nn.Linear(8, 8))
    model.add_module("act", torch.nn.ReLU())
    model.add_module("mid", torch.nn.Linear(8, 8))
    model.add_module("fc2", torch.nn.Linear(8, 4))
    with torch.no_grad():
        model.fc1.weight[0, :3] = 0.0  # zeros a ConstantPruningModifier holds
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    manager = ScheduledModifierManager.from_yaml(_recipe(line, "torch"))
    gen = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(16, 8, generator=gen), torch.randn(16, 4, generator=gen)
    kwargs: dict[str, Any] = {}
    if "sampler" in needs:
        kwargs["grad_sampler"] = {"data_loader_builder": lambda kw: [([xs[i:i + 1]], {}, ys[i:i + 1]) for i in range(16)],
                                  "loss_function": torch.nn.functional.mse_loss}
    if "teacher" in needs:
        torch.manual_seed(5)
        kwargs["distillation_teacher"] = torch.nn.Sequential(torch.nn.Linear(8, 4))
    opt = manager.modify(model, opt, steps_per_epoch=S, **kwargs)
    for k in range(S * EPOCHS):
        x, y = xs[k % 16:k % 16 + 4], ys[k % 16:k % 16 + 4]
        opt.zero_grad()
        out = model(x)
        loss = manager.loss_update(torch.nn.functional.mse_loss(out, y), student_outputs=out, student_inputs=x)
        loss.backward()
        opt.step()
    probe = torch.linspace(-1, 1, 16).reshape(2, 8)
    with torch.no_grad():
        output = model(probe).numpy().copy()
    return {
        "weights": {n: p.detach().numpy().copy() for n, p in model.named_parameters()},
        "lr": [g["lr"] for g in opt.param_groups], "wd": [g["weight_decay"] for g in opt.param_groups],
        "trainable": {n: p.requires_grad for n, p in model.named_parameters()},
        "modules": [type(m).__name__ for m in model.modules()], "output": output,
        "max_epochs": manager.max_epochs,
    }


# -- keras ---------------------------------------------------------------------------------
def _keras_run(line: str, needs: set[str]) -> dict[str, Any]:
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((8,)), keras.layers.Dense(8, activation="relu", name="fc1"),
        keras.layers.Dense(8, name="mid"), keras.layers.Dense(4, name="fc2"),
    ], name="net")
    kernel = model.get_layer("fc1").kernel
    value = np.array(keras.ops.convert_to_numpy(kernel))
    value[:3, 0] = 0.0
    kernel.assign(value)
    opt = keras.optimizers.SGD(learning_rate=0.05, momentum=0.9, weight_decay=1e-4)
    manager = ScheduledModifierManager.from_yaml(_recipe(line, "keras"))
    rng = np.random.default_rng(1)
    xs, ys = rng.normal(size=(16, 8)).astype("float32"), rng.normal(size=(16, 4)).astype("float32")
    kwargs: dict[str, Any] = {}
    if "sampler" in needs:
        kwargs["grad_sampler"] = {"data_loader_builder": lambda kw: [([xs[i:i + 1]], {}, ys[i:i + 1]) for i in range(16)],
                                  "loss_function": keras.losses.MeanSquaredError()}
    if "teacher" in needs:
        keras.utils.set_random_seed(5)
        kwargs["distillation_teacher"] = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model, opt, callbacks = manager.modify(model, opt, steps_per_epoch=S, **kwargs)
    model.compile(optimizer=opt, loss="mse")
    order = [(k * 4) % 16 for k in range(S * EPOCHS)]
    x = np.concatenate([xs[i:i + 4] for i in order])
    y = np.concatenate([ys[i:i + 4] for i in order])
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    probe = np.linspace(-1, 1, 16, dtype="float32").reshape(2, 8)
    variables = {v.path: v for v in model.trainable_variables + model.non_trainable_variables}

    def _value(v: Any) -> Any:
        return float(keras.ops.convert_to_numpy(v)) if v is not None else None

    return {
        "weights": {n: np.array(keras.ops.convert_to_numpy(v)) for n, v in variables.items() if "fc" in n or "mid" in n},
        "lr": _value(opt.learning_rate), "wd": _value(opt.weight_decay),
        "trainable": {n: bool(v.trainable) for n, v in variables.items()},
        "modules": [type(layer).__name__ for layer in model._flatten_layers()],
        "output": np.array(keras.ops.convert_to_numpy(model(probe))),
        "max_epochs": manager.max_epochs,
    }


RUNS = {"torch": _torch_run, "keras": _keras_run}


def _needs(modifier: str) -> set[str]:
    return {"MFACPruningModifier": {"sampler"}, "OBSPruningModifier": {"sampler"},
            "DistillationModifier": {"teacher"}}.get(modifier, set())


def _differs(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    out = [k for k in ("lr", "wd", "trainable", "modules") if a[k] != b[k]]
    if set(a["weights"]) != set(b["weights"]) or any(
            a["weights"][n].shape != b["weights"][n].shape or not np.array_equal(a["weights"][n], b["weights"][n])
            for n in a["weights"]):
        out.append("weights")
    if a["output"].shape != b["output"].shape or not np.array_equal(a["output"], b["output"]):
        out.append("output")
    return out


@pytest.mark.parametrize(("backend", "modifier"), CASES, ids=[f"{b}-{m}" for b, m in CASES])
def test_listed_modifier_is_not_a_no_op(backend: str, modifier: str) -> None:
    assert modifier in RECIPES, f"no check for {modifier} on {backend}: add its recipe to RECIPES"
    if backend == "torch":
        pytest.importorskip("torch")
    else:
        pytest.importorskip("keras")
    run = RUNS[backend]
    got = run(RECIPES[modifier], _needs(modifier))
    if modifier == "EpochRangeModifier":
        assert got["max_epochs"] == 7  # all it does: the schedule's length
        return
    baseline = run(BASELINE, _needs(modifier) - {"sampler"})  # a grad sampler needs an M-FAC/OBS recipe
    assert _differs(got, baseline), f"{modifier} on {backend} left the run exactly as without it"
    if modifier == "MovementPruningModifier":
        magnitude = run(MOVEMENT_AS_MAGNITUDE, set())
        w = next(n for n in got["weights"] if "fc1" in n and got["weights"][n].ndim == 2)
        assert not np.array_equal(got["weights"][w] == 0, magnitude["weights"][w] == 0), \
            "movement masks equal magnitude masks: movement scores are not used"
