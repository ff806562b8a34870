"""recipe_spec.integrations.transformers: a recipe run by transformers.Trainer (tiny BERT, CPU)."""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import torch  # noqa: E402
from integration_common import imported_by_recipe_spec, recipe_lr, run_doc_blocks  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from recipe_spec.integrations.transformers import STATE_FILE, RecipeCallback  # noqa: E402
from recipe_spec.schedule import compile_plan  # noqa: E402

RECIPE = """
modifiers:
  - !GMPruningModifier
    params: ["re:.*query.weight"]
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
SAMPLES, BATCH = 16, 4  # 4 batches per epoch; the recipe runs 3 epochs (12 steps)


def make_model() -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    return BertForSequenceClassification(config)


def make_data() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        {"input_ids": torch.randint(0, 50, (8,), generator=g),
         "attention_mask": torch.ones(8, dtype=torch.long),
         "labels": torch.randint(0, 2, (), generator=g)}
        for _ in range(SAMPLES)
    ]


class SparsityProbe(TrainerCallback):
    """Records (global_step, zeros in the first targeted weight) after every optimizer step."""

    def __init__(self) -> None:
        self.zeros: list[tuple[int, int, int]] = []

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        w = next(p for n, p in model.named_parameters() if n.endswith("query.weight"))
        self.zeros.append((state.global_step, int((w == 0).sum()), w.numel()))


def train(tmp: Path, accumulation: int = 1, epochs: float | None = None, max_steps: int = -1,
          save_steps: int | None = None, resume: str | None = None,
          scheduler: str = "constant") -> tuple[Trainer, RecipeCallback, BertForSequenceClassification]:
    callback = RecipeCallback(RECIPE)
    args = TrainingArguments(
        output_dir=str(tmp), per_device_train_batch_size=BATCH,
        num_train_epochs=epochs if epochs is not None else callback.max_epochs,
        max_steps=max_steps, gradient_accumulation_steps=accumulation, logging_steps=1,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
        report_to=[], use_cpu=True, disable_tqdm=True, lr_scheduler_type=scheduler,
        learning_rate=0.05, seed=0,
    )
    model = make_model()
    probe = SparsityProbe()
    trainer = Trainer(model=model, args=args, train_dataset=make_data(), callbacks=[callback, probe])
    trainer.train(resume_from_checkpoint=resume)
    trainer.probe = probe  # type: ignore[attr-defined]
    return trainer, callback, model


def check_mask_timing(trainer: Trainer, plan: Any) -> None:
    """The zeros after optimizer step s - 1 (global_step s) follow the plan's last sparsity
    target at or before that step (0 before the first update)."""
    for step, zeros, numel in trainer.probe.zeros:  # type: ignore[attr-defined]
        target = 0.0
        for k in range(step):
            for event in plan.events_at(k):
                if event.target == "sparsity":
                    target = float(event.value)
        assert abs(zeros - target * numel) <= 1, (step, zeros, target)


def targeted(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith("query.weight")}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trainer, RecipeCallback, Any]:
    return train(tmp_path_factory.mktemp("full"))


def test_masks_and_steps(uninterrupted: tuple[Trainer, RecipeCallback, Any]) -> None:
    trainer, callback, model = uninterrupted
    spe = math.ceil(SAMPLES / BATCH)
    assert callback.steps_per_epoch == spe
    assert trainer.state.global_step == callback.max_epochs * spe
    assert callback.manager.runtime.step_count == trainer.state.global_step
    weights = targeted(model)
    assert weights
    for name, w in weights.items():
        assert int((w == 0).sum()) == round(0.5 * w.numel()), name
    check_mask_timing(trainer, compile_plan(callback.manager.recipe, spe))


def test_logged_lr_is_the_recipes(uninterrupted: tuple[Trainer, RecipeCallback, Any]) -> None:
    # Trainer reads the rate for its log right after optimizer.step() of the step that
    # global_step then counts: the entry logged at "step": s holds the rate optimizer step s - 1
    # (0-based) ran with, which the recipe set in that step's pre-step hook.
    trainer, callback, _ = uninterrupted
    plan = compile_plan(callback.manager.recipe, callback.steps_per_epoch)
    logged = [(e["step"], e["learning_rate"]) for e in trainer.state.log_history if "learning_rate" in e]
    assert len(logged) == trainer.state.global_step
    for step, lr in logged:
        assert lr == pytest.approx(recipe_lr(plan, step - 1), rel=1e-12), step
    assert logged[0][1] == pytest.approx(0.01)


def test_gradient_accumulation_counts_optimizer_steps(tmp_path: Path) -> None:
    trainer, callback, model = train(tmp_path, accumulation=2)
    spe = math.ceil(math.ceil(SAMPLES / BATCH) / 2)
    assert callback.steps_per_epoch == spe
    assert trainer.state.global_step == callback.max_epochs * spe
    assert callback.manager.runtime.step_count == trainer.state.global_step
    plan = compile_plan(callback.manager.recipe, spe)
    for step, lr in [(e["step"], e["learning_rate"]) for e in trainer.state.log_history if "learning_rate" in e]:
        assert lr == pytest.approx(recipe_lr(plan, step - 1), rel=1e-12)
    check_mask_timing(trainer, plan)  # the same epochs as without accumulation
    for name, w in targeted(model).items():
        assert int((w == 0).sum()) == round(0.5 * w.numel()), name


def test_resume_from_checkpoint_matches(tmp_path: Path,
                                        uninterrupted: tuple[Trainer, RecipeCallback, Any]) -> None:
    full_trainer, full_callback, full_model = uninterrupted
    stop = 6  # mid-pruning (final sparsity at step 8), mid-epoch (4 steps per epoch)
    train(tmp_path, max_steps=stop, save_steps=stop)
    checkpoint = tmp_path / f"checkpoint-{stop}"
    saved = torch.load(checkpoint / STATE_FILE, weights_only=False)
    assert saved["step"] == stop
    assert saved["masks"]  # the pruning had started
    trainer, callback, model = train(tmp_path, resume=str(checkpoint))
    assert trainer.state.global_step == full_trainer.state.global_step
    assert callback.manager.runtime.step_count == full_callback.manager.runtime.step_count
    resumed, full = targeted(model), targeted(full_model)
    for name in full:
        assert torch.equal(resumed[name] == 0, full[name] == 0), name


def test_resume_without_recipe_state_is_refused(tmp_path: Path) -> None:
    stop = 4
    train(tmp_path, max_steps=stop, save_steps=stop)
    os.remove(tmp_path / f"checkpoint-{stop}" / STATE_FILE)
    with pytest.raises(FileNotFoundError, match="no recipe state"):
        train(tmp_path, resume=str(tmp_path / f"checkpoint-{stop}"))


def test_scheduler_replaced_with_warning(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer, callback, _ = train(tmp_path, scheduler="linear", max_steps=3)
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert sum("lr_scheduler_type='linear'" in m for m in messages) == 1
    plan = compile_plan(callback.manager.recipe, callback.steps_per_epoch)
    for step, lr in [(e["step"], e["learning_rate"]) for e in trainer.state.log_history if "learning_rate" in e]:
        assert lr == pytest.approx(recipe_lr(plan, step - 1), rel=1e-12)
    # the scheduler has its own class back after training
    assert type(trainer.lr_scheduler).__name__ == "LambdaLR"


def test_import_recipe_spec_does_not_import_transformers() -> None:
    assert imported_by_recipe_spec("transformers") is False


def test_docs_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The transformers examples of docs/integrations.md run as written, one after the other."""
    monkeypatch.chdir(tmp_path)
    run_doc_blocks('Hugging Face `Trainer`', 'transformers')
