"""Step-for-step parity of the Keras 3 backend with the PyTorch backend: the same recipes on a
PyTorch net and its Keras twin with identical weights give the same per-step LR, target
sparsity and masks (and weight decay, trainable flags, held masks and QAT start)."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from keras_nets import copy_weights, keras_twin, to_torch_layout  # noqa: E402
from torch_nets import build  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402


def fit_steps(model: keras.Model, callbacks: list, steps: int, S: int, zero_loss: bool = False) -> list[float]:
    """Train ``steps`` batches with model.fit (one batch per step); the LR each step used."""
    x = np.random.default_rng(0).normal(size=(steps * 4, 12, 12, 3)).astype("float32")
    y = np.random.default_rng(1).normal(size=(steps * 4, model.output_shape[-1])).astype("float32")
    lrs: list[float] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    loss = (lambda t, p: 0.0 * keras.ops.mean(p)) if zero_loss else "mse"
    model.compile(optimizer=model.optimizer_for_recipe, loss=loss)
    model.fit(x, y, batch_size=4, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0,
              callbacks=[*callbacks, Record()])
    return lrs


PARITY = {
    "gmp_cubic_fractional": """
modifiers:
  - !GMPruningModifier {params: [conv2.weight, fc1.weight], init_sparsity: 0.05, final_sparsity: 0.85,
                        start_epoch: 0.5, end_epoch: 3.5, update_frequency: 0.5}
  - !LearningRateModifier {lr_class: StepLR, lr_kwargs: {step_size: 1, gamma: 0.5}, init_lr: 0.05, start_epoch: 0, end_epoch: 3}
""",
    "global_magnitude": """
modifiers:
  - !GlobalMagnitudePruningModifier {params: __ALL_PRUNABLE__, init_sparsity: 0.1, final_sparsity: 0.7,
                                     start_epoch: 0, end_epoch: 3, update_frequency: 1}
  - !LearningRateModifier {lr_class: MultiStepLR, lr_kwargs: {milestones: [1, 2.5], gamma: 0.1}, init_lr: 0.05, start_epoch: 0, end_epoch: 4}
""",
    "acdc_global": """
modifiers:
  - !ACDCPruningModifier {compression_sparsity: 0.7, start_epoch: 0, end_epoch: 4, update_frequency: 1,
                          params: __ALL_PRUNABLE__}
  - !LearningRateFunctionModifier {lr_func: linear, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 4}
""",
    "block4_cosine": """
modifiers:
  - !GMPruningModifier {params: [fc1.weight, conv2.weight], init_sparsity: 0.05, final_sparsity: 0.5,
                        start_epoch: 0, end_epoch: 2, update_frequency: 1, mask_type: block4}
  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 4}
""",
}


@pytest.mark.parametrize("name", sorted(PARITY))
def test_parity_with_pytorch_on_identical_weights(name: str) -> None:
    """Zero loss keeps the weights identical in both frameworks, so every mask update ranks the
    same values: LR per step, target sparsity and masks must agree exactly."""
    S, steps = 4, 16
    tmodel, topt, _, _ = build(lr=0.1)
    tmodel.fc2 = torch.nn.Linear(32, 10)
    model = keras_twin()
    copy_weights(tmodel, model, same_function=False)
    text = PARITY[name]
    tman = ScheduledModifierManager.from_yaml(text)
    topt = tman.modify(tmodel, torch.optim.SGD(tmodel.parameters(), lr=0.1), S)
    kman = ScheduledModifierManager.from_yaml(text)
    model, kopt, callbacks = kman.modify(model, keras.optimizers.SGD(learning_rate=0.1), S)
    model.optimizer_for_recipe = kopt
    torch_lrs, torch_masks = [], []
    for _ in range(steps):
        topt.zero_grad()
        (tmodel(torch.randn(4, 3, 12, 12)).sum() * 0.0).backward()
        topt.step()
        torch_lrs.append(topt.param_groups[0]["lr"])
        torch_masks.append({n: (e.mask.numpy().copy(), e.applied_sparsity) for n, e in tman.runtime.masks.params.items()})
    keras_masks: list[dict[str, tuple[np.ndarray, float | None]]] = []

    class Masks(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            keras_masks.append({
                n.replace("/kernel", ".weight"): (to_torch_layout(e.mask.copy()), e.applied_sparsity)
                for n, e in kman.runtime.masks.params.items()
            })

    keras_lrs = fit_steps(model, [*callbacks, Masks()], steps, S, zero_loss=True)
    assert keras_lrs == pytest.approx(torch_lrs, rel=1e-6)
    updates = 0
    for k in range(steps):
        assert set(keras_masks[k]) == set(torch_masks[k]), k
        for pname, (kmask, ktarget) in keras_masks[k].items():
            tmask, ttarget = torch_masks[k][pname]
            assert ktarget == ttarget, (name, k, pname)  # the target sparsity in force
            assert np.array_equal(kmask, tmask), (name, k, pname)
            updates += k == 0 or torch_masks[k - 1].get(pname, (None, None))[1] != ttarget
    assert updates >= 4 and torch_lrs[0] != torch_lrs[-1]  # the recipes do prune and change the LR


PARITY_STATE = """
modifiers:
  - !ConstantPruningModifier {params: [fc1.weight], start_epoch: 0, end_epoch: 2}
  - !SetWeightDecayModifier {weight_decay: 0.001, start_epoch: 1}
  - !TrainableParamsModifier {params: [conv1.weight], trainable: false, start_epoch: 1, end_epoch: 3}
  - !QuantizationModifier {start_epoch: 2}
