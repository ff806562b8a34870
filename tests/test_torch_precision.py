"""Mixed precision with a recipe on PyTorch (``recipe_spec_torch.precision``).

A step the ``GradScaler`` skips (inf/NaN gradients) leaves the schedule where it was; when
quantization starts the scaler and autocast are switched off with one warning; and
``create.initialize(..., scaler=)`` returns the wrapped scaler.
"""

from __future__ import annotations

import doctest
import warnings

import pytest

torch = pytest.importorskip("torch")

from recipe_spec_torch import precision  # noqa: E402
from recipe_spec_torch.precision import RecipeScaler  # noqa: E402
from recipe_spec_torch.quantization import qat_modules  # noqa: E402

from recipe_spec import ScheduledModifierManager, create  # noqa: E402
from recipe_spec.runtime.precision import quantization_start_step  # noqa: E402

PRUNE_AND_LR = """
modifiers:
  - !EpochRangeModifier {start_epoch: 0, end_epoch: 3}
  - !LearningRateFunctionModifier {start_epoch: 0, end_epoch: 3, lr_func: linear, init_lr: 0.1, final_lr: 0.01}
  - !GMPruningModifier {params: [fc1.weight], init_sparsity: 0.1, final_sparsity: 0.7,
                        start_epoch: 0, end_epoch: 2, update_frequency: 0.5}
"""

QAT = """
modifiers:
  - !EpochRangeModifier {start_epoch: 0, end_epoch: 3}
  - !QuantizationModifier {start_epoch: 1}
"""


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def _batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 8, generator=g), torch.randn(4, 2, generator=g)) for _ in range(n)]


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(x), y)


def _run(inf_at: set[int], steps: int = 6) -> tuple[list[tuple], dict, RecipeScaler]:
    """Train ``steps`` real steps; before real step k in ``inf_at`` one extra batch gets an
    inf gradient. Returns (step_count, lr, zeros in fc1) after every real step."""
    torch.manual_seed(0)
    model = _Net()
    manager = ScheduledModifierManager.from_yaml(PRUNE_AND_LR)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    manager.modify(model, optimizer, steps_per_epoch=4)
    scaler = manager.wrap_scaler(torch.amp.GradScaler("cpu"))
    seen = []
    for k, (x, y) in enumerate(_batches(steps)):
        if k in inf_at:
            optimizer.zero_grad()
            scaler.scale(_loss(model, x, y)).backward()
            model.fc2.weight.grad[0, 0] = float("inf")
            before = (manager.runtime.step_count, optimizer.param_groups[0]["lr"], model.fc1.weight.clone())
            scaler.step(optimizer)
            scaler.update()
            assert manager.runtime.step_count == before[0], "a skipped step advanced the schedule"
            assert optimizer.param_groups[0]["lr"] == before[1]
            assert torch.equal(model.fc1.weight, before[2])
        optimizer.zero_grad()
        scaler.scale(_loss(model, x, y)).backward()
        scaler.unscale_(optimizer)  # e.g. to clip: the scaler then does not unscale twice
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        scaler.step(optimizer)
        scaler.update()
        seen.append((manager.runtime.step_count, optimizer.param_groups[0]["lr"], int((model.fc1.weight == 0).sum())))
    return seen, {k: v.clone() for k, v in model.state_dict().items()}, scaler


def test_skipped_step_leaves_the_schedule_where_it_was() -> None:
    plain, plain_weights, plain_scaler = _run(set())
    skipped, skipped_weights, scaler = _run({2, 4})
    assert skipped == plain  # LR and pruning events of the skipped steps applied at the next real one
    assert [s[0] for s in plain] == [1, 2, 3, 4, 5, 6]
    assert len({s[2] for s in plain}) > 2  # pruning did update on the way
    for name in plain_weights:  # loss scales are powers of two: unscaled gradients are exact
        assert torch.equal(skipped_weights[name], plain_weights[name]), name
    assert scaler.get_scale() == plain_scaler.get_scale() / 4  # halved at each skipped step


