"""What the training-stack callbacks share (``transformers``, ``lightning``): the manager a
callback is given, the torch optimizer under a trainer's wrapper, and the take-over of a
trainer's LR scheduler by the recipe's learning-rate modifiers. Imports torch only."""

from __future__ import annotations

import os
from typing import Any

import torch
from recipe_spec.manager import ScheduledModifierManager
from recipe_spec.recipe import Recipe

__all__ = ["manager_of", "unwrap_optimizer", "take_over_scheduler", "release_scheduler"]


def manager_of(recipe: str | os.PathLike[str] | Recipe | ScheduledModifierManager,
               recipe_variables: Any = None) -> ScheduledModifierManager:
    """The manager of a callback's ``recipe`` (a path, YAML text, a ``Recipe``, or a manager)."""
    if isinstance(recipe, ScheduledModifierManager):
        if recipe_variables is not None:
            raise ValueError("recipe_variables apply when loading a recipe, not to a ScheduledModifierManager")
        return recipe
    return ScheduledModifierManager.from_yaml(recipe, recipe_variables)


def unwrap_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The ``torch.optim.Optimizer`` inside wrappers that keep it as ``.optimizer`` (accelerate's
    ``AcceleratedOptimizer``, Lightning's ``LightningOptimizer``): the one whose step hooks run
    on every real step."""
    current = optimizer
    while True:
        inner = getattr(current, "optimizer", None)
        if inner is None or inner is current or not isinstance(inner, torch.optim.Optimizer):
            break
        current = inner
    if not isinstance(current, torch.optim.Optimizer):
        raise TypeError(
            f"expected a torch.optim.Optimizer (possibly wrapped), got {type(optimizer).__name__}"
        )
    return current


_CONTROLLED: dict[type, type] = {}


def _current_lrs(scheduler: Any) -> list[Any]:
    return [group["lr"] for group in scheduler.optimizer.param_groups]


def _controlled_class(base: type) -> type:
    """A subclass of ``base`` whose ``step()`` leaves the learning rates as they are and whose
    ``get_last_lr()`` reports the optimizer's current ones (the recipe's)."""
    cls = _CONTROLLED.get(base)
    if cls is None:

        def step(self: Any, *args: Any, **kwargs: Any) -> None:
            self._step_count = getattr(self, "_step_count", 0) + 1
            self.last_epoch = getattr(self, "last_epoch", -1) + 1
            self._last_lr = _current_lrs(self)

        cls = type(
            f"RecipeControlled{base.__name__}", (base,),
            {"step": step, "get_lr": _current_lrs, "get_last_lr": _current_lrs, "__module__": __name__,
             "_recipe_original_class": base, "__doc__": f"{base.__name__} driven by a recipe."},
        )
        _CONTROLLED[base] = cls
    return cls


def _inner_scheduler(scheduler: Any) -> Any:
    """The torch scheduler inside accelerate's ``AcceleratedScheduler`` (``.scheduler``)."""
    while not isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler):
        inner = getattr(scheduler, "scheduler", None)
        if inner is None or inner is scheduler:
            break
        scheduler = inner
    return scheduler


def take_over_scheduler(scheduler: Any) -> Any:
    """Make ``scheduler`` (a ``torch.optim.lr_scheduler.LRScheduler``, or a wrapper holding one
    as ``.scheduler``) a no-op that reports the optimizer's current learning rates, in place:
    its ``step()`` changes nothing and ``get_last_lr()`` returns each param group's ``lr``,
    which the recipe's learning-rate modifiers set before every optimizer step. Its
    ``state_dict()`` keeps working (trainers save it). Returns the scheduler changed, for
    :func:`release_scheduler`; None when there is nothing it can take over."""
    inner = _inner_scheduler(scheduler)
    if not isinstance(inner, torch.optim.lr_scheduler.LRScheduler):
        return None
    if getattr(type(inner), "_recipe_original_class", None) is None:
        inner.__class__ = _controlled_class(type(inner))
    return inner


def release_scheduler(scheduler: Any) -> None:
    """Give a scheduler changed by :func:`take_over_scheduler` its own class back."""
    original = getattr(type(scheduler), "_recipe_original_class", None)
    if original is not None:
        scheduler.__class__ = original
