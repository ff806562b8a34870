"""The Keras 3 backend against SparseML 1.8's own runs (tests/data/conformance/sparseml/).

Every case runs on a Keras twin of its model: the case's own ``model_description`` builds the
PyTorch net (``torch.manual_seed(0)``), its data and its case setup (the pre-zeroed weights of
the constant-pruning case), and the weights are copied across, with ``fc1``'s inputs permuted
so that the twin computes the same function (PyTorch flattens channels first, Keras last).
The recipe runs through ``ScheduledModifierManager.from_yaml(...).modify(...)`` and
``model.fit`` (step k uses batch k % 8, as SparseML's loop did), and every recorded step is
compared:

- LR and weight decay: exactly the recorded value as float32 (Keras keeps both in float32
  variables);
- trainable flags (``requires_grad``) and whether each parameter changed in the step;
- the target sparsity of every held mask (``applied_sparsity``), and the sparsity of every
  layer-wise masked kernel, exactly;
- the step QAT starts at, and the errors SparseML raised (at ``modify()`` here).

Where SPEC deliberately differs, or a value depends on the numerics of training (which Keras
does not reproduce bit for bit), the test says so where it compares; the same rules as the
PyTorch backend's conformance test.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from conformance_cases import CASES, DRIFT, assert_refused, build_case, refused_at_modify  # noqa: E402
from keras_nets import PRUNABLE, copy_weights, keras_twin  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402
from recipe_spec.params import portable_alias  # noqa: E402
from recipe_spec.schedule import compile_plan  # noqa: E402

COUNTS = {"cases": 0, "values": 0}


def _build(case: dict, tmp_path: Path):
    """The case's own PyTorch model (after its setup code), its data (channels last), and the
    recipe source."""
    net, _, inputs, targets, _, source = build_case(case, tmp_path)
    return net, inputs.numpy().transpose(0, 1, 3, 4, 2), targets.numpy(), source


def _np(x) -> np.ndarray:
    return np.array(keras.ops.convert_to_numpy(x))


def _value(x) -> tuple[float, bool]:
    """The value in force, and whether it is a (float32) variable the recipe assigns."""
    return float(keras.ops.convert_to_numpy(x)), isinstance(x, keras.Variable)


class TorchSGD(keras.optimizers.SGD):
    """Keras' SGD with torch's coupled weight decay (L2 added to the gradient, so it enters the
    momentum): SparseML's optimizer, for the case whose released weights regrow from their
    momentum. Keras' own weight decay is decoupled (docs/keras.md): a weight pruned while
    its input is dead then keeps a zero momentum and stays 0 after the release."""

    def _apply_weight_decay(self, variables):
        pass

    def update_step(self, gradient, variable, learning_rate):
        if self.weight_decay is not None:
            gradient = gradient + keras.ops.cast(self.weight_decay, variable.dtype) * variable
        return super().update_step(gradient, variable, learning_rate)


#: weights released by leave_enabled: false regrow from their optimizer state
RELEASE_CASES = {"08_gmp_all_prunable_leave_enabled_false"}


class Recorder(keras.callbacks.Callback):
    """After each step (the recipe callback runs first): what the conformance data records."""

    def __init__(self, manager, optimizer):
        super().__init__()
        self.manager, self.optimizer = manager, optimizer
        self.rows: list[dict] = []
        self.before: dict[str, np.ndarray] = {}

    def _variables(self) -> dict[str, keras.Variable]:
        return {portable_alias(v.path.removeprefix(f"{self.model.name}/")): v for v in self.model.trainable_variables + self.model.non_trainable_variables}

    def on_train_batch_begin(self, batch, logs=None):
        self.before = {n: _np(v) for n, v in self._variables().items()}

    def on_train_batch_end(self, batch, logs=None):
        from recipe_spec_keras.quantization import qat_layers

        variables = self._variables()
        runtime = self.manager.runtime
        self.rows.append({
            "lr": _value(self.optimizer.learning_rate),
            "weight_decay": _value(self.optimizer.weight_decay),
            "sparsity": {t: float((_np(self.model.get_layer(t.split(".")[0]).kernel) == 0).mean()) for t in PRUNABLE},
            "trainable": {n: bool(v.trainable) for n, v in variables.items()},
            "changed": {n: not np.array_equal(self.before[n], _np(v)) for n, v in variables.items()},
            "applied": {n.replace("/kernel", ".weight"): e.applied_sparsity for n, e in runtime.masks.params.items()},
            "held": {n.replace("/kernel", ".weight") for n in runtime.masks.params},
            "qat_layers": len(qat_layers(self.model)),
        })


def _as_kept(want: float, got: tuple[float, bool]) -> tuple[float, bool]:
    """The recorded value as Keras keeps it: float32 in a variable, else the float itself."""
    return (float(np.float32(want)) if got[1] else want), got[1]


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_case(path: Path, tmp_path: Path) -> None:
    keras.utils.set_random_seed(0)
    case = json.loads(path.read_text())
    S, E = case["steps_per_epoch"], case["epochs"]
    net, inputs, targets, source = _build(case, tmp_path)
    model = keras_twin()
    copy_weights(net, model)
    x = np.random.default_rng(0).normal(size=(4, 12, 12, 3)).astype("float32")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)), net.eval()(torch.from_numpy(x.transpose(0, 3, 1, 2))).detach().numpy(), atol=1e-5)
    sgd = TorchSGD if path.stem in RELEASE_CASES else keras.optimizers.SGD
    optimizer = sgd(learning_rate=0.1, momentum=0.9, weight_decay=1e-4)
    if refused_at_modify(case):
        assert_refused(source, model, optimizer, S)
        COUNTS["cases"] += 1
        return
    manager = ScheduledModifierManager.from_yaml(source)
    assert manager.max_epochs == case["max_epochs"] and manager.min_epochs == case["min_epochs"]
    model, optimizer, callbacks = manager.modify(model, optimizer, steps_per_epoch=S)
    model.compile(optimizer=optimizer, loss="mse")
    recorder = Recorder(manager, optimizer)
    order = [k % 8 for k in range(S * E)]
    model.fit(inputs[order].reshape(-1, 12, 12, 3), targets[order].reshape(-1, 10), batch_size=4, epochs=1,
              shuffle=False, verbose=0, callbacks=[*callbacks, recorder])
    rows = recorder.rows
    assert len(rows) == S * E

    plan = compile_plan(manager.recipe, S)  # the test's own copy of the schedule (drift cases)
    numel = {t: int(np.prod(model.get_layer(t.split(".")[0]).kernel.shape)) for t in PRUNABLE}
    targets_by_step: dict[str, float] = {}
    released_at: dict[str, int] = {}
    initial = case["initial_state"]["sparsity"]
    for k, got in enumerate(rows):
        for event in plan.events_at(k):
            names = [n.replace("/kernel", ".weight") for n in manager.runtime.names_for(event.modifier, event.params)]
            if event.target == "sparsity":
                targets_by_step.update(dict.fromkeys(names, event.value))
            if event.target == "masks" and event.value == "release":
                released_at.update(dict.fromkeys(names, k))
        if k >= len(case["steps"]):
            continue  # SparseML stopped here (its QAT crashed); ours runs on, checked below
        want = case["steps"][k]
        assert got["lr"] == _as_kept(want["lr"][0], got["lr"]), f"lr at k={k}"
        assert got["weight_decay"] == _as_kept(want["weight_decay"][0], got["weight_decay"]), f"weight decay at k={k}"
        COUNTS["values"] += 2
        if "requires_grad" in want:
            assert {n: got["trainable"][n] for n in want["requires_grad"]} == want["requires_grad"], f"trainable at k={k}"
            assert {n: got["changed"][n] for n in want["param_changed"]} == want["param_changed"], f"changed at k={k}"
            COUNTS["values"] += 2 * len(want["requires_grad"])
        if "qat_modules" in want:
            assert (got["qat_layers"] > 0) == (want["qat_modules"] > 0), f"QAT state at k={k}"
            COUNTS["values"] += 1
        for name, value in (want.get("applied_sparsity") or {}).items():
            if name in got["held"] and path.stem not in DRIFT:
                assert got["applied"][name] == value, f"{name} target at k={k}"
                COUNTS["values"] += 1
        for name, value in want["sparsity"].items():
            if name in released_at and k >= released_at[name] and path.stem in RELEASE_CASES:
                # from the release step on: pruned to the final target after the step's gradient
                # (taken with the previous mask, as SparseML's gradient hook), zeroed before the
                # update, then free: which weights stay exactly 0 depends on every optimizer
                # state of the pruned weights, so it matches SparseML's count exactly
                assert got["sparsity"][name] == value, f"{name} zeros after the release (k={k})"
                assert value < targets_by_step[name], f"{name} regrows after release (k={k})"
            elif path.stem in DRIFT and name in targets_by_step:
                expected = round(numel[name] * targets_by_step[name]) / numel[name]
                assert got["sparsity"][name] == expected, f"{name} at k={k} (SPEC fixed grid)"
            elif name in got["held"] or value == 0.0:
                assert got["sparsity"][name] == value, f"{name} sparsity at k={k}"
            else:
                assert got["sparsity"][name] <= initial[name], f"unheld zeros of {name} only regrow (k={k})"
            COUNTS["values"] += 1
    if "quantization" in case["name"]:
        # SparseML 1.8 crashed at its QAT start on torch 2.13; here QAT starts at epoch 2
        starts = [r["qat_layers"] > 0 for r in rows]
        assert starts.index(True) == 2 * S and all(starts[2 * S:])
        assert rows[-1]["qat_layers"] == 4
    held_at_end = rows[-1]["held"]
    manager.finalize(model)
    for name, value in case["final_sparsity"].items():
        if (name in held_at_end or path.stem in RELEASE_CASES) and path.stem not in DRIFT:
            assert float((_np(model.get_layer(name.split(".")[0]).kernel) == 0).mean()) == value, f"final {name}"
            COUNTS["values"] += 1
    assert not manager.runtime.masks.params, "finalize() releases every mask"
    COUNTS["cases"] += 1


def test_zz_report_counts() -> None:
    print(f"\nkeras conformance: {COUNTS['cases']} cases, {COUNTS['values']} values compared")
    assert COUNTS["cases"] == len(CASES) == 21 and COUNTS["values"] > 1000