def test_scaler_step_without_argument_and_with_the_returned_optimizer() -> None:
    model = _Net()
    manager = ScheduledModifierManager.from_yaml(PRUNE_AND_LR)
    returned = manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.5), steps_per_epoch=4)
    scaler = manager.wrap_scaler(torch.amp.GradScaler("cpu"))
    for k, (x, y) in enumerate(_batches(3)):
        returned.zero_grad()
        scaler.scale(_loss(model, x, y)).backward()
        scaler.unscale_(returned if k else None)
        scaler.step(None if k == 1 else returned)
        scaler.update()
    assert manager.runtime.step_count == 3
    assert manager.wrap_scaler(scaler).scaler is scaler.scaler  # wrapping twice wraps the scaler once
    with pytest.raises(TypeError, match="GradScaler"):
        manager.wrap_scaler(object())


def test_quantization_switches_mixed_precision_off() -> None:
    model = _Net()
    manager = ScheduledModifierManager.from_yaml(QAT)
    assert manager.autocast_enabled() and manager.autocast_enabled(epoch=0.9)
    assert not manager.autocast_enabled(epoch=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    manager.modify(model, optimizer, steps_per_epoch=2)
    assert quantization_start_step(manager.runtime.plan) == 2
    scaler = manager.wrap_scaler(torch.amp.GradScaler("cpu"))
    states, losses = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step, (x, y) in enumerate(_batches(6)):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=manager.autocast_enabled()):
                out = model(x)
            loss = torch.nn.functional.mse_loss(out.float(), y)
            scaled = scaler.scale(loss)
            states.append((step, manager.autocast_enabled(), scaler.is_enabled(), scaled is loss, out.dtype))
            scaled.backward()
            scaler.step(optimizer)
            scaler.update()
            losses.append(float(loss))
    ours = [w for w in caught if "quantization-aware training starts" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert "step 2 (epoch 1)" in str(ours[0].message) and ours[0].category is RuntimeWarning
    assert [s[1] for s in states] == [True, True, False, False, False, False]
    assert [s[2] for s in states] == [True, True, False, False, False, False]
    assert [s[3] for s in states] == [False, False, True, True, True, True]  # unscaled loss
    assert [s[4] for s in states] == [torch.bfloat16] * 2 + [torch.float32] * 4
    assert not scaler.scaler.is_enabled()  # the user's own scaler is off too
    assert manager.runtime.step_count == 6  # the steps after QAT still drive the schedule
    assert manager.runtime.quantization is not None and len(qat_modules(model)) == 4
    assert all(torch.isfinite(torch.tensor(losses)))


def test_initialize_with_scaler_returns_it_wrapped() -> None:
    for call_with_optimizer in (True, False):
        model = _Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        manager, scaler = create.initialize(
            model, optimizer, 2, pruning=True, quantization=True,
            recipe_variables={"num_epochs": 4.0, "init_lr": 0.05},
            scaler=torch.amp.GradScaler("cpu"),
        )
        assert isinstance(scaler, RecipeScaler) and scaler.get_scale() == 65536.0
        lrs = []
        for x, y in _batches(4):
            optimizer.zero_grad()
            scaler.scale(_loss(model, x, y)).backward()
            if call_with_optimizer:
                scaler.step(optimizer)  # the seed's SCALER.step(optimizer), the user's optimizer
            else:
                scaler.step()
            scaler.update()
            lrs.append(optimizer.param_groups[0]["lr"])
        assert manager.runtime.step_count == 4
        assert lrs[0] == pytest.approx(0.05) and lrs[-1] < lrs[0]  # the recipe's LR drives it


def test_precision_module_doctest() -> None:
    result = doctest.testmod(precision, optionflags=doctest.ELLIPSIS)
    assert result.attempted and not result.failed
