"""Run a recipe inside Hugging Face ``transformers.Trainer``: :class:`RecipeCallback`.

::

    from recipe_spec.integrations.transformers import RecipeCallback

    callback = RecipeCallback("recipe.yaml")
    args = TrainingArguments(output_dir="out", num_train_epochs=callback.max_epochs, ...)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train()

At ``on_train_begin`` the callback attaches the recipe to the model and to the torch optimizer
inside Trainer's wrapper (``manager.modify``), so every optimizer step applies the recipe's
events for that step. The schedule counts optimizer steps, as Trainer's ``global_step`` does:
``steps_per_epoch`` is Trainer's ``num_update_steps_per_epoch``
(``ceil(len(train_dataloader) / gradient_accumulation_steps)``). When the recipe has
learning-rate modifiers they replace Trainer's scheduler (:func:`take_over_scheduler`). The
recipe's state is saved into each checkpoint folder as ``recipe_state.pt`` and restored when
training resumes; ``on_train_end`` finalizes (the masks are applied a last time and released).

This module imports ``transformers``; ``import recipe_spec`` never does.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import torch

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as exc:  # pragma: no cover - depends on the environment
    from recipe_spec.diagnostics.packages import MissingPackageError

    raise MissingPackageError("transformers", "recipe_spec.integrations.transformers") from exc

from recipe_spec.atomic import replacing
from recipe_spec.manager import ScheduledModifierManager
from recipe_spec.recipe import Recipe

from .common import manager_of, release_scheduler, take_over_scheduler, unwrap_optimizer

__all__ = [
    "RecipeCallback", "STATE_FILE", "steps_per_epoch", "unwrap_optimizer",
    "take_over_scheduler", "release_scheduler",
]

#: The file the callback writes into each checkpoint folder: ``manager.state_dict()``.
STATE_FILE = "recipe_state.pt"


def steps_per_epoch(args: TrainingArguments, train_dataloader: Any) -> int:
    """Optimizer steps per epoch as Trainer counts them (``num_update_steps_per_epoch``):
    ``max(ceil(len(train_dataloader) / gradient_accumulation_steps), 1)``; for a data loader
    without a length, ``args.max_steps`` (Trainer then runs one long "epoch")."""
    try:
        batches = len(train_dataloader)
    except TypeError:
        batches = None
    if batches is None:
        if args.max_steps > 0:
            return int(args.max_steps)
        raise ValueError(
            "the training data loader has no length and args.max_steps is not set: the recipe's "
            "epochs cannot be converted to optimizer steps"
        )
    return max(math.ceil(batches / args.gradient_accumulation_steps), 1)


def _output_dir(args: TrainingArguments) -> str:
    """Trainer's output folder (TrainingArguments fills in ``trainer_output`` when unset)."""
    return os.fspath(args.output_dir) if args.output_dir else "trainer_output"


def _scheduler_setting(args: TrainingArguments) -> str | None:
    """The Trainer setting the recipe's LR modifiers override, or None (constant, no warmup)."""
    kind = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    if str(kind) != "constant":
        return f"lr_scheduler_type={str(kind)!r}"
    warmup_steps = getattr(args, "warmup_steps", 0) or 0
    if warmup_steps:
        return f"warmup_steps={warmup_steps!r}"
    warmup_ratio = getattr(args, "warmup_ratio", 0) or 0
    if warmup_ratio:
        return f"warmup_ratio={warmup_ratio!r}"
    return None


