"""Every modifier of the PyTorch backend on a small network that trains: the loss goes down and
the run ends at the promised state (sparsity, LR, frozen parameters, fake-quant modules)."""

from __future__ import annotations

import math

import pytest
import torch
from torch_nets import build, eval_loss, sparsity, train

import recipe_spec
from recipe_spec import RecipeError, ScheduledModifierManager

S = 4  # steps per epoch


def run(recipe: str, epochs: int, **build_kw):
    model, optimizer, inputs, targets = build(**build_kw)
    manager = ScheduledModifierManager.from_yaml(recipe)
    optimizer = manager.modify(model, optimizer, steps_per_epoch=S)
    before = eval_loss(model, inputs, targets)
    train(model, optimizer, inputs, targets, epochs * S)
    return model, optimizer, manager, (before, eval_loss(model, inputs, targets))


def learned(losses: tuple[float, float]) -> bool:
    """The loss over the whole (fixed) data went down."""
    before, after = losses
    return after < before


GMP = """
modifiers:
  - !GMPruningModifier
    params: {params}
    init_sparsity: {init}
    final_sparsity: {final}
    start_epoch: 0
    end_epoch: 3
    update_frequency: 1
    mask_type: {mask}
    leave_enabled: {leave}
"""


@pytest.mark.parametrize("modifier", ["GMPruningModifier", "MagnitudePruningModifier"])
def test_gradual_unstructured_ends_exactly_at_target(modifier: str) -> None:
    text = GMP.format(params="__ALL_PRUNABLE__", init=0.05, final=0.8, mask="unstructured", leave="true")
    model, _, _, losses = run(text.replace("GMPruningModifier", modifier), epochs=5)
    for name in ("conv1.weight", "conv2.weight", "fc1.weight", "fc2.weight"):
        p = dict(model.named_parameters())[name]
        assert sparsity(p) == round(0.8 * p.numel()) / p.numel(), name
    assert sparsity(model.fc1.bias) == 0.0
    assert learned(losses)


def test_global_magnitude_prunes_the_total_exactly() -> None:
    text = GMP.format(params="[conv2.weight, fc1.weight, fc2.weight]", init=0.1, final=0.7, mask="unstructured", leave="true")
    text = text.replace("GMPruningModifier", "GlobalMagnitudePruningModifier").replace("    mask_type: unstructured\n", "")
    model, _, _, losses = run(text, epochs=4)
    weights = [model.conv2.weight, model.fc1.weight, model.fc2.weight]
    total = sum(w.numel() for w in weights)
    zeros = sum(int((w == 0).sum()) for w in weights)
    assert zeros == round(0.7 * total)
    assert len({round(sparsity(w), 3) for w in weights}) > 1  # one threshold, different layers
    assert learned(losses)


def test_block4_and_nm_masks() -> None:
    model, _, _, _ = run(GMP.format(params="[fc1.weight]", init=0.05, final=0.5, mask="block4", leave="true"), epochs=4)
    blocks = (model.fc1.weight == 0).reshape(32, 16, 4)
    assert bool((blocks.all(-1) | (~blocks).all(-1)).all())  # whole blocks of 4 along inputs
    assert sparsity(model.fc1.weight) == 0.5
    model, _, _, _ = run(GMP.format(params="[fc1.weight, fc2.weight]", init=0.5, final=0.5, mask="'2:4'", leave="true"), epochs=4)
    for w in (model.fc1.weight, model.fc2.weight):
        groups = (w != 0).reshape(w.shape[0], -1, 4).sum(-1)
        assert bool((groups == 2).all())


def test_final_sparsity_mapping() -> None:
    text = """
modifiers:
  - !GMPruningModifier
    params: []
    final_sparsity: {0.6: [fc1.weight], 0.8: ['re:conv\\d\\.weight']}
    init_sparsity: 0.05
    start_epoch: 0
    end_epoch: 2
    update_frequency: 1
"""
    model, _, _, _ = run(text, epochs=3)
    assert sparsity(model.fc1.weight) == round(0.6 * 2048) / 2048
    assert sparsity(model.conv2.weight) == round(0.8 * 1152) / 1152


