"""The training path of the fuzz (:mod:`fuzz_training`): what a long ``--train`` run of
``benchmarks/fuzz_recipes.py`` found, each class refused at ``modify()`` with a located error or
now run correctly, and a few hundred inputs through from_yaml / modify / steps / finalize.
"""

from __future__ import annotations

import random

import pytest
import torch
from fuzz_inputs import FuzzFailure, corpus_texts
from fuzz_training import TinyNet, make_training_input, train_once
from torch import nn

from recipe_spec import RecipeError, ScheduledModifierManager

TEXTS = corpus_texts()


def _modify(text: str) -> tuple[ScheduledModifierManager, TinyNet, torch.optim.Optimizer]:
    model = TinyNet()
    manager = ScheduledModifierManager.from_yaml(text)
    optimizer = manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.01), steps_per_epoch=2)
    return manager, model, optimizer


@pytest.mark.parametrize(("layers", "why"), [
    ("[bn1, conv1]", "Conv2d from 3 to 8 channels"),
    ("conv1", "Conv2d from 3 to 8 channels"),
    ("[fc2]", "Linear from 16 to 4 features"),
])
def test_a_removed_layer_that_changes_the_shape_is_refused_at_modify(layers: str, why: str) -> None:
    """Found: LayerPruningModifier replaced conv1 (3 -> 8 channels) by Identity at its start
    step, and the next layer failed in the forward pass, mid-training (a RuntimeError)."""
    text = f"modifiers:\n  - !LayerPruningModifier\n    layers: {layers}\n    start_epoch: 1\n"
    with pytest.raises(RecipeError) as info:
        _modify(text)
    (d,) = info.value.diagnostics
    assert d.code == "P010" and d.line == 3 and why in d.message, d.format()


def test_a_removed_layer_of_the_same_shape_runs() -> None:
    text = "modifiers:\n  - !LayerPruningModifier\n    layers: [bn1, fc1]\n    start_epoch: 1\n    end_epoch: 2\n"
    assert train_once(text) == "train-ok"


@pytest.mark.parametrize("token", ["__ALL_PRUNABLE__", "__ALL__"])
def test_a_selector_token_as_a_layer_name_is_refused_at_modify(token: str) -> None:
    """Found: lint skipped the tokens in layer arguments, so modify() passed them and the
    backend failed at the start step (ValueError: layer(s) ['__ALL_PRUNABLE__'] not in the model)."""
    text = f"modifiers:\n  - !LayerPruningModifier\n    layers: [fc1, {token}]\n    start_epoch: 0\n"
    with pytest.raises(RecipeError) as info:
        _modify(text)
    (d,) = info.value.diagnostics
    assert d.code == "P006" and d.line == 3 and "selector token" in d.message, d.format()


def test_second_order_pruning_prunes_the_groups_of_a_sparsity_mapping() -> None:
    """Found: M-FAC and OBS took their parameters from ``params`` only, so with ``params: []``
    and a ``final_sparsity`` mapping they had none (torch.cat of an empty list mid-training)."""
    text = ("modifiers:\n  - !MFACPruningModifier\n    params: []\n    init_sparsity: 0.1\n"
            "    final_sparsity: {0.5: [fc1.weight, re:.*query.weight]}\n    start_epoch: 0\n"
            "    end_epoch: 2\n    update_frequency: 1\n    num_grads: 8\n    fisher_block_size: 16\n")
    model = TinyNet()
    manager = ScheduledModifierManager.from_yaml(text)
    sampler = {"data_loader_builder": lambda kw: [((torch.randn(4, 3, 6, 6),), {}, torch.randn(4, 4))] * 8,
               "loss_function": torch.nn.functional.mse_loss}
    optimizer = manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.01), steps_per_epoch=2,
                               grad_sampler=sampler)
    for _ in range(5):
        optimizer.zero_grad()
        model(torch.randn(4, 3, 6, 6)).sum().backward()
        optimizer.step()
    manager.finalize(model)
    for w in (model.fc1.weight, model.encoder.layer[0].attention.self.query.weight):
        assert abs(float((w == 0).float().mean()) - 0.5) < 0.05
    assert float((model.fc2.weight == 0).float().mean()) == 0.0


