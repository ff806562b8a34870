"""Second-order pruning on a CUDA device (run where a GPU is available; skipped otherwise):
the inverse Fisher built on the GPU equals the CPU's (float64), and M-FAC computed on
``available_devices: [cuda:0]`` prunes the same weights as on the CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from recipe_spec_torch import fisher_inverse  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402

RECIPE = """
modifiers:
  - !MFACPruningModifier
    params: [fc1.weight, fc2.weight]
    init_sparsity: 0.3
    final_sparsity: 0.6
    start_epoch: 1.0
    end_epoch: 3.0
    update_frequency: 1.0
    num_grads: 4
    damp: 1.0e-3
    fisher_block_size: 16
    available_devices: [{device}]
"""


@pytest.mark.cuda
@pytest.mark.parametrize("block", [None, 7, 64])
def test_cuda_inverse_equals_cpu(block: int | None) -> None:
    g = torch.randn(16, 100, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    v = torch.randn(100, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    cpu = fisher_inverse(g, 1e-3, block)
    gpu = fisher_inverse(g.cuda(), 1e-3, block)
    torch.testing.assert_close(gpu.diag().cpu(), cpu.diag(), rtol=1e-10, atol=0)
    torch.testing.assert_close(gpu.mul(v.cuda()).cpu(), cpu.mul(v), rtol=1e-10, atol=1e-12)
    split = fisher_inverse(g, 1e-3, block, devices=["cuda:0", "cpu"])  # blocks split over devices
    torch.testing.assert_close(split.diag(), cpu.diag(), rtol=1e-10, atol=0)


def _run(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("fc1", torch.nn.Linear(8, 8))
    model.add_module("relu", torch.nn.ReLU())
    model.add_module("fc2", torch.nn.Linear(8, 4))
    model = model.double()
    manager = ScheduledModifierManager.from_yaml(RECIPE.format(device=device))
    opt = manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.05), steps_per_epoch=4)
    gen = torch.Generator().manual_seed(2)
    for _ in range(16):
        opt.zero_grad()
        x, y = torch.randn(4, 8, generator=gen, dtype=torch.float64), torch.randn(4, 4, generator=gen, dtype=torch.float64)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    manager.finalize(model)
    return model


@pytest.mark.cuda
def test_mfac_on_cuda_prunes_as_on_cpu() -> None:
    cpu, gpu = _run("cpu"), _run("cuda:0")
    for a, b in ((cpu.fc1.weight, gpu.fc1.weight), (cpu.fc2.weight, gpu.fc2.weight)):
        assert torch.equal(a == 0, b == 0)
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def _train_on(model_device: str, grads_device: str) -> torch.nn.Module:
    """Training-time M-FAC (three pruning steps) with the model on ``model_device`` and the
    gradient window on ``grads_device``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).double().to(model_device)
    recipe = RECIPE.format(device="cpu").replace("params: [fc1.weight, fc2.weight]", "params: [0.weight, 2.weight]")
    recipe += f"    grads_device: {grads_device}\n"
    manager = ScheduledModifierManager.from_yaml(recipe)
    opt = manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.05), steps_per_epoch=4)
    gen = torch.Generator().manual_seed(2)
    for _ in range(16):
        opt.zero_grad()
        x = torch.randn(4, 8, generator=gen, dtype=torch.float64).to(model_device)
        y = torch.randn(4, 4, generator=gen, dtype=torch.float64).to(model_device)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    manager.finalize(model)
    return model.cpu()


@pytest.mark.cuda
@pytest.mark.parametrize(("model_device", "grads_device"), [("cuda:0", "cpu"), ("cpu", "cuda:0"), ("cuda:0", "cuda:0")])
def test_mfac_training_with_gradients_on_another_device(model_device: str, grads_device: str) -> None:
    """The window keeps its rows on ``grads_device`` while masks and gradients live with the
    weights: every pruning step moves what it compares (the bug: the second step failed)."""
    reference = _train_on("cpu", "cpu")
    other = _train_on(model_device, grads_device)
    for a, b in zip(reference.parameters(), other.parameters(), strict=True):
        assert torch.equal(a == 0, b == 0)
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
