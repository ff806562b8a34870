"""Checkpoint and resume: a run interrupted before pruning, mid-pruning and after the QAT start,
then resumed in a fresh process with the documented sequence, ends bit-identical to an
uninterrupted run (weights, masks, LR, BN statistics, fake-quant ranges)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

TESTS = Path(__file__).resolve().parent
RECIPE = """
modifiers:
  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 6}
  - !GMPruningModifier
    params: __ALL_PRUNABLE__
    init_sparsity: 0.05
    final_sparsity: 0.7
    start_epoch: 1
    end_epoch: 4
    update_frequency: 0.5
  - !TrainableParamsModifier {params: [bn1.weight, bn1.bias], trainable: false, start_epoch: 2, end_epoch: 5}
  - !QuantizationModifier {start_epoch: 4, disable_quantization_observer_epoch: 5, freeze_bn_stats_epoch: 5}
"""
S, TOTAL = 4, 6 * 4

SCRIPT = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, {tests!r})
    from torch_nets import build, train
    from recipe_spec import ScheduledModifierManager

    recipe, S, total, start, stop, load, save = {recipe!r}, {S}, {total}, int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    model, optimizer, inputs, targets = build()
    manager = ScheduledModifierManager.from_yaml(recipe)
    optimizer = manager.modify(model, optimizer, steps_per_epoch=S)
    if load != "-":
        saved = torch.load(load, weights_only=False)
        manager.load_state_dict(saved["manager"])
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
    train(model, optimizer, inputs, targets, stop - start, start=start)
    state = {{"model": model.state_dict(), "optimizer": optimizer.state_dict(), "manager": manager.state_dict()}}
    if stop == total:
        manager.finalize(model)
        state["final"] = {{k: v.clone() for k, v in model.state_dict().items()}}
        state["lr"] = [g["lr"] for g in optimizer.param_groups]
    torch.save(state, save)
    """
).format(tests=str(TESTS), recipe=RECIPE, S=S, total=TOTAL)


def _run(tmp: Path, start: int, stop: int, load: str, save: str) -> None:
    script = tmp / "run.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script), str(start), str(stop), load, save], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("full")
    _run(tmp, 0, TOTAL, "-", str(tmp / "full.pt"))
    return torch.load(tmp / "full.pt", weights_only=False)


@pytest.mark.parametrize("cut", [2, 9, 18], ids=["before-pruning", "mid-pruning", "after-qat-start"])
def test_resume_is_bit_identical(cut: int, tmp_path: Path, uninterrupted: dict) -> None:
    _run(tmp_path, 0, cut, "-", str(tmp_path / "cut.pt"))
    _run(tmp_path, cut, TOTAL, str(tmp_path / "cut.pt"), str(tmp_path / "resumed.pt"))
    resumed = torch.load(tmp_path / "resumed.pt", weights_only=False)
    assert resumed["final"].keys() == uninterrupted["final"].keys()
    for key, value in uninterrupted["final"].items():
        assert torch.equal(resumed["final"][key], value), key
    masks_a, masks_b = uninterrupted["manager"]["masks"], resumed["manager"]["masks"]
    assert masks_a.keys() == masks_b.keys() and len(masks_a) == 4
    for name in masks_a:
        assert torch.equal(masks_a[name][0], masks_b[name][0]), name
    assert resumed["lr"] == uninterrupted["lr"]
    assert resumed["manager"]["step"] == TOTAL
    assert any("fake_quant" in k for k in uninterrupted["final"])  # QAT structure was restored too


def test_load_state_dict_checks_its_input(tmp_path: Path) -> None:
    sys.path.insert(0, str(TESTS))
    from torch_nets import build

    from recipe_spec import ScheduledModifierManager

    model, optimizer, _, _ = build()
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    with pytest.raises(RuntimeError, match="modify"):
        manager.load_state_dict({})
    manager.modify(model, optimizer, steps_per_epoch=S)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        manager.load_state_dict({"version": 1, "steps_per_epoch": 8, "step": 0})