def test_a_raw_error_mid_training_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: object, model: object = None) -> None:
        raise IndexError("boom")

    from recipe_spec_torch.manager import TorchManager

    monkeypatch.setattr(TorchManager, "finalize", boom)
    text = "modifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 2}\n"
    with pytest.raises(FuzzFailure, match="raw error mid-training at finalize: IndexError"):
        train_once(text)


def test_refusals_are_located() -> None:
    assert train_once("modifiers:\n  - !GMPruningModifier {params: nope}\n") == "train-refused-at-from_yaml"
    text = ("modifiers:\n  - !GMPruningModifier {params: [fc9.weight], init_sparsity: 0.1, "
            "final_sparsity: 0.5, start_epoch: 0, end_epoch: 2, update_frequency: 1}\n")
    assert train_once(text) == "train-refused-at-modify"


def test_hostile_recipes_train_or_are_refused_located() -> None:
    """Two hundred inputs of the ``--train`` campaign (seconds): every one trains and
    finalizes or is refused with located errors, and some of them reach training."""
    outcomes: dict[str, int] = {}
    for seed in range(200):
        text = make_training_input(random.Random(seed), TEXTS)
        outcome = train_once(text, seed)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("train-ok", 0) >= 20, outcomes


@pytest.mark.parametrize(("args", "line"), [
    ("ignore: [Linear, Conv2d]", 4), ("submodules: [bn1]", 4), ("ignore: [conv1, fc1, fc2, encoder]", 4),
])
def test_a_quantization_modifier_with_nothing_to_quantize_is_refused_at_modify(args: str, line: int) -> None:
    """Found: submodules / ignore that left no Linear or Conv layer passed modify() and failed at
    the modifier's start step (ValueError: found no Linear or Conv layer to quantize)."""
    text = f"modifiers:\n  - !QuantizationModifier\n    start_epoch: 1\n    {args}\n"
    with pytest.raises(RecipeError) as info:
        _modify(text)
    (d,) = info.value.diagnostics
    assert d.code == "P007" and d.line == line and d.severity.name == "ERROR", d.format()
    assert train_once(text.replace(args, "ignore: [fc2]")) == "train-ok"


@pytest.mark.parametrize("mask", ["[1, 4]", "channel", "filter"])
def test_a_block_or_slice_mask_on_a_bias_is_refused_at_modify(mask: str) -> None:
    """Found: lint checked block shapes for divisibility only, so a block or slice mask on a
    1-D parameter (a bias, picked by __ALL__) passed modify() and failed at the first pruning
    step (MaskShapeError)."""
    text = ("modifiers:\n  - !GMPruningModifier\n    params: [__ALL__]\n    init_sparsity: 0.1\n"
            f"    final_sparsity: 0.5\n    start_epoch: 0\n    end_epoch: 2\n    update_frequency: 1\n"
            f"    mask_type: {mask}\n")
    with pytest.raises(RecipeError) as info:
        _modify(text)
    assert {(d.code, d.line) for d in info.value.diagnostics} == {("P004", 9)}, info.value
    assert any("2 or more dimensions" in d.message for d in info.value.diagnostics), info.value
    if mask == "[1, 4]":
        assert train_once(text.replace("[__ALL__]", "[fc1.weight]")) == "train-ok"


def test_freezing_every_parameter_is_refused_at_modify() -> None:
    """Found: TrainableParamsModifier with params __ALL__, trainable false froze the whole model
    at its start step; the next backward() failed (element 0 of tensors does not require grad)."""
    text = ("modifiers:\n  - !TrainableParamsModifier\n    params: [__ALL__, re:conv.*]\n"
            "    trainable: false\n    start_epoch: 0.5\n    end_epoch: -1\n")
    with pytest.raises(RecipeError) as info:
        _modify(text)
    (d,) = info.value.diagnostics
    assert d.code == "P011" and d.line == 3, d.format()
    assert train_once(text.replace("[__ALL__, re:conv.*]", "[re:conv.*]")) == "train-ok"


def test_a_training_path_that_spins_is_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    from fuzz_inputs import Hang
    from recipe_spec_torch.manager import TorchManager

    def spin(self: object, model: object = None) -> None:
        while True:
            pass

    monkeypatch.setattr(TorchManager, "finalize", spin)
    with pytest.raises(Hang, match="CPU time"):
        train_once("modifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 1}\n", limit=0.5)


