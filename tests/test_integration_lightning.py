"""recipe_spec.integrations.lightning: a recipe run by lightning.pytorch.Trainer (tiny MLP, CPU)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning")

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402
from integration_common import imported_by_recipe_spec, recipe_lr, run_doc_blocks  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from recipe_spec.integrations.lightning import CHECKPOINT_KEY, RecipeCallback  # noqa: E402
from recipe_spec.schedule import compile_plan  # noqa: E402

RECIPE = """
modifiers:
  - !GMPruningModifier
    params: ["re:.*fc1.weight"]
    init_sparsity: 0.0
    final_sparsity: 0.5
    start_epoch: 0.0
    end_epoch: 2.0
    update_frequency: 0.5
  - !LearningRateFunctionModifier
    start_epoch: 0.0
    end_epoch: 3.0
    lr_func: linear
    init_lr: 0.01
    final_lr: 0.001
"""
SAMPLES, BATCH = 32, 4  # 8 batches per epoch; the recipe runs 3 epochs


class Net(pl.LightningModule):
    """Two Linear layers; records the learning rate of every optimizer step."""

    def __init__(self, scheduler: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 2)
        self.scheduler = scheduler
        self.lrs: list[tuple[int, float]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        step = self.trainer.global_step
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        self.lrs.append((step, optimizer.param_groups[0]["lr"]))  # the rate this step ran with

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        if not self.scheduler:
            return opt
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(SAMPLES, 8, generator=g), torch.randint(0, 2, (SAMPLES,), generator=g))
    return DataLoader(data, batch_size=BATCH, shuffle=False)


def fit(tmp: Path, accumulation: int = 1, epochs: int | None = None, ckpt_path: str | None = None,
        checkpointing: bool = False, scheduler: bool = False) -> tuple[pl.Trainer, RecipeCallback, Net]:
    callback = RecipeCallback(RECIPE)
    callbacks: list[Any] = [callback]
    if checkpointing:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=str(tmp), save_top_k=-1,
                                                      every_n_epochs=1, save_last=False))
    trainer = pl.Trainer(
        max_epochs=epochs if epochs is not None else callback.max_epochs, accelerator="cpu",
        logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=checkpointing, accumulate_grad_batches=accumulation,
        callbacks=callbacks, default_root_dir=str(tmp),
    )
    net = Net(scheduler)
    trainer.fit(net, loader(), ckpt_path=ckpt_path)
    return trainer, callback, net


def check_run(trainer: pl.Trainer, callback: RecipeCallback, net: Net, spe: int) -> None:
    assert callback.steps_per_epoch == spe
    assert trainer.global_step == callback.max_epochs * spe
    assert callback.manager.runtime.step_count == trainer.global_step
    zeros = int((net.fc1.weight == 0).sum())
    assert zeros == round(0.5 * net.fc1.weight.numel())
    plan = compile_plan(callback.manager.recipe, spe)
    assert [s for s, _ in net.lrs] == list(range(len(net.lrs)))
    for step, lr in net.lrs:
        assert lr == pytest.approx(recipe_lr(plan, step), rel=1e-12), step


def test_masks_steps_and_lr(tmp_path: Path) -> None:
    trainer, callback, net = fit(tmp_path)
    check_run(trainer, callback, net, math.ceil(SAMPLES / BATCH))


def test_gradient_accumulation_counts_optimizer_steps(tmp_path: Path) -> None:
    trainer, callback, net = fit(tmp_path, accumulation=3)  # 8 batches: steps of 3, 3, 2
    check_run(trainer, callback, net, math.ceil(SAMPLES / BATCH / 3))


def test_scheduler_replaced_with_warning(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer, callback, net = fit(tmp_path, scheduler=True)
    assert any("StepLR" in str(w.message) and "replace" in str(w.message) for w in caught)
    check_run(trainer, callback, net, math.ceil(SAMPLES / BATCH))
    assert type(trainer.lr_scheduler_configs[0].scheduler) is torch.optim.lr_scheduler.StepLR


def test_resume_from_checkpoint_matches(tmp_path: Path) -> None:
    _, full_callback, full = fit(tmp_path / "full")
    fit(tmp_path / "part", epochs=1, checkpointing=True)  # stops mid-pruning (ends at epoch 2)
    ckpts = sorted((tmp_path / "part").glob("*.ckpt"))
    assert len(ckpts) == 1
    saved = torch.load(ckpts[0], weights_only=False)[CHECKPOINT_KEY]
    assert saved["step"] == 8 and saved["masks"]
    trainer, callback, resumed = fit(tmp_path / "resumed", ckpt_path=str(ckpts[0]))
    assert trainer.global_step == 24
    assert callback.manager.runtime.step_count == full_callback.manager.runtime.step_count
    assert torch.equal(resumed.fc1.weight == 0, full.fc1.weight == 0)
    assert torch.allclose(resumed.fc1.weight, full.fc1.weight, atol=1e-6)


def test_import_recipe_spec_does_not_import_lightning() -> None:
    assert imported_by_recipe_spec("lightning") is False


def test_docs_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lightning examples of docs/integrations.md run as written, one after the other."""
    monkeypatch.chdir(tmp_path)
    run_doc_blocks('Lightning', 'lightning')


