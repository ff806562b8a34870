"""What a compiled schedule is made of: :class:`Event` (one thing a modifier does at one
optimizer step) and :class:`Track` (the events of one modifier, asked for step by step)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..recipe import Modifier

__all__ = ["Event", "Track", "PlanError"]


class PlanError(ValueError):
    """A modifier's arguments cannot make a schedule (the message says which and why)."""


@dataclass(frozen=True, slots=True)
class Event:
    """One thing a modifier does at one optimizer step.

    ``action``: ``start``, ``update``, ``end`` or ``set``; ``target``: what changes
    (``sparsity``, ``masks``, ``lr``, ``weight_decay``, ``trainable``, ``quantization``,
    ``observers``, ``bn_stats``, ``layers``, ``distillation``); ``value``: the new value;
    ``params``: the parameters (or, for ``lr``/``weight_decay``, the param groups) it applies
    to, as the recipe selects them (None: all).
    """

    step: int
    epoch: float
    modifier: int
    type: str
    line: int
    action: str
    target: str
    value: Any = None
    params: Any = None

    def describe(self) -> str:
        """A short human sentence: ``sparsity -> 0.416``."""
        if isinstance(self.value, float):
            shown = f"{self.value:.6g}"
        else:
            shown = str(self.value)
        return f"{self.target} -> {shown}" if self.value is not None else f"{self.target} {self.action}"


@dataclass
class Track:
    """The events of one modifier.

    ``steps(k)`` gives the first event step at or after ``k`` (None: no more), and
    ``make(k)`` the events at an event step.
    """

    index: int
    modifier: Modifier
    first: int
    last: int | None
    next_step: Callable[[int], int | None]
    make: Callable[[int], list[Event]]
    order: tuple[Any, ...] = ()