def test_a_layer_removed_for_good_while_pruned_by_a_pattern_is_refused_at_modify() -> None:
    """Found: a LayerPruningModifier without end_epoch (the layer stays removed) counted as
    removed only at its first step, so a pruning modifier that still pruned the layer's weight
    (through a pattern) passed modify(), and its pruner asked for the removed weight mid-training
    (KeyError)."""
    text = ("modifiers:\n  - !MovementPruningModifier\n    params: ['re:.*weight']\n    init_sparsity: 0.05\n"
            "    final_sparsity: 0.8\n    start_epoch: 0\n    end_epoch: 1\n    update_frequency: 0.5\n"
            "  - !LayerPruningModifier\n    layers: [encoder.layer.0.attention.self.query]\n"
            "    start_epoch: -1\n    end_epoch: -1\n")
    with pytest.raises(RecipeError) as info:
        _modify(text)
    (d,) = info.value.diagnostics
    assert d.code == "P003" and d.line == 10 and "still prunes" in d.message, d.format()
    assert train_once(text.replace("start_epoch: -1", "start_epoch: 2")) == "train-ok"


def test_a_second_quantization_modifier_with_nothing_left_is_refused_at_modify() -> None:
    """Found: two QuantizationModifiers over the same layers passed modify(); at the later one's
    start the earlier one had converted every layer, and it failed (found no layer to quantize)."""
    text = ("modifiers:\n  - !QuantizationModifier\n    start_epoch: 0\n"
            "  - !QuantizationModifier\n    start_epoch: 1\n")
    with pytest.raises(RecipeError) as info:
        _modify(text)
    (d,) = info.value.diagnostics
    assert d.code == "P007" and d.line == 4 and "on line 2" in d.message, d.format()
    # each its own layers: runs
    assert train_once(text.replace("start_epoch: 1\n", "start_epoch: 1\n    submodules: [fc2]\n")
                      .replace("start_epoch: 0\n", "start_epoch: 0\n    ignore: [fc2]\n", 1)) == "train-ok"


def test_teacher_input_keys_with_tensor_inputs_is_a_located_error() -> None:
    """Found: teacher_input_keys with a tensor as student_inputs indexed the tensor by the
    keys (IndexError: too many indices) in loss_update(): now a located error saying what to pass."""
    text = "modifiers:\n  - !DistillationModifier\n    start_epoch: 0\n    teacher_input_keys: [pixels]\n"
    model = TinyNet()
    manager = ScheduledModifierManager.from_yaml(text)
    manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.01), steps_per_epoch=2,
                   distillation_teacher="self")
    x = torch.randn(4, 3, 6, 6)
    out = model(x)
    with pytest.raises(ValueError, match=r"DistillationModifier \(line 2\).*teacher_input_keys \['pixels'\]"):
        manager.loss_update(out.sum(), student_outputs=out, student_inputs=x)


def test_qat_observers_pass_non_finite_values_through() -> None:
    """Found (seed 10009545): ``weight_decay: 1e18`` made the weights infinite, and the QAT
    observer computed a zero point out of range (a raw RuntimeError from torch). A NaN or inf
    now passes through the fake quantizer unchanged, the range it had is kept, and the loss shows
    the divergence as it would without QAT."""
    from recipe_spec_torch.quantization import FakeQuantize

    fq = FakeQuantize(8, symmetric=False, averaging=0.0)
    finite = torch.tensor([-1.0, 0.0, 2.0])
    fq(finite)
    scale, zero = float(fq.scale), int(fq.zero_point)
    assert scale == pytest.approx(3.0 / 255) and zero == round(1.0 / (3.0 / 255))
    bad = torch.tensor([1.0, float("inf"), float("nan")])
    out = fq(bad)
    assert torch.equal(out[:2], bad[:2]) and torch.isnan(out[2])
    assert (float(fq.scale), int(fq.zero_point)) == (scale, zero)


def test_a_weight_decay_that_diverges_a_qat_run_is_a_diverged_loss() -> None:
    text = (
        "modifiers:\n  - !SetWeightDecayModifier\n    weight_decay: 1e18\n    start_epoch: 0.5\n"
        "  - !QuantizationModifier\n    start_epoch: 0.5\n"
    )
    assert train_once(text, 0) == "train-diverged"


def test_teacher_input_keys_with_teacher_inputs_given_trains() -> None:
    text = "modifiers:\n  - !DistillationModifier\n    start_epoch: 0\n    teacher_input_keys: [pixels]\n"
    assert train_once(text, 0) == "train-ok"


