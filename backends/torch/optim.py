"""How the recipe rides the optimizer (:class:`StepHooks`), and setters for param-group values.

``manager.modify(model, optimizer, steps_per_epoch)`` returns ``optimizer`` itself, with the
recipe on its step hooks (``register_step_pre_hook`` / ``register_step_post_hook``): its
``step()`` applies the recipe's events for the step, steps, then re-applies the masks. Mixed
precision: ``GradScaler.step(optimizer)`` calls ``step()`` only when the gradients are finite,
so the schedule advances exactly when the weights do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from recipe_spec.runtime import RecipeRuntime

__all__ = ["StepHooks", "set_group_value", "reset_momentum", "FIRST_MOMENTS"]

#: Optimizer state entries holding a first moment: SGD's (and RMSprop's) momentum, Adam's and
#: AdamW's running mean of gradients.
FIRST_MOMENTS = ("momentum_buffer", "exp_avg")


def set_group_value(optimizer: torch.optim.Optimizer, key: str, value: float, groups: Sequence[int] | None) -> None:
    """Set ``key`` (``lr``, ``weight_decay``) of the listed param groups (None: all)."""
    indexes = range(len(optimizer.param_groups)) if groups is None else list(groups)
    for i in indexes:
        if not 0 <= int(i) < len(optimizer.param_groups):
            raise IndexError(
                f"param_groups lists group {i}, but the optimizer has {len(optimizer.param_groups)} group(s)"
            )
        optimizer.param_groups[int(i)][key] = value


@torch.no_grad()
def reset_momentum(optimizer: torch.optim.Optimizer) -> int:
    """Zero every parameter's first-moment state (:data:`FIRST_MOMENTS`) in ``optimizer``;
    returns how many tensors were zeroed. AC/DC's ``momentum_buffer_reset``."""
    count = 0
    for state in optimizer.state.values():
        for key in FIRST_MOMENTS:
            value = state.get(key)
            if isinstance(value, torch.Tensor):
                value.zero_()
                count += 1
    return count


class StepHooks:
    """The recipe on an optimizer's own step hooks: before every ``optimizer.step()`` the
    step's events apply, after it the masks are enforced again and the step counter advances.

    ``modify()`` installs them and returns the optimizer itself, still a
    ``torch.optim.Optimizer``, so LR schedulers, ``GradScaler``, Hugging Face ``Trainer`` and
    Lightning take it as any other; ``finalize()`` removes them (:meth:`remove`). A step
    ``GradScaler`` skips (non-finite gradients) never calls ``step()``, so the schedule stays
    where it was. A batch that is skipped on purpose (gradient accumulation) advances the
    schedule with :meth:`emulated_step`.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, manager: RecipeRuntime):
        self.check(optimizer)
        self.optimizer, self.manager = optimizer, manager
        self.handles = [
            optimizer.register_step_pre_hook(lambda opt, args, kwargs: manager.before_step()),
            optimizer.register_step_post_hook(lambda opt, args, kwargs: manager.after_step()),
        ]

    @staticmethod
    def check(optimizer: Any) -> None:
        """Refuse what has no step hooks: anything but a ``torch.optim.Optimizer``."""
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                "modify() needs a torch.optim.Optimizer (its step hooks drive the recipe), not "
                f"{type(optimizer).__name__}: pass the optimizer itself, before any wrapper "
                "(accelerate, DeepSpeed) is put around it"
            )

    def defer_events(self) -> None:
        """Take the pre-step hook off: the caller applies each step's events itself
        (``manager.runtime.before_step()``) once the step's gradients exist. For stacks that run
        the forward and backward passes inside ``optimizer.step(closure)``, after its pre-hooks
        (Lightning); the post-step hook stays."""
        if len(self.handles) == 2:
            self.handles.pop(0).remove()

    def emulated_step(self) -> None:
        """Advance the schedule one step without stepping the optimizer: the step's events
        still apply."""
        self.manager.before_step()
        self.manager.after_step()

    def remove(self) -> None:
        """Take the hooks off the optimizer (idempotent)."""
        for handle in self.handles:
            handle.remove()
        self.handles = []