def test_leave_enabled_false_lets_weights_regrow() -> None:
    model, _, manager, _ = run(GMP.format(params="[fc1.weight]", init=0.05, final=0.8, mask="unstructured", leave="false"), epochs=5)
    assert 0 < sparsity(model.fc1.weight) < 0.8
    assert not manager.runtime.masks.params


def test_constant_pruning_holds_existing_zeros() -> None:
    model, optimizer, inputs, targets = build()
    with torch.no_grad():
        model.conv2.weight[model.conv2.weight.abs() < 0.05] = 0
    before = sparsity(model.conv2.weight)
    manager = ScheduledModifierManager.from_yaml(
        "modifiers:\n  - !ConstantPruningModifier {params: [conv2.weight], start_epoch: 0, end_epoch: -1}\n"
    )
    optimizer = manager.modify(model, optimizer, S)
    loss_before = eval_loss(model, inputs, targets)
    train(model, optimizer, inputs, targets, 5 * S)
    assert before > 0.1 and sparsity(model.conv2.weight) == before
    assert learned((loss_before, eval_loss(model, inputs, targets)))


def test_layer_pruning_swaps_layers_for_identity_and_back() -> None:
    model, optimizer, inputs, targets = build()
    fc1 = model.fc1
    manager = ScheduledModifierManager.from_yaml(
        "modifiers:\n  - !LayerPruningModifier {layers: [bn1], start_epoch: 1, end_epoch: 3}\n"
    )
    optimizer = manager.modify(model, optimizer, S)
    loss_before = eval_loss(model, inputs, targets)
    train(model, optimizer, inputs, targets, S)
    assert isinstance(model.bn1, torch.nn.BatchNorm2d)
    train(model, optimizer, inputs, targets, S, start=S)
    assert isinstance(model.bn1, torch.nn.Identity)
    train(model, optimizer, inputs, targets, 2 * S, start=2 * S)
    assert isinstance(model.bn1, torch.nn.BatchNorm2d) and model.fc1 is fc1
    assert learned((loss_before, eval_loss(model, inputs, targets)))


def test_learning_rate_modifiers_and_weight_decay() -> None:
    text = """
modifiers:
  - !LearningRateModifier {lr_class: StepLR, lr_kwargs: {step_size: 1, gamma: 0.5}, init_lr: 0.04, start_epoch: 0, end_epoch: 3}
  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.02, final_lr: 0.0, start_epoch: 3, end_epoch: 4.5}
  - !SetWeightDecayModifier {weight_decay: 0.0, start_epoch: 2, param_groups: [1]}
"""
    model, optimizer, manager, losses = run(text, epochs=5, groups=True)
    assert [g["lr"] for g in optimizer.param_groups] == [0.0, 0.0]  # cosine reached final_lr
    assert [g["weight_decay"] for g in optimizer.param_groups] == [1e-4, 0.0]
    assert learned(losses)
    model, optimizer, manager, _ = run(
        "modifiers:\n  - !SetLearningRateModifier {learning_rate: 0.01, start_epoch: 1, param_groups: [0]}\n",
        epochs=2, groups=True,
    )
    assert [g["lr"] for g in optimizer.param_groups] == [0.01, 0.05 / 5]


def test_trainable_params_freezes_and_restores() -> None:
    model, optimizer, inputs, targets = build()
    manager = ScheduledModifierManager.from_yaml(
        "modifiers:\n  - !TrainableParamsModifier {params: ['re:conv1\\..*'], trainable: false, start_epoch: 1, end_epoch: 2}\n"
    )
    optimizer = manager.modify(model, optimizer, S)
    loss_before = eval_loss(model, inputs, targets)
    train(model, optimizer, inputs, targets, S)
    frozen = model.conv1.weight.detach().clone()
    train(model, optimizer, inputs, targets, S, start=S)
    assert not model.conv1.weight.requires_grad and torch.equal(model.conv1.weight, frozen)
    train(model, optimizer, inputs, targets, 2, start=2 * S)
    assert model.conv1.weight.requires_grad and not torch.equal(model.conv1.weight, frozen)
    assert learned((loss_before, eval_loss(model, inputs, targets)))