def test_movement_scores_skip_a_parameter_whose_layer_is_removed_for_now() -> None:
    """Found (seed 20000674): movement pruning collects scores from the first step, and read a
    parameter whose layer a LayerPruningModifier had removed (KeyError mid-training). While the
    layer is out its parameter has no gradient, so its scores stay as they are (SparseML skips a
    parameter without a gradient); the others' scores move."""
    text = (
        "modifiers:\n  - !LayerPruningModifier\n    layers: [fc1]\n    start_epoch: 0\n    end_epoch: 1\n"
        "  - !MovementPruningModifier\n    params: ['re:fc.*weight']\n    init_sparsity: 0.05\n"
        "    final_sparsity: 0.5\n    start_epoch: 3\n    end_epoch: 5\n    update_frequency: 1\n"
    )
    manager, model, optimizer = _modify(text)
    pruner = next(iter(manager._need_runtime().pruners.pruners.values()))
    x = torch.randn(4, 3, 6, 6)
    seen = []
    for _ in range(4):  # fc1 is removed by step 0's events (after its gradient) and back at step 2's
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
        seen.append(dict(zip(pruner.names, [s.clone() for s in pruner.scores], strict=True)))
    assert set(seen[0]) == {"fc1.weight", "fc2.weight"}
    fc1 = [s["fc1.weight"] for s in seen]
    assert torch.count_nonzero(fc1[0]) > 0  # step 0: collected before the removal
    assert torch.equal(fc1[0], fc1[1]) and torch.equal(fc1[1], fc1[2])  # steps 1, 2: out, skipped
    assert not torch.equal(fc1[2], fc1[3])  # step 3: back
    assert all(not torch.equal(a["fc2.weight"], b["fc2.weight"]) for a, b in zip(seen, seen[1:], strict=False))
    assert train_once(text, 0) == "train-ok"


def test_qat_conv_bn_fold_with_a_pruned_gamma_keeps_gradients_finite() -> None:
    """Found (seed 30003134): GMP on ``__ALL__`` pruned BatchNorm gammas to 0 while QAT trained
    the conv with its BN folded in; the fold divides the conv output by gamma / std again, and
    0 / 0 made the conv's gradients NaN. A zero gamma's channel keeps its own weights: the
    gradients stay finite and the channel's output is the BN's beta, as BN's formula says
    (gamma * x_hat + beta with gamma = 0)."""
    import pathlib

    from recipe_spec_torch.quantization import QATConv2d

    torch.manual_seed(0)
    conv, bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
    with torch.no_grad():
        bn.weight[1] = 0.0
        bn.bias.copy_(torch.tensor([0.5, -0.25, 1.0, 2.0]))
    qat = QATConv2d(3, 4, 3, padding=1)
    qat.load_state_dict(conv.state_dict())
    qat._qat_init(bn)
    x = torch.randn(2, 3, 5, 5)
    out = bn(qat(x))
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in (qat.weight, qat.bias, bn.weight, bn.bias))
    assert torch.allclose(out[:, 1], torch.full_like(out[:, 1], -0.25))
    fixture = pathlib.Path(__file__).with_name("fixtures").joinpath("qat_fold_pruned_gamma.yaml")
    assert train_once(fixture.read_text(), 30003134) == "train-ok"


@pytest.mark.parametrize("extra", [
    "    update_frequency: -1\n    fisher_block_size: 5000\n",  # M-FAC, from the training steps' gradients
    "    update_frequency: 1\n    fisher_block_size: 4\n    num_grads: 4\n",  # OBS: the grad sampler's
], ids=["MFACPruningModifier", "OBSPruningModifier"])
def test_second_order_pruning_with_every_weight_pruned_already_goes_on(extra: str) -> None:
    """Found (seed 30005866): M-FAC at init_sparsity 0.99 on 4-entry biases pruned every weight
    at its first step; the next step built a Fisher inverse over zero kept weights (IndexError).
    With nothing left to rank, a pruning step leaves the masks and weights as they are (a mask
    never regrows, even under a falling target)."""
    kind = "MFACPruningModifier" if "5000" in extra else "OBSPruningModifier"
    text = (
        f"modifiers:\n  - !{kind}\n    params: 're:.*bias'\n    init_sparsity: 0.99\n"
        "    final_sparsity: 0.727\n    start_epoch: 0\n    end_epoch: 3\n" + extra
    )
    assert train_once(text, 30005866) == "train-ok"