"""


def test_parity_of_constant_pruning_weight_decay_trainable_and_qat_start() -> None:
    """The same recipe on both frameworks, step by step: the held masks (from the same zeros),
    the weight decay in force, the frozen flag and the step QAT starts at all agree."""
    from recipe_spec_keras.quantization import qat_layers
    from recipe_spec_torch.quantization import qat_modules

    S, steps = 4, 14
    tmodel, _, _, _ = build(lr=0.1)
    tmodel.fc2 = torch.nn.Linear(32, 10)
    with torch.no_grad():
        tmodel.fc1.weight[tmodel.fc1.weight.abs() < 0.05] = 0.0
    model = keras_twin()
    copy_weights(tmodel, model, same_function=False)
    tman = ScheduledModifierManager.from_yaml(PARITY_STATE)
    topt = tman.modify(tmodel, torch.optim.SGD(tmodel.parameters(), lr=0.1, weight_decay=0.0), S)
    kman = ScheduledModifierManager.from_yaml(PARITY_STATE)
    model, kopt, callbacks = kman.modify(model, keras.optimizers.SGD(learning_rate=0.1, weight_decay=0.0), S)
    model.optimizer_for_recipe = kopt
    torch_rows = []
    for _ in range(steps):
        topt.zero_grad()
        (tmodel(torch.randn(4, 3, 12, 12)).sum() * 0.0).backward()
        topt.step()
        held = tman.runtime.masks.params.get("fc1.weight")
        torch_rows.append((
            None if held is None else held.mask.numpy().T.copy(),
            topt.param_groups[0]["weight_decay"],
            tmodel.conv1.weight.requires_grad,
            len(qat_modules(tmodel)) > 0,
        ))
    keras_rows = []

    class Rows(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            held = kman.runtime.masks.params.get("fc1/kernel")
            assert self.model.optimizer is kopt  # on JAX, Callback.model syncs the trainer's state
            keras_rows.append((
                None if held is None else held.mask.copy(),
                float(keras.ops.convert_to_numpy(kopt.weight_decay)),
                bool(model.get_layer("conv1").kernel.trainable),
                len(qat_layers(model)) > 0,
            ))

    fit_steps(model, [*callbacks, Rows()], steps, S, zero_loss=True)
    for k, (trow, krow) in enumerate(zip(torch_rows, keras_rows, strict=True)):
        tmask, kmask = trow[0], krow[0]
        assert (tmask is None) == (kmask is None), k
        if tmask is not None:
            assert np.array_equal(tmask, kmask) and not tmask.all(), k
        assert krow[1] == pytest.approx(trow[1], rel=1e-6), k
        assert trow[2:] == krow[2:], k
    assert [r[3] for r in torch_rows].index(True) == 2 * S  # QAT starts at epoch 2 in both
    assert [r[2] for r in torch_rows][S:3 * S] == [False] * (2 * S)
