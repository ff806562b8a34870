"""Run a recipe inside ``lightning.pytorch.Trainer``: :class:`RecipeCallback`.

::

    from recipe_spec.integrations.lightning import RecipeCallback

    callback = RecipeCallback("recipe.yaml")
    trainer = lightning.pytorch.Trainer(max_epochs=callback.max_epochs, callbacks=[callback])
    trainer.fit(module, train_loader)

At ``on_train_start`` (after Lightning restored a checkpoint's loops and optimizer) the callback
attaches the recipe to the LightningModule and to ``trainer.optimizers[0]``
(``manager.modify``). The schedule counts optimizer steps, as ``trainer.global_step`` does:
``steps_per_epoch = ceil(num_training_batches / accumulate_grad_batches)``, the count behind
Lightning's ``estimated_stepping_batches``. Each step's events apply in
``on_before_optimizer_step``, after the step's backward pass (Lightning runs the forward and
backward closure inside ``optimizer.step()``), then the optimizer steps, the masks are applied
again and the schedule advances. With a ``GradScaler`` (``precision="16-mixed"``) the events
apply in the optimizer's step pre-hook, which runs only when the scaler steps: a step skipped
for non-finite gradients applies no event and leaves the schedule where it was. With learning-rate modifiers in the recipe, the configured LR
schedulers are made no-ops (a ``UserWarning`` says so). The recipe's state is saved in
Lightning checkpoints as ``checkpoint["recipe_state"]`` and restored by ``trainer.fit(...,
ckpt_path=...)``; ``on_train_end`` finalizes.

This module imports ``lightning``; ``import recipe_spec`` never does.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import torch

try:
    import lightning.pytorch as pl
except ImportError as exc:  # pragma: no cover - depends on the environment
    from ..diagnostics.packages import MissingPackageError

    raise MissingPackageError("lightning", "recipe_spec.integrations.lightning") from exc

from recipe_spec.manager import ScheduledModifierManager
from recipe_spec.recipe import Recipe

from .common import manager_of, release_scheduler, take_over_scheduler, unwrap_optimizer

__all__ = ["RecipeCallback", "CHECKPOINT_KEY", "steps_per_epoch"]

#: The key of the recipe's state (``manager.state_dict()``) in a Lightning checkpoint.
CHECKPOINT_KEY = "recipe_state"


def steps_per_epoch(trainer: pl.Trainer) -> int:
    """Optimizer steps per epoch as Lightning counts them:
    ``ceil(num_training_batches / accumulate_grad_batches)`` (the last, shorter group of an
    epoch steps too); for an endless data loader, ``trainer.max_steps``."""
    batches = trainer.num_training_batches
    accumulate = int(trainer.accumulate_grad_batches)
    if batches == float("inf"):
        if trainer.max_steps > 0:
            return int(trainer.max_steps)
        raise ValueError(
            "the training data loader has no length and max_steps is not set: the recipe's "
            "epochs cannot be converted to optimizer steps"
        )
    if not batches:
        raise ValueError("the trainer has no training batches: the recipe cannot be scheduled")
    return max(math.ceil(int(batches) / accumulate), 1)


class RecipeCallback(pl.Callback):
    """Runs a recipe in a ``lightning.pytorch.Trainer``.

    ``recipe``: a path, YAML text, a :class:`recipe_spec.recipe.Recipe` or a
    :class:`recipe_spec.ScheduledModifierManager`; ``recipe_variables`` as
    :meth:`ScheduledModifierManager.from_yaml`. One optimizer (``trainer.optimizers[0]``)
    carries the recipe.

    - Steps are optimizer steps (``trainer.global_step``); the schedule starts at
      ``trainer.global_step``.
    - With learning-rate modifiers in the recipe, the LR schedulers in
      ``trainer.lr_scheduler_configs`` stop changing the rate (a ``UserWarning`` names them):
      the recipe sets it before every optimizer step.
    - ``checkpoint["recipe_state"]`` holds ``manager.state_dict()``; ``trainer.fit(...,
      ckpt_path=...)`` restores it after attaching (same step, same masks).
    - ``on_train_end`` finalizes the recipe.
    """

    def __init__(self, recipe: str | os.PathLike[str] | Recipe | ScheduledModifierManager,
                 recipe_variables: Any = None) -> None:
        super().__init__()
        self.manager = manager_of(recipe, recipe_variables)
        self.steps_per_epoch: int | None = None
        self._pending: dict[str, Any] | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._schedulers: list[Any] = []
        self._active = False
        self._deferred = True

    @property
    def max_epochs(self) -> int:
        """The recipe's length in epochs (``manager.max_epochs``), for ``Trainer(max_epochs=...)``."""
        return self.manager.max_epochs

    # -- Lightning hooks -------------------------------------------------------------------
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Attach the recipe (and restore a checkpoint's recipe state)."""
        if not trainer.optimizers:
            raise RuntimeError("RecipeCallback needs an optimizer: configure_optimizers() returned none")
        if len(trainer.optimizers) > 1:
            warnings.warn(
                f"the LightningModule has {len(trainer.optimizers)} optimizers; the recipe runs on "
                "the first one only", UserWarning, stacklevel=2,
            )
        optimizer = unwrap_optimizer(trainer.optimizers[0])  # a LightningOptimizer, if one is given
        spe = steps_per_epoch(trainer)
        self.steps_per_epoch = spe
        self.manager.modify(pl_module, optimizer, spe, epoch=trainer.global_step / spe)
        # Without a GradScaler, Lightning runs forward and backward inside optimizer.step()
        # (the closure), after the step's pre-hooks: the step's events apply in
        # on_before_optimizer_step instead, once the gradients exist, as in a plain PyTorch
        # loop. With one (precision="16-mixed"), the closure runs first and
        # ``scaler.step(optimizer)`` calls ``step()`` only for finite gradients: the pre-hook
        # applies the events then, so a skipped step applies none.
        self._deferred = getattr(trainer.precision_plugin, "scaler", None) is None
        if self._deferred:
            self.manager.runtime.step_hooks.defer_events()
        self._optimizer = optimizer
        self._active = True
        if self._pending is not None:
            state, self._pending = self._pending, None
            self.manager.load_state_dict(state)
        if self.manager.learning_rate_modifiers:
            self._take_over(trainer)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: Any) -> None:
        """Apply the recipe's events of this step (after backward, before the step)."""
        if not self._active or not self._deferred:
            return
        inner = getattr(optimizer, "optimizer", optimizer)
        if optimizer is self._optimizer or inner is self._optimizer:
            self.manager.runtime.before_step()

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """Store ``manager.state_dict()`` as ``checkpoint["recipe_state"]``."""
        if self._active:
            checkpoint[CHECKPOINT_KEY] = self.manager.state_dict()

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """Keep the checkpoint's recipe state; it is loaded once the recipe is attached."""
        state = checkpoint.get(CHECKPOINT_KEY)
        if state is None:
            warnings.warn(
                "the checkpoint has no recipe state (it was saved without RecipeCallback): the "
                "recipe restarts its masks at the checkpoint's step",
                UserWarning, stacklevel=2,
            )
        self._pending = state

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Finalize: apply the masks a last time and take the recipe off the optimizer."""
        if self._active:
            self.manager.finalize(pl_module)
            self._active = False
        for scheduler in self._schedulers:
            release_scheduler(scheduler)
        self._schedulers = []

    # -- helpers ---------------------------------------------------------------------------
    def _take_over(self, trainer: pl.Trainer) -> None:
        configs = list(getattr(trainer, "lr_scheduler_configs", []) or [])
        if not configs:
            return
        names = ", ".join(type(c.scheduler).__name__ for c in configs)
        warnings.warn(
            f"the recipe's learning-rate modifiers replace the configured LR scheduler(s) ({names}): "
            "the learning rate is the recipe's at every step",
            UserWarning, stacklevel=3,
        )
        for config in configs:
            taken = take_over_scheduler(config.scheduler)
            if taken is None:
                warnings.warn(
                    f"RecipeCallback cannot take over the scheduler {type(config.scheduler).__name__}: it "
                    "may change the learning rate the recipe sets", UserWarning, stacklevel=3,
                )
                continue
            self._schedulers.append(taken)
