"""DistillationModifier on PyTorch, against SparseML 1.x's formula
(``sparseml/pytorch/sparsification/distillation/modifier_distillation_base.py``, ``kl_logsoftmax``
and ``kldiv_loss``; ``modifier_distillation.py``, ``compute_total_loss``), computed here
independently with ``torch.nn.functional``."""

from __future__ import annotations

import copy
import io
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402


def _recipe(hardness: float = 0.5, temperature: float = 2.0, start: float = 0, end: float = -1,
            extra: str = "") -> str:
    return (
        "modifiers:\n"
        f"  - !DistillationModifier {{start_epoch: {start}, end_epoch: {end}, hardness: {hardness}, "
        f"temperature: {temperature}{extra}}}\n"
    )


def _manager(text: str) -> ScheduledModifierManager:
    return ScheduledModifierManager.from_yaml(text)


def expected_distill(student: torch.Tensor, teacher: torch.Tensor, t: float) -> torch.Tensor:
    """SparseML's kl_logsoftmax, written out: sum-reduced KL(teacher_T || student_T) * T^2 over
    the number of rows."""
    rows = student.numel() / student.size(-1)
    kl = F.kl_div(F.log_softmax(student / t, dim=-1), F.log_softmax(teacher / t, dim=-1),
                  log_target=True, reduction="sum")
    return kl * t ** 2 / rows


def _setup(text: str, teacher, steps_per_epoch: int = 4, seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Linear(6, 5)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    manager = _manager(text)
    opt = manager.modify(model, opt, steps_per_epoch=steps_per_epoch, distillation_teacher=teacher)
    return model, opt, manager


def _teacher(seed: int = 1) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Linear(6, 5)


def test_hardness_zero_is_the_plain_loss_and_one_the_pure_distillation_loss() -> None:
    teacher = _teacher()
    x = torch.randn(3, 6)
    for hardness in (0.0, 1.0, 0.3):
        model, opt, manager = _setup(_recipe(hardness=hardness), teacher)
        out = model(x)
        plain = out.square().mean()
        got = manager.loss_update(plain, student_outputs=out, student_inputs=x)
        distill = expected_distill(out, teacher(x).detach(), 2.0)
        if hardness == 0.0:
            assert torch.equal(got, plain)
        elif hardness == 1.0:
            assert torch.equal(got, distill)
        else:
            torch.testing.assert_close(got, 0.7 * plain + 0.3 * distill)


def test_the_formula_matches_batchmean_kl_of_softmaxes() -> None:
    """SparseML's sum / rows equals kl_div(log_softmax(s/T), softmax(t/T), batchmean) * T^2 for
    2-D logits; for 3-D logits it averages over every position."""
    from recipe_spec_torch.distillation import kl_logsoftmax

    s, t = torch.randn(4, 7), torch.randn(4, 7)
    batchmean = F.kl_div(F.log_softmax(s / 3, -1), F.softmax(t / 3, -1), reduction="batchmean") * 9
    torch.testing.assert_close(kl_logsoftmax(s, t, 3.0), batchmean)
    s3, t3 = torch.randn(2, 5, 7), torch.randn(2, 5, 7)
    per_row = F.kl_div(F.log_softmax(s3.reshape(10, 7) / 3, -1), F.softmax(t3.reshape(10, 7) / 3, -1),
                       reduction="batchmean") * 9
    torch.testing.assert_close(kl_logsoftmax(s3, t3, 3.0), per_row)
    with pytest.raises(ValueError, match="same shape"):
        kl_logsoftmax(s, torch.randn(4, 6), 1.0)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 4.0])
def test_temperature_scaling(temperature: float) -> None:
    teacher = _teacher()
    model, opt, manager = _setup(_recipe(hardness=1.0, temperature=temperature), teacher)
    x = torch.randn(3, 6)
    out = model(x)
    got = manager.loss_update(torch.tensor(0.0), student_outputs=out, student_inputs=x)
    torch.testing.assert_close(got, expected_distill(out, teacher(x).detach(), temperature))


def test_only_active_on_start_to_end() -> None:
    """start_epoch 1, end_epoch 2 at 2 steps an epoch: steps 2 and 3 distil, 0, 1, 4, 5 not."""
    teacher = _teacher()
    model, opt, manager = _setup(_recipe(hardness=1.0, start=1, end=2), teacher, steps_per_epoch=2)
    x = torch.randn(3, 6)
    active = []
    for _ in range(6):
        out = model(x)
        loss = out.square().mean()
        got = manager.loss_update(loss, student_outputs=out, student_inputs=x)
        active.append(got is not loss)
        if got is loss:
            assert torch.equal(got, loss)
        opt.zero_grad()
        got.backward()
        opt.step()
    assert active == [False, False, True, True, False, False]


