"""The PyTorch runtime's training features on a CUDA device, each against the same run on the
CPU: every mask type, global sparsity, AC/DC, movement, M-FAC and OBS (training and one-shot
``apply()``, with the gradients kept on another device than the weights), distillation with the
teacher on the device, QAT and mixed precision.

Each test takes a ``device``: the ``cpu`` run passes on any machine, the ``cuda`` one (marked
``cuda``, skipped without a GPU) runs the same seeds on the GPU and must give the CPU's masks
exactly and its weights within a tolerance (float64 models where the comparison is tight).
Every run is watched by :class:`device_audit.PlacementAudit`: a tensor the runtime creates
without saying on which device, or one operation mixing devices, fails the test, so the CPU
run already shows a tensor that would land on the CPU beside a CUDA model.

Trainer, Lightning, ``create.initialize``, checkpoints and one-shot SparseGPT/Wanda:
``test_features_cuda_runs.py``; the mask functions alone: ``test_masks_cuda.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from device_audit import PlacementAudit, placement_checked  # noqa: E402
from recipe_spec_torch.quantization import FakeQuantize, QuantizationState  # noqa: E402

from recipe_spec import ScheduledModifierManager, loads  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
#: (weights, gradients and inverse): the second-order window and inverse on the other device too
SPLIT_DEVICES = [pytest.param("cpu", "cpu", id="cpu-cpu")] + [
    pytest.param(w, g, marks=pytest.mark.cuda, id=f"{w}-{g}") for w, g in (("cpu", "cuda:0"), ("cuda", "cpu"), ("cuda", "cuda:0"))]
S = 4  # steps per epoch
PRUNED = ("conv.weight", "fc1.weight", "fc2.weight")


class Net(torch.nn.Module):
    """A conv layer and two Linear layers: 3x6x6 inputs, 8 outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.fc1 = torch.nn.Linear(128, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(torch.relu(self.conv(x)).flatten(1))))


def net(device: str, dtype: torch.dtype = torch.float64) -> Net:
    torch.manual_seed(0)
    return Net().to(dtype=dtype, device=device)