INF_BATCHES = {3, 12}  # global batch indices whose loss is made infinite (the scaler skips them)


class InfNet(Net):
    """Net whose loss is infinite on the batches of :data:`INF_BATCHES`."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.seen += 1
        return loss * float("inf") if self.seen - 1 in INF_BATCHES else loss


def plain_fp16_loop(spe: int, epochs: int) -> tuple[torch.nn.Module, int, int]:
    """The same recipe, data, autocast and scaler in a plain PyTorch loop (the reference)."""
    from recipe_spec import ScheduledModifierManager

    net = InfNet()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    opt = manager.modify(net, opt, spe)
    scaler = torch.amp.GradScaler("cpu")
    applied = count_events(manager)
    for _ in range(epochs):
        for i, (x, y) in enumerate(loader()):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = net.training_step((x, y), i)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    manager.finalize(net)
    return net, manager.runtime.step_count, applied[0]


def count_events(manager: Any) -> list[int]:
    """Counts the calls of the runtime's ``apply_events`` (one per applied step)."""
    runtime = manager.runtime
    original, calls = runtime.apply_events, [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    runtime.apply_events = counted
    return calls


def test_fp16_scaler_skipped_steps_apply_no_events(tmp_path: Path) -> None:
    """precision="16-mixed" with a GradScaler: a step skipped for an infinite loss applies no
    event and does not advance the schedule, exactly as in a plain loop with the same scaler."""
    from lightning.pytorch.plugins.precision import MixedPrecision

    callback = RecipeCallback(RECIPE)
    applied: list[list[int]] = []

    class Count(pl.Callback):
        def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            applied.append(count_events(callback.manager))

    trainer = pl.Trainer(
        max_epochs=callback.max_epochs, accelerator="cpu", logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, callbacks=[callback, Count()],
        plugins=[MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))],
        default_root_dir=str(tmp_path),
    )
    net = InfNet()
    trainer.fit(net, loader())
    spe = math.ceil(SAMPLES / BATCH)
    real_steps = callback.max_epochs * spe - len(INF_BATCHES)
    assert callback.manager.runtime.step_count == real_steps
    assert applied[0][0] == real_steps  # events applied once per real step, none on skipped ones
    reference, ref_steps, ref_applied = plain_fp16_loop(spe, callback.max_epochs)
    assert (ref_steps, ref_applied) == (real_steps, real_steps)
    assert int((net.fc1.weight == 0).sum()) == round(0.5 * net.fc1.weight.numel())
    assert torch.equal(net.fc1.weight == 0, reference.fc1.weight == 0)
    assert torch.allclose(net.fc1.weight, reference.fc1.weight, atol=1e-6)
    assert torch.allclose(net.fc2.weight, reference.fc2.weight, atol=1e-6)
