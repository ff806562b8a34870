"""A stage/group recipe's training stage runs on PyTorch and on Keras as its ``!Modifier`` twins
(recipe_spec/stage_dialect/to_modifiers.py): step for step the same masks, applied sparsity,
weights and learning rate as the hand-written ``!Modifier`` recipe, from the same weights.
One-shot modifiers and arguments without an exact twin stay refused, and ``validate --backend``
refuses exactly what ``modify()`` does."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from recipe_spec import RecipeError, ScheduledModifierManager  # noqa: E402
from recipe_spec.validation import validate  # noqa: E402

torch = pytest.importorskip("torch")
#: QAT starts at epoch 3 on purpose; the runtime's warning about mixed precision is expected
pytestmark = pytest.mark.filterwarnings("ignore:recipe-spec. quantization-aware training:RuntimeWarning")

CORE = r"""
train_stage:
  run_type: train
  pruning_modifiers:
    ConstantPruningModifier:
      targets: ['re:conv1\.weight$']
      start: 0
      end: 3
    MagnitudePruningModifier:
      targets: ['re:fc1\.weight$', 're:conv2\.weight$']
      init_sparsity: 0.05
      final_sparsity: 0.8
      start: 0.5
      end: 2.5
      update: 0.5
  quant_modifiers:
    LegacyQuantizationModifier:
      start: 3
"""

TWINS = r"""
modifiers:
  - !ConstantPruningModifier {params: ['re:conv1\.weight$'], start_epoch: 0, end_epoch: 3}
  - !MagnitudePruningModifier {params: ['re:fc1\.weight$', 're:conv2\.weight$'],
                               init_sparsity: 0.05, final_sparsity: 0.8, start_epoch: 0.5,
                               end_epoch: 2.5, update_frequency: 0.5, leave_enabled: true}
  - !QuantizationModifier {start_epoch: 3}