def test_self_distillation_uses_a_frozen_copy_taken_at_the_start_step() -> None:
    model, opt, manager = _setup(_recipe(hardness=1.0, start=1), "self", steps_per_epoch=2)
    x = torch.randn(3, 6)
    for _ in range(2):  # epoch 0: not yet
        out = model(x)
        assert manager.loss_update(out.sum(), student_outputs=out, student_inputs=x) is not None
        assert not manager.runtime.distillation.teachers
        opt.zero_grad()
        out.square().mean().backward()
        opt.step()
    at_start = copy.deepcopy(model.state_dict())
    out = model(x)
    loss = manager.loss_update(out.square().mean(), student_outputs=out, student_inputs=x)  # first call: works
    teacher = manager.runtime.distillation.teachers[0]
    # a copy of the student as it is at the start step: the distillation term is 0 there
    torch.testing.assert_close(loss, torch.tensor(0.0), atol=1e-6, rtol=0)
    assert teacher is not model and all(not p.requires_grad for p in teacher.parameters())
    assert not teacher.training
    for _ in range(5):
        opt.zero_grad()
        (out.square().mean() + loss).backward()
        assert all(p.grad is None for p in teacher.parameters())
        opt.step()
        out = model(x)
        loss = manager.loss_update(out.square().mean(), student_outputs=out, student_inputs=x)
    for name, value in teacher.state_dict().items():  # the teacher did not follow the student
        assert torch.equal(value, at_start[name])
    assert not torch.equal(model.weight, at_start["weight"])
    assert manager.runtime.distillation.teachers[0] is teacher
    torch.testing.assert_close(loss, expected_distill(out, teacher(x), 2.0))
    assert loss.item() > 0


def test_self_distillation_at_step_zero_without_a_loss_update_before_the_start_event() -> None:
    """The copy is also taken by the start event when the loop calls loss_update later."""
    model, opt, manager = _setup(_recipe(hardness=1.0), "self")
    before = copy.deepcopy(model.state_dict())
    x = torch.randn(3, 6)
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()  # the start event (step 0) copies the student as it was before this update
    teacher = manager.runtime.distillation.teachers[0]
    for name, value in teacher.state_dict().items():
        assert torch.equal(value, before[name])


def test_a_given_teacher_runs_in_eval_mode_without_gradients_on_teacher_inputs() -> None:
    torch.manual_seed(3)
    teacher = nn.Sequential(nn.Linear(4, 5), nn.Dropout(0.9))
    teacher.train()
    model, opt, manager = _setup(_recipe(hardness=1.0), teacher)
    x, tx = torch.randn(3, 6), torch.randn(3, 4)
    out = model(x)
    loss = manager.loss_update(torch.tensor(0.0), student_outputs=out, student_inputs=x, teacher_inputs=tx)
    assert not teacher.training
    with torch.no_grad():
        want = expected_distill(out, teacher(tx), 2.0)  # eval: deterministic, no dropout
    torch.testing.assert_close(loss, want)
    loss.backward()
    assert all(p.grad is None for p in teacher.parameters())
    assert model.weight.grad is not None


def test_output_keys_and_teacher_input_keys() -> None:
    class Two(nn.Module):
        def __init__(self, seed: int) -> None:
            super().__init__()
            torch.manual_seed(seed)
            self.a, self.b = nn.Linear(6, 3), nn.Linear(6, 4)

        def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
            return {"start": self.a(x), "end": self.b(x), "pooled": self.a(x).sum(-1, keepdim=True)}

    student, teacher = Two(0), Two(1)
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    manager = _manager(_recipe(hardness=1.0, extra=", distill_output_keys: [start, end], teacher_input_keys: [x]"))
    manager.modify(student, opt, steps_per_epoch=2, distillation_teacher=teacher)
    x = torch.randn(2, 6)
    inputs = {"x": x, "mask": torch.ones(2)}
    out = student(**inputs)
    got = manager.loss_update(torch.tensor(0.0), student_outputs=out, student_inputs=inputs)
    t_out = teacher(x)
    want = (expected_distill(out["start"], t_out["start"], 2.0) + expected_distill(out["end"], t_out["end"], 2.0)) / 2
    torch.testing.assert_close(got, want.detach(), check_stride=False)


def test_disable_and_the_default_leave_the_loss_alone() -> None:
    x = torch.randn(3, 6)
    for teacher in ("disable", None):
        torch.manual_seed(0)
        model = nn.Linear(6, 5)
        manager = _manager(_recipe(hardness=1.0))
        with pytest.warns(UserWarning, match="distillation_teacher is 'disable'"):
            if teacher is None:
                manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.1), steps_per_epoch=2)
            else:
                manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.1), steps_per_epoch=2,
                               distillation_teacher=teacher)
        loss = model(x).sum()
        assert manager.loss_update(loss) is loss


def test_without_distillation_loss_update_returns_the_loss_and_a_teacher_is_ignored() -> None:
    """SparseML passed distillation_teacher to every modifier; the others ignored it."""
    text = "modifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 2}\n"
    model = nn.Linear(6, 5)
    manager = _manager(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.1), steps_per_epoch=2,
                       distillation_teacher=_teacher())
    loss = model(torch.randn(3, 6)).sum()
    assert manager.loss_update(loss) is loss
    assert manager.loss_update(loss, student_outputs=loss) is loss