def test_quantization_aware_training() -> None:
    from recipe_spec_torch.quantization import FakeQuantize, qat_modules

    text = """
modifiers:
  - !QuantizationModifier
    start_epoch: 1
    disable_quantization_observer_epoch: 3
    freeze_bn_stats_epoch: 3
"""
    model, optimizer, inputs, targets = build()
    names_before = [n for n, _ in model.named_parameters()]
    manager = ScheduledModifierManager.from_yaml(text)
    optimizer = manager.modify(model, optimizer, S)
    loss_before = eval_loss(model, inputs, targets)
    train(model, optimizer, inputs, targets, S)
    assert not qat_modules(model)
    train(model, optimizer, inputs, targets, 4 * S, start=S)
    losses = (loss_before, eval_loss(model, inputs, targets))
    fqs = qat_modules(model)
    assert len(fqs) == 8  # inputs and weights of conv1, conv2, fc1, fc2
    assert [n for n, _ in model.named_parameters()] == names_before  # names kept: masks, optimizer state
    assert all(not bool(fq.observer_enabled) for fq in fqs)
    assert model.bn1.momentum == 0.0
    w = model.fc1.weight_fake_quant
    assert isinstance(w, FakeQuantize) and w.symmetric and int(w.zero_point) == 0
    assert not model.fc1.input_fake_quant.symmetric
    q = w(model.fc1.weight.detach())
    assert len(torch.unique(q)) <= 256  # 8-bit
    assert learned(losses)
    assert [m.type for m in manager.quantization_modifiers] == ["QuantizationModifier"]


def test_unmatched_pattern_fails_at_modify_with_its_line() -> None:
    model, optimizer, _, _ = build()
    manager = ScheduledModifierManager.from_yaml(GMP.format(params="[fc3.weight]", init=0.05, final=0.8, mask="unstructured", leave="true"))
    with pytest.raises(RecipeError) as info:
        manager.modify(model, optimizer, S)
    (d,) = info.value.diagnostics
    assert d.code == "P001" and d.line == 4 and "fc1.weight" in d.hint


def test_nan_weights_at_a_mask_update_raise_naming_param_and_step() -> None:
    from recipe_spec_torch.pruning import NonFiniteWeightsError

    model, optimizer, inputs, targets = build()
    manager = ScheduledModifierManager.from_yaml(GMP.format(params="[fc1.weight]", init=0.05, final=0.8, mask="unstructured", leave="true"))
    optimizer = manager.modify(model, optimizer, S)
    train(model, optimizer, inputs, targets, 2)
    with torch.no_grad():
        model.fc1.weight[0, 0] = math.nan
    with pytest.raises(NonFiniteWeightsError, match=r"'fc1\.weight'.*step 4"):
        train(model, optimizer, inputs, targets, 3, start=2)


def test_native_compile_api_and_str() -> None:
    recipe = recipe_spec.loads(GMP.format(params="[fc1.weight]", init=0.05, final=0.8, mask="unstructured", leave="true"))
    model, optimizer, inputs, targets = build()
    runtime = recipe.compile("torch")
    optimizer = runtime.modify(model, optimizer, S)
    train(model, optimizer, inputs, targets, 4 * S)
    assert sparsity(model.fc1.weight) == round(0.8 * 2048) / 2048
    manager = ScheduledModifierManager.from_yaml(recipe)
    assert manager.max_epochs == 3 and manager.min_epochs == 0
    assert str(manager).startswith("version: 1.1.0")


def test_epoch_range_only_sets_the_run_length() -> None:
    model, optimizer, manager, losses = run(
        "modifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 7}\n", epochs=2
    )
    assert manager.max_epochs == 7 and manager.min_epochs == 0
    assert [g["lr"] for g in optimizer.param_groups] == [0.05]
    assert learned(losses)