"""

S, STEPS = 4, 14


def _torch_run(text: str) -> list[dict]:
    from torch_nets import build

    model, optimizer, inputs, targets = build(seed=0)
    with torch.no_grad():
        model.conv1.weight[model.conv1.weight.abs() < 0.1] = 0.0  # what constant pruning holds
    manager = ScheduledModifierManager.from_yaml(text)
    optimizer = manager.modify(model, optimizer, steps_per_epoch=S)
    rows = []
    for k in range(STEPS):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs[k % 8]), targets[k % 8]).backward()
        optimizer.step()
        rows.append({
            "lr": optimizer.param_groups[0]["lr"],
            "masks": {n: (e.mask.numpy().copy(), e.applied_sparsity)
                      for n, e in manager.runtime.masks.params.items()},
            "weights": {n: p.detach().numpy().copy() for n, p in model.named_parameters()},
            "qat": manager.autocast_enabled(),
        })
    manager.finalize(model)
    return rows


def _same(core: list[dict], twins: list[dict]) -> None:
    assert len(core) == len(twins) == STEPS
    for k, (a, b) in enumerate(zip(core, twins, strict=True)):
        assert a["lr"] == b["lr"] and a["qat"] == b["qat"], k
        assert set(a["masks"]) == set(b["masks"]), k
        for name, (mask, applied) in a["masks"].items():
            assert applied == b["masks"][name][1], (k, name)
            assert np.array_equal(mask, b["masks"][name][0]), (k, name)
        for name, w in a["weights"].items():
            assert np.array_equal(w, b["weights"][name]), (k, name)


def _pruned(rows: list[dict]) -> None:
    """The recipe did something: masks held and updated, and QAT switched on at epoch 3."""
    applied = {k: {n: s for n, (_, s) in r["masks"].items()} for k, r in enumerate(rows)}
    assert len({tuple(sorted(a.items())) for a in applied.values()}) >= 4
    assert any(s is not None and s > 0.5 for a in applied.values() for s in a.values())
    assert [r["qat"] for r in rows].index(False) == 3 * S - 1  # recorded after the step: the next one's


def test_torch_core_training_stage_matches_its_modifier_twins() -> None:
    core, twins = _torch_run(CORE), _torch_run(TWINS)
    _same(core, twins)
    _pruned(core)


def test_keras_core_training_stage_matches_its_modifier_twins() -> None:
    keras = pytest.importorskip("keras")
    from keras_nets import copy_weights, keras_twin
    from torch_nets import build

    def run(text: str) -> list[dict]:
        net, _, _, _ = build(seed=0)
        net.fc2 = torch.nn.Linear(32, 10)
        with torch.no_grad():
            net.conv1.weight[net.conv1.weight.abs() < 0.1] = 0.0
        model = keras_twin()
        copy_weights(net, model)
        manager = ScheduledModifierManager.from_yaml(text)
        model, optimizer, callbacks = manager.modify(
            model, keras.optimizers.SGD(learning_rate=0.05), steps_per_epoch=S)
        rows: list[dict] = []

        class Record(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                rows.append({
                    "lr": float(keras.ops.convert_to_numpy(optimizer.learning_rate)),
                    "masks": {n: (np.array(e.mask, copy=True), e.applied_sparsity)
                              for n, e in manager.runtime.masks.params.items()},
                    "weights": {v.path: keras.ops.convert_to_numpy(v).copy()
                                for v in model.trainable_variables},
                    "qat": manager.autocast_enabled(),
                })

        x = np.random.default_rng(0).normal(size=(STEPS * 4, 12, 12, 3)).astype("float32")
        y = np.random.default_rng(1).normal(size=(STEPS * 4, 10)).astype("float32")
        model.compile(optimizer=optimizer, loss="mse")
        model.fit(x, y, batch_size=4, epochs=1, steps_per_epoch=STEPS, shuffle=False, verbose=0,
                  callbacks=[*callbacks, Record()])
        return rows

    core, twins = run(CORE), run(TWINS)
    _same(core, twins)
    _pruned(core)


# -- what stays refused, and validate --backend agrees with modify() ---------------------------

STAGE = "train_stage:\n  pruning_modifiers:\n"
ONE_SHOT = "oneshot_stage:\n  quant_modifiers:\n    AutoRoundModifier: {scheme: W4A16, iters: 10}\n"
GLOBAL = STAGE + ("    MagnitudePruningModifier:\n      targets: ['re:fc1.weight']\n"
                  "      init_sparsity: 0.05\n      final_sparsity: 0.5\n      start: 0\n"
                  "      end: 2\n      update: 1\n      apply_globally: true\n")
NO_START = STAGE + "    ConstantPruningModifier: {targets: ['re:fc1.weight']}\n"
TWO_STAGES = (STAGE + "    ConstantPruningModifier: {targets: ['re:fc1.weight'], start: 0}\n"
              "second_stage:\n  pruning_modifiers:\n"
              "    ConstantPruningModifier: {targets: ['re:fc2.weight'], start: 0}\n")
LAYER_TARGETS = STAGE + "    ConstantPruningModifier: {targets: ['re:fc1'], start: 0}\n"
RUNS = STAGE + "    ConstantPruningModifier: {targets: ['re:fc1.weight'], start: 0, end: 1}\n"
# SparseML skips a disabled stage (llm-compressor 0.7+ ignores `enabled`), and runs a stage
# one-shot by its run_type, or by its name when it has none (RecipeStage.infer_run_type)
DISABLED = ("train_stage:\n  enabled: false\n  pruning_modifiers:\n"
            "    ConstantPruningModifier: {targets: ['re:fc1.weight'], start: 0}\n")
RUN_ONESHOT = ("train_stage:\n  run_type: oneshot\n  pruning_modifiers:\n"
               "    ConstantPruningModifier: {targets: ['re:fc1.weight'], start: 0}\n")
NAMED_ONESHOT = ("oneshot_stage:\n  pruning_modifiers:\n"
                 "    ConstantPruningModifier: {targets: ['re:fc1.weight'], start: 0}\n")

REFUSED = {
    "apply_globally": (GLOBAL, [(3, 5)], "apply_globally"),
    "no_start": (NO_START, [(3, 5)], "no start"),
    "two_training_stages": (TWO_STAGES, [(6, 5)], "second training stage"),
    "layer_targets": (LAYER_TARGETS, [(3, 5)], "targets ['re:fc1']"),
    "disabled_stage": (DISABLED, [(4, 5)], "enabled: false"),
    "oneshot_run_type": (RUN_ONESHOT, [(4, 5)], "run_type: oneshot"),
    "oneshot_stage_name": (NAMED_ONESHOT, [(3, 5)], "name containing 'oneshot'"),
}


def _modify_torch(text: str) -> None:
    model = torch.nn.Sequential()
    model.add_module("fc1", torch.nn.Linear(4, 4))
    model.add_module("fc2", torch.nn.Linear(4, 2))
    ScheduledModifierManager.from_yaml(text).modify(
        model, torch.optim.SGD(model.parameters(), lr=0.1), steps_per_epoch=2)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_at_modify_as_validate_says(name: str) -> None:
    text, where, words = REFUSED[name]
    with pytest.raises(RecipeError) as caught:
        _modify_torch(text)
    found = list(caught.value.diagnostics)
    assert [(d.code, d.line, d.column) for d in found] == [("B001", *w) for w in where]
    assert words in found[0].message
    validated = [d for d in validate(text, backend="torch") if d.code == "B001"]
    assert [(d.line, d.column, d.message) for d in validated] == [
        (d.line, d.column, d.message) for d in found]


@pytest.mark.parametrize(("text", "line"), [(ONE_SHOT, 3), (RUNS + ONE_SHOT, 6)])
def test_a_one_shot_modifier_is_refused_at_modify_and_left_to_oneshot(text: str, line: int) -> None:
    """A training run (``modify()``) never runs a one-shot modifier: refused there, located, the
    hint naming recipe_spec.oneshot; ``validate --backend torch`` judges a one-shot modifier for
    recipe_spec.oneshot, which runs it on torch, so it says nothing."""
    with pytest.raises(RecipeError) as caught:
        _modify_torch(text)
    found = caught.value.diagnostics
    assert [(d.code, d.line, d.column) for d in found] == [("B001", line, 5)]
    assert "training run" in found[0].message and "recipe_spec.oneshot" in found[0].hint
    assert [d for d in validate(text, backend="torch") if d.code == "B001"] == []


def test_keras_refuses_a_one_shot_modifier_at_modify() -> None:
    keras = pytest.importorskip("keras")
    from keras_nets import keras_twin

    with pytest.raises(RecipeError) as caught:
        ScheduledModifierManager.from_yaml(RUNS + ONE_SHOT).modify(
            keras_twin(), keras.optimizers.SGD(learning_rate=0.1), steps_per_epoch=2)
    found = caught.value.diagnostics
    assert [(d.code, d.line) for d in found] == [("B001", 6)]
    assert "llm-compressor" in found[0].message and "keras backend" in found[0].message


def test_a_runnable_stage_has_no_b001_on_either_backend() -> None:
    for backend in ("torch", "keras"):
        assert [d for d in validate(RUNS, backend=backend) if d.code == "B001"] == []
    _modify_torch(RUNS)
    manager = ScheduledModifierManager.from_yaml(CORE)
    assert (manager.min_epochs, manager.max_epochs) == (0, 3)


def test_twin_errors_point_at_the_core_recipe() -> None:
    """A target that matches no parameter is reported at the core ``targets`` value."""
    text = STAGE + "    ConstantPruningModifier:\n      targets: ['re:nothing.weight']\n      start: 0\n"
    with pytest.raises(RecipeError) as caught:
        _modify_torch(text)
    first = caught.value.diagnostics[0]
    assert (first.code, first.line) == ("P001", 4)
