"""The optimizer wrapper that drives the schedule, and setters for param-group values.

``manager.modify(model, optimizer, steps_per_epoch)`` returns a :class:`RecipeOptimizer`: it
behaves as the wrapped optimizer (every attribute is forwarded), and its ``step()`` applies the
recipe's events for the step, steps the optimizer, then re-applies the masks. Mixed precision:
``GradScaler.step(optimizer)`` calls this ``step()`` when the gradients are finite, so the
schedule advances exactly when the weights do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .manager import TorchManager

__all__ = ["RecipeOptimizer", "set_group_value", "reset_momentum", "FIRST_MOMENTS"]

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


class RecipeOptimizer:
    """An optimizer whose ``step()`` also runs the recipe (see the module docstring)."""

    def __init__(self, optimizer: torch.optim.Optimizer, manager: TorchManager):
        self.__dict__["optimizer"] = optimizer
        self.__dict__["manager"] = manager

    def step(self, closure: Any = None) -> Any:
        self.manager.before_step()
        result = self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        self.manager.after_step()
        return result

    def emulated_step(self) -> None:
        """Advance the schedule one step without stepping the optimizer (gradient accumulation
        or a skipped batch): the events of the step still apply."""
        self.manager.before_step()
        self.manager.after_step()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.optimizer, name, value)

    def __repr__(self) -> str:
        return f"RecipeOptimizer({self.optimizer!r})"

    # torch.optim.Optimizer API used by schedulers, GradScaler and checkpoints
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:
        return self.optimizer.state

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)