def test_errors() -> None:
    model, opt, manager = _setup(_recipe(hardness=0.5), _teacher())
    loss = torch.tensor(1.0)
    with pytest.raises(ValueError, match=r"line 2.*student_outputs.*student_outputs=outputs"):
        manager.loss_update(loss)
    with pytest.raises(ValueError, match="student_inputs"):
        manager.loss_update(loss, student_outputs=model(torch.randn(2, 6)))
    with pytest.raises(ValueError, match="unrecognized value for distillation_teacher"):
        _manager(_recipe()).modify(model, opt, steps_per_epoch=2, distillation_teacher="teacher.pt")
    with pytest.raises(RuntimeError, match="modify"):
        _manager(_recipe()).loss_update(loss)
    m2, _, manager2 = _setup(_recipe(hardness=0.5), nn.Linear(6, 3))
    x = torch.randn(2, 6)
    with pytest.raises(ValueError, match="same shape"):
        manager2.loss_update(loss, student_outputs=m2(x), student_inputs=x)


def test_a_small_network_trains_end_to_end_with_distillation() -> None:
    """A student MLP learns a task from labels and a trained teacher: the distilled loss falls."""
    torch.manual_seed(0)
    x = torch.randn(256, 10)
    y = (x[:, :3].sum(1) > 0).long() + (x[:, 3] > 1).long()
    teacher = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
    t_opt = torch.optim.Adam(teacher.parameters(), lr=0.01)
    for _ in range(200):
        t_opt.zero_grad()
        F.cross_entropy(teacher(x), y).backward()
        t_opt.step()
    student = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(student.parameters(), lr=0.2)
    manager = _manager(_recipe(hardness=0.7, temperature=2.0, start=0, end=-1)
                       + "  - !GMPruningModifier {params: ['0.weight'], init_sparsity: 0.1, final_sparsity: 0.5,"
                         " start_epoch: 1, end_epoch: 3, update_frequency: 1}\n")
    opt = manager.modify(student, opt, steps_per_epoch=8, distillation_teacher=teacher)
    losses = []
    for _ in range(5):
        total = 0.0
        for i in range(8):
            xb, yb = x[i * 32:(i + 1) * 32], y[i * 32:(i + 1) * 32]
            out = student(xb)
            loss = manager.loss_update(F.cross_entropy(out, yb), student_outputs=out, student_inputs=xb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        losses.append(total / 8)
    manager.finalize(student)
    assert losses[-1] < 0.6 * losses[0], losses
    assert abs(float((student[0].weight == 0).float().mean()) - 0.5) < 0.01


def test_state_dict_round_trip_keeps_the_self_distillation_teacher() -> None:
    """The self-distillation copy is saved in the manager's state (its weights) and rebuilt on
    resume: the resumed run distils from the teacher taken at the original start step."""
    text = _recipe(hardness=0.5, start=0)
    model, opt, manager = _setup(text, "self", steps_per_epoch=2)
    x = torch.randn(3, 6)
    for _ in range(3):
        out = model(x)
        loss = manager.loss_update(out.square().mean(), student_outputs=out, student_inputs=x)
        opt.zero_grad()
        loss.backward()
        opt.step()
    buf = io.BytesIO()
    torch.save({"manager": manager.state_dict(), "model": model.state_dict()}, buf)
    out = model(x)
    want = manager.loss_update(out.square().mean(), student_outputs=out, student_inputs=x)

    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    torch.manual_seed(9)
    model2 = nn.Linear(6, 5)
    manager2 = _manager(text)
    opt2 = manager2.modify(model2, torch.optim.SGD(model2.parameters(), lr=0.1), steps_per_epoch=2,
                           distillation_teacher="self")
    manager2.load_state_dict(saved["manager"])
    model2.load_state_dict(saved["model"])
    out2 = model2(x)
    got = manager2.loss_update(out2.square().mean(), student_outputs=out2, student_inputs=x)
    torch.testing.assert_close(got, want)
    t1, t2 = manager.runtime.distillation.teachers[0], manager2.runtime.distillation.teachers[0]
    for name, value in t1.state_dict().items():
        assert torch.equal(value, t2.state_dict()[name])
    assert all(not p.requires_grad for p in t2.parameters())
    assert opt2 is not None


def test_self_distillation_with_masks_does_not_touch_the_student_through_the_copy() -> None:
    """The student's mask hooks are not copied onto the teacher."""
    text = _recipe(hardness=0.5, start=0) + (
        "  - !GMPruningModifier {params: [weight], init_sparsity: 0.5, final_sparsity: 0.8,"
        " start_epoch: 0, end_epoch: 2, update_frequency: 1}\n"
    )
    model, opt, manager = _setup(text, "self", steps_per_epoch=2)
    x = torch.randn(3, 6)
    for _ in range(6):
        out = model(x)
        loss = manager.loss_update(out.square().mean(), student_outputs=out, student_inputs=x)
        opt.zero_grad()
        loss.backward()
        opt.step()
    teacher = manager.runtime.distillation.teachers[0]
    assert not teacher._forward_pre_hooks
    assert float((model.weight == 0).float().mean()) == pytest.approx(0.8, abs=0.04)