def batches(n: int, device: str, dtype: torch.dtype = torch.float64) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` batches drawn on the CPU from a fixed seed, then moved: the same data on every device."""
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        x, y = torch.randn(4, 3, 6, 6, generator=gen, dtype=dtype), torch.randn(4, 8, generator=gen, dtype=dtype)
        out.append((x.to(device), y.to(device)))
    return out


def sampler(device: str, dtype: torch.dtype = torch.float64) -> dict[str, Any]:
    """SparseML's grad sampler over 16 batches of the same data."""
    data = batches(16, device, dtype)
    return {"data_loader_builder": lambda kwargs: [((x,), {}, y) for x, y in data],
            "loss_function": torch.nn.functional.mse_loss}


@dataclass
class Run:
    """What a run leaves: its weights (on the CPU), losses and per-step zeros of fc1."""

    weights: dict[str, torch.Tensor]
    losses: list[float] = field(default_factory=list)
    zeros: list[int] = field(default_factory=list)
    pruned: dict[str, int] = field(default_factory=dict)  # entries each held mask prunes at the end
    manager: Any = None


def train(recipe: str, device: str, steps: int, dtype: torch.dtype = torch.float64, momentum: float = 0.0,
          loss_hook: Callable[[Any, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
          **modify: Any) -> Run:
    """Train ``Net`` on ``device`` for ``steps`` steps under ``recipe`` (placement audited)."""
    model = net(device, dtype)
    data = batches(steps, device, dtype)
    run = Run({})
    with placement_checked():
        manager = ScheduledModifierManager.from_yaml(recipe)
        opt = manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum), S, **modify)
        for x, y in data:
            opt.zero_grad()
            out = model(x)
            loss = torch.nn.functional.mse_loss(out, y)
            if loss_hook is not None:
                loss = loss_hook(manager, loss, out, x)
            loss.backward()
            opt.step()
            run.losses.append(float(loss.detach()))
            run.zeros.append(int((model.fc1.weight == 0).sum()))
        run.pruned = {n: int(e.mask.numel() - e.mask.count_nonzero()) for n, e in manager.runtime.masks.params.items()}
        manager.finalize(model)
    run.weights = {n: p.detach().cpu() for n, p in model.named_parameters()}
    run.manager = manager
    return run


def assert_same(ref: dict[str, torch.Tensor], got: dict[str, torch.Tensor], rtol: float = 1e-9, atol: float = 1e-12) -> None:
    """The zeros exactly, the values within the tolerance."""
    assert ref.keys() == got.keys()
    for name in ref:
        assert torch.equal(ref[name] == 0, got[name] == 0), name
        torch.testing.assert_close(got[name], ref[name], rtol=rtol, atol=atol, msg=name)


def gmp_line(params: tuple[str, ...] = PRUNED, final: float = 0.75, extra: str = "", end: int = 2,
             init: float = 0.25) -> str:
    """A GMPruningModifier from 0 to ``end`` epochs, as one line of a modifier list."""
    return (f"  - !GMPruningModifier {{params: {list(params)}, init_sparsity: {init}, "
            f"final_sparsity: {final}, start_epoch: 0, end_epoch: {end}, update_frequency: 0.5{extra}}}\n")


def gmp(params: tuple[str, ...] = PRUNED, final: float = 0.75, extra: str = "", end: int = 2,
        init: float = 0.25) -> str:
    return "modifiers:\n" + gmp_line(params, final, extra, end, init)


# -- masks -----------------------------------------------------------------------------------------
def _groups_all_or_none(w: torch.Tensor, groups: torch.Tensor) -> bool:
    zero = groups == 0
    return bool((zero.all(-1) | ~zero.any(-1)).all())


MASK_CASES = [  # mask_type, params, sparsity, structure check of a pruned weight
    ("unstructured", PRUNED, 0.75, None),
    ("block4", ("fc1.weight", "fc2.weight"), 0.75, lambda w: _groups_all_or_none(w, w.reshape(w.shape[0], -1, 4))),
    ("[1, 4]", ("fc1.weight", "fc2.weight"), 0.75, lambda w: _groups_all_or_none(w, w.reshape(w.shape[0], -1, 4))),
    ("channel", PRUNED, 0.75, lambda w: _groups_all_or_none(w, w.reshape(w.shape[0], w.shape[1], -1).transpose(0, 1))),
    ("filter", PRUNED, 0.75, lambda w: _groups_all_or_none(w, w.reshape(w.shape[0], -1))),
    ("'2:4'", ("fc1.weight", "fc2.weight"), 0.5, lambda w: bool(((w.reshape(w.shape[0], -1, 4) == 0).sum(-1) == 2).all())),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("mask_type", "params", "sparsity", "structure"), MASK_CASES, ids=[c[0] for c in MASK_CASES])
def test_mask_types(device: str, mask_type: str, params: tuple[str, ...], sparsity: float,
                    structure: Callable[[torch.Tensor], bool] | None) -> None:
    recipe = gmp(params, sparsity, f", mask_type: {mask_type}", init=0.5 if "2:4" in mask_type else 0.25)
    run = train(recipe, device, 3 * S)
    for name in params:
        w = run.weights[name]
        frac = float((w == 0).sum()) / w.numel()
        granule = 1 / w.numel() if structure is None else 4 / w.numel() if "4" in mask_type else 1 / min(w.shape[:2])
        assert abs(frac - sparsity) <= granule + 1e-9, (name, frac)
        assert structure is None or structure(w), name
    if device != "cpu":
        assert_same(train(recipe, "cpu", 3 * S).weights, run.weights)


@pytest.mark.parametrize("device", DEVICES)
def test_global_sparsity(device: str) -> None:
    recipe = gmp().replace("GMPruningModifier", "GlobalMagnitudePruningModifier")
    run = train(recipe, device, 3 * S)
    total = sum(run.weights[n].numel() for n in PRUNED)
    fractions = [float((run.weights[n] == 0).sum()) / run.weights[n].numel() for n in PRUNED]
    assert sum(int((run.weights[n] == 0).sum()) for n in PRUNED) == round(0.75 * total)
    assert max(fractions) - min(fractions) > 0.02  # ranked together, not layer by layer
    if device != "cpu":
        assert_same(train(recipe, "cpu", 3 * S).weights, run.weights)


@pytest.mark.parametrize("device", DEVICES)
def test_acdc(device: str) -> None:
    recipe = ("modifiers:\n  - !ACDCPruningModifier {compression_sparsity: 0.75, start_epoch: 0, end_epoch: 4, "
              "update_frequency: 1, params: [fc1.weight, fc2.weight]}\n")
    run = train(recipe, device, 4 * S + 1, momentum=0.9)
    zeros, compressed = run.zeros, run.zeros[S]
    # dense, compressed (fc1's share of the global 75%), dense again (the weights regrow), compressed
    assert set(zeros[:S]) == {0} and set(zeros[S:2 * S]) == {compressed} and compressed > 0, zeros
    assert min(zeros[2 * S + 1:3 * S]) < compressed and set(zeros[3 * S:]) == {compressed}, zeros
    total = sum(run.weights[n].numel() for n in ("fc1.weight", "fc2.weight"))
    assert abs(sum(int((run.weights[n] == 0).sum()) for n in ("fc1.weight", "fc2.weight")) - 0.75 * total) <= 1
    if device != "cpu":
        ref = train(recipe, "cpu", 4 * S + 1, momentum=0.9)
        assert ref.zeros == run.zeros
        assert_same(ref.weights, run.weights)


@pytest.mark.parametrize("device", DEVICES)
def test_movement(device: str) -> None:
    recipe = ("modifiers:\n  - !MovementPruningModifier {params: [fc1.weight, fc2.weight], init_sparsity: 0.1, "
              "final_sparsity: 0.6, start_epoch: 1, end_epoch: 3, update_frequency: 1}\n")
    run = train(recipe, device, 3 * S + 1)
    for name in ("fc1.weight", "fc2.weight"):  # a weight the last update revives may still be 0
        assert run.pruned[name] == round(0.6 * run.weights[name].numel()) <= int((run.weights[name] == 0).sum())
    if device != "cpu":
        assert_same(train(recipe, "cpu", 3 * S + 1).weights, run.weights)


# -- second order ----------------------------------------------------------------------------------
def second_order(kind: str, devices: str, sampled: bool) -> str:
    extra = "    fisher_block_size: 16\n"
    if kind == "MFACPruningModifier":
        extra += f"    grads_device: {devices}\n    available_devices: [{devices}]\n"
    return (f"modifiers:\n  - !{kind}\n    params: [fc1.weight, fc2.weight]\n    init_sparsity: 0.3\n"
            f"    final_sparsity: 0.6\n    start_epoch: 1.0\n    end_epoch: 3.0\n    update_frequency: 1.0\n"
            f"    num_grads: {8 if sampled else 4}\n    damp: 1.0e-3\n{extra}")


def assert_pruned(weights: dict[str, torch.Tensor]) -> None:
    """60% of fc1 and fc2 together are zeros (ranked globally, each layer rounded at most)."""
    names = ("fc1.weight", "fc2.weight")
    zeros = sum(int((weights[n] == 0).sum()) for n in names)
    assert abs(zeros - 0.6 * sum(weights[n].numel() for n in names)) <= 1, zeros


@pytest.mark.parametrize("kind", ["MFACPruningModifier", "OBSPruningModifier"])
@pytest.mark.parametrize(("device", "grads"), SPLIT_DEVICES)
def test_second_order_training(kind: str, device: str, grads: str) -> None:
    """M-FAC buffers the training gradients; OBS samples them (grad sampler on the weights' device)."""
    obs = kind == "OBSPruningModifier"
    if obs and grads != "cpu":
        pytest.skip("OBS takes no grads_device/available_devices (its inverse goes to cuda:0 where there is one)")
    recipe = second_order(kind, grads, obs)
    options = {"grad_sampler": sampler(device)} if obs else {}
    run = train(recipe, device, 3 * S + 1, **options)
    assert_pruned(run.weights)
    if (device, grads) != ("cpu", "cpu"):
        ref_options = {"grad_sampler": sampler("cpu")} if obs else {}
        assert_same(train(second_order(kind, "cpu", obs), "cpu", 3 * S + 1, **ref_options).weights, run.weights)


def _oneshot(kind: str, device: str, grads: str) -> dict[str, torch.Tensor]:
    model = net(device)
    with placement_checked():
        ScheduledModifierManager.from_yaml(second_order(kind, grads, True)).apply(model, grad_sampler=sampler(device))
    assert model.fc1.weight.grad is None
    return {n: p.detach().cpu() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kind", ["MFACPruningModifier", "OBSPruningModifier"])
@pytest.mark.parametrize(("device", "grads"), SPLIT_DEVICES)
def test_second_order_oneshot(kind: str, device: str, grads: str) -> None:
    if kind == "OBSPruningModifier" and grads != "cpu":
        pytest.skip("OBS takes no grads_device/available_devices (its inverse goes to cuda:0 where there is one)")
    weights = _oneshot(kind, device, grads)
    dense = {n: p.detach() for n, p in net("cpu").named_parameters()}
    assert_pruned(weights)
    for name in ("fc1.weight", "fc2.weight"):
        assert not torch.equal(weights[name][weights[name] != 0], dense[name][weights[name] != 0])  # OBS update
    torch.testing.assert_close(weights["conv.weight"], dense["conv.weight"])  # not targeted
    if (device, grads) != ("cpu", "cpu"):
        assert_same(_oneshot(kind, "cpu", "cpu"), weights)


# -- distillation ----------------------------------------------------------------------------------
DISTILL = ("modifiers:\n  - !DistillationModifier {start_epoch: 0, end_epoch: 2, hardness: 0.6, temperature: 2.0}\n"
           + gmp_line(("fc1.weight",), 0.6))


def _kl(student: torch.Tensor, teacher: torch.Tensor, t: float) -> torch.Tensor:
    """SparseML's kl_logsoftmax, written out: KL(softmax(teacher/T) || softmax(student/T)) per row, times T²."""
    p = torch.softmax(teacher / t, -1)
    return (p * (torch.log(p) - torch.log_softmax(student / t, -1))).sum(-1).mean() * t * t


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("teacher_kind", ["model", "self"])
def test_distillation(device: str, teacher_kind: str) -> None:
    torch.manual_seed(5)
    teacher = Net().double().to(device) if teacher_kind == "model" else "self"
    checked: list[float] = []

    def hook(manager: Any, loss: torch.Tensor, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        mixed = manager.loss_update(loss, student_outputs=out, student_inputs=x)
        if manager.runtime.step_count < 2 * S:  # the modifier's window: check its value by hand
            t = teacher if teacher_kind == "model" else next(iter(manager.runtime.distillation.teachers.values()))
            assert all(p.device == out.device for p in t.parameters())
            with torch.no_grad():
                want = 0.4 * loss + 0.6 * _kl(out, t(x), 2.0)
            torch.testing.assert_close(mixed.detach(), want, rtol=1e-10, atol=1e-12)
            checked.append(float(mixed.detach()))
        return mixed

    run = train(DISTILL, device, 3 * S, loss_hook=hook, distillation_teacher=teacher)
    assert len(checked) == 2 * S
    if device != "cpu":
        torch.manual_seed(5)
        ref_teacher = Net().double() if teacher_kind == "model" else "self"
        ref = train(DISTILL, "cpu", 3 * S, distillation_teacher=ref_teacher,
                    loss_hook=lambda m, loss, out, x: m.loss_update(loss, student_outputs=out, student_inputs=x))
        assert_same(ref.weights, run.weights)


# -- quantization-aware training -------------------------------------------------------------------
QAT = gmp(("fc1.weight", "fc2.weight"), 0.5, end=1) + "  - !QuantizationModifier {start_epoch: 1, disable_quantization_observer_epoch: 2}\n"


@pytest.mark.parametrize("device", DEVICES)
def test_qat(device: str) -> None:
    run = train(QAT, device, 3 * S, dtype=torch.float32)
    model = run.manager.runtime.model
    fakes = [m for m in model.modules() if isinstance(m, FakeQuantize)]
    assert len(fakes) == 6  # inputs and weights of conv, fc1, fc2
    for fq in fakes:  # the observers' buffers live with the layer they quantize
        assert {b.device.type for b in fq.buffers()} == {torch.device(device).type}
    assert all(math.isfinite(v) for v in run.losses)
    if device != "cpu":
        ref = train(QAT, "cpu", 3 * S, dtype=torch.float32)
        ref_fakes = [m for m in ref.manager.runtime.model.modules() if isinstance(m, FakeQuantize)]
        # after QAT starts, a fake-quantized value the GPU's rounding puts on the other side of a
        # half step moves the paths apart a little (an observer's scale by ~4e-4 on an H200)
        for a, b in zip(ref_fakes, fakes, strict=True):
            torch.testing.assert_close(b.scale.cpu(), a.scale, rtol=5e-3, atol=1e-7)
        for name, want in ref.weights.items():  # the masks, set before QAT, exactly; the weights close
            got = run.weights[name]
            assert torch.equal(want == 0, got == 0), name
            assert float((got - want).norm() / want.norm()) <= 0.05, name


def test_qat_observers_are_made_on_the_layers_device() -> None:
    """The regression: the fake-quantize buffers were made on the CPU whatever the layer's
    device (seen here on the ``meta`` device, which every machine has)."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4)).to("meta")
    modifier = loads("modifiers:\n  - !QuantizationModifier {start_epoch: 0}\n").modifiers[0]
    audit = PlacementAudit()
    with audit:
        QuantizationState.start(model, modifier)
    assert not audit.problems(), audit.problems()
    assert {b.device.type for b in model[0].buffers()} == {"meta"}


def test_audit_sees_an_implicit_transfer() -> None:
    """The audit's other half, seen on any machine: one operation over tensors on two devices
    (a 0-dim CPU tensor beside a ``meta`` one, which torch accepts as it does beside CUDA)."""
    audit = PlacementAudit(roots=(__file__,))
    with audit:
        torch.ones(3, device="meta") * torch.ones((), device="cpu")
        torch.ones(3, device="cpu").to("meta")  # an explicit move is fine
    assert audit.mixed and "meta" in audit.mixed[0] and len(audit.mixed) == 1, audit.mixed


# -- mixed precision -------------------------------------------------------------------------------
def _amp(device: str, nan_at: int | None) -> tuple[dict[str, torch.Tensor], int, list[float]]:
    """GMP under autocast (CUDA: float16, CPU: bfloat16) with a GradScaler; the batch at
    ``nan_at`` holds a NaN, so the scaler skips that step."""
    model = net(device, torch.float32)
    data = batches(3 * S + 1, device, torch.float32)
    if nan_at is None:
        data = data[:3] + data[4:]  # the same batches without the one that fails
    else:
        data[nan_at][0][0, 0, 0, 0] = float("nan")
    half = torch.float16 if device == "cuda" else torch.bfloat16
    with placement_checked():
        manager = ScheduledModifierManager.from_yaml(gmp())
        opt = manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.05), S)
        scaler = manager.wrap_scaler(torch.amp.GradScaler(device, init_scale=2.0**10))
        scales = []
        for x, y in data:
            opt.zero_grad()
            with torch.autocast(device, dtype=half, enabled=manager.autocast_enabled()):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(float(scaler.get_scale()))
        steps = manager.runtime.step_count
        manager.finalize(model)
    return {n: p.detach().cpu() for n, p in model.named_parameters()}, steps, scales


@pytest.mark.parametrize("device", DEVICES)
def test_mixed_precision_skipped_step(device: str) -> None:
    """A step the scaler skips does not advance the schedule: the run ends as if its batch had
    not been drawn (the scale changes by powers of two, so the weights agree closely)."""
    weights, steps, scales = _amp(device, nan_at=3)
    assert steps == 3 * S and scales[3] == scales[2] / 2  # the NaN batch: skipped, scale halved
    ref, ref_steps, _ = _amp(device, nan_at=None)
    assert ref_steps == steps
    assert_same(ref, weights, rtol=1e-5 if device == "cpu" else 1e-3, atol=1e-6 if device == "cpu" else 1e-5)
    for name in PRUNED:
        assert int((weights[name] == 0).sum()) == round(0.75 * weights[name].numel())