class RecipeCallback(TrainerCallback):
    """Runs a recipe in ``transformers.Trainer``.

    ``recipe``: a path, YAML text, a :class:`recipe_spec.recipe.Recipe` or a
    :class:`recipe_spec.ScheduledModifierManager`; ``recipe_variables`` as
    :meth:`ScheduledModifierManager.from_yaml`. ``resume_from_checkpoint``: the checkpoint
    folder a resumed run starts from when it is not ``output_dir/checkpoint-<global_step>``
    (the folder ``trainer.train(resume_from_checkpoint=...)`` was given).

    - Steps are optimizer steps (Trainer's ``global_step``); the schedule starts at
      ``state.global_step``.
    - With learning-rate modifiers in the recipe, Trainer's scheduler is made a no-op that
      reports the recipe's rate (:func:`take_over_scheduler`): the rate used and the rate logged
      at each step are the recipe's. A non-constant ``lr_scheduler_type`` or a warmup gets a
      ``UserWarning`` saying it is replaced.
    - ``on_save`` writes ``manager.state_dict()`` to ``<checkpoint>/recipe_state.pt``; a run
      resumed from that checkpoint loads it after attaching (same step, same masks).
    - ``on_train_end`` finalizes the recipe.
    """

    def __init__(self, recipe: str | os.PathLike[str] | Recipe | ScheduledModifierManager,
                 recipe_variables: Any = None,
                 resume_from_checkpoint: str | os.PathLike[str] | None = None) -> None:
        self.manager = manager_of(recipe, recipe_variables)
        self.resume_from_checkpoint = resume_from_checkpoint
        self.steps_per_epoch: int | None = None
        self._scheduler: Any = None
        self._warned = False

    @property
    def max_epochs(self) -> int:
        """The recipe's length in epochs (``manager.max_epochs``), for ``num_train_epochs``."""
        return self.manager.max_epochs

    # -- Trainer events --------------------------------------------------------------------
    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: torch.nn.Module | None = None, optimizer: Any = None,
                       lr_scheduler: Any = None, train_dataloader: Any = None,
                       **kwargs: Any) -> None:
        """Attach the recipe (and, on a resumed run, restore its state)."""
        if model is None or optimizer is None or train_dataloader is None:
            raise RuntimeError(
                "RecipeCallback needs the model, optimizer and train_dataloader at on_train_begin; "
                "add it to a transformers.Trainer (callbacks=[...])"
            )
        spe = steps_per_epoch(args, train_dataloader)
        self.steps_per_epoch = spe
        self.manager.modify(model, unwrap_optimizer(optimizer), spe, epoch=state.global_step / spe)
        if state.global_step > 0:
            self._restore(args, state)
        if self.manager.learning_rate_modifiers:
            self._take_over(args, lr_scheduler)

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> None:
        """Write the recipe's state into the checkpoint folder Trainer just wrote."""
        if self.manager.runtime is None or not state.is_world_process_zero:
            return
        folder = os.path.join(_output_dir(args), f"checkpoint-{state.global_step}")
        if not os.path.isdir(folder):
            warnings.warn(
                f"RecipeCallback: no checkpoint folder {folder} to save the recipe state in; a run "
                "resumed from this checkpoint cannot restore the recipe's masks and step",
                UserWarning, stacklevel=2,
            )
            return
        recipe_state = self.manager.state_dict()
        with replacing(os.path.join(folder, STATE_FILE)) as tmp:
            torch.save(recipe_state, tmp)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     model: torch.nn.Module | None = None, **kwargs: Any) -> None:
        """Finalize: apply the masks a last time and take the recipe off the optimizer."""
        if self.manager.runtime is not None:
            self.manager.finalize(model)
        if self._scheduler is not None:
            release_scheduler(self._scheduler)
            self._scheduler = None

    # -- helpers ---------------------------------------------------------------------------
    def state_path(self, args: TrainingArguments, state: TrainerState) -> str:
        """Where a run resumed at ``state.global_step`` reads the recipe's state."""
        if self.resume_from_checkpoint is not None:
            given = os.fspath(self.resume_from_checkpoint)
            return given if os.path.isfile(given) else os.path.join(given, STATE_FILE)
        return os.path.join(_output_dir(args), f"checkpoint-{state.global_step}", STATE_FILE)

    def _restore(self, args: TrainingArguments, state: TrainerState) -> None:
        path = self.state_path(args, state)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"training resumes at step {state.global_step}, but there is no recipe state at "
                f"{path}: resume from a checkpoint saved with RecipeCallback attached, and pass its "
                "folder as RecipeCallback(..., resume_from_checkpoint=...) when it is not "
                "output_dir/checkpoint-<step>"
            )
        self.manager.load_state_dict(torch.load(path, map_location="cpu", weights_only=False))

    def _take_over(self, args: TrainingArguments, lr_scheduler: Any) -> None:
        setting = _scheduler_setting(args)
        if setting is not None and not self._warned:
            self._warned = True
            warnings.warn(
                f"the recipe's learning-rate modifiers replace the Trainer's schedule ({setting}): "
                "the learning rate is the recipe's at every step",
                UserWarning, stacklevel=3,
            )
        if lr_scheduler is None:
            return
        taken = take_over_scheduler(lr_scheduler)
        if taken is None:
            warnings.warn(
                f"RecipeCallback cannot take over the scheduler {type(lr_scheduler).__name__}: it "
                "may change the learning rate the recipe sets",
                UserWarning, stacklevel=3,
            )
        self._scheduler = taken
