"""What a compiled schedule is made of: :class:`Event` (one thing a modifier does at one
optimizer step) and :class:`Track` (the events of one modifier, asked for step by step)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from ..recipe.model import Modifier

__all__ = ["Event", "Track", "PlanError", "MAX_EVENTS"]

#: The most event steps one modifier may have in a plan (and the most update points its
#: epoch grid may have, checked by validation): ten million, far beyond any training run
#: (a million steps at one event per step is a long one), small enough that enumerating a
#: whole plan (``recipe-spec schedule``, one-shot apply) always finishes. A modifier over it
#: is a PlanError (M005 in validation) that says what to change.
MAX_EVENTS = 10_000_000

#: The largest integer a schedule computes with: the largest float (about 1.8e308). Between
#: it and 2**1024 an int still has 1024 bits but no float holds it (``float()`` overflows).
FLOAT_INT_LIMIT = int(sys.float_info.max)


class PlanError(ValueError):
    """A modifier's arguments cannot make a schedule (the message says which and why)."""


class Event(NamedTuple):
    """One thing a modifier does at one optimizer step (immutable; a named tuple, because a
    plan builds one per modifier per event step and this is the cheapest immutable record).

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
    ``make(k)`` the events at an event step. ``fixed``: the number of event steps of a track
    that lists them; otherwise ``spacing``: the fewest epochs between two events (0: one at
    every step), from which :meth:`count_bound` bounds the events without enumerating them.
    """

    index: int
    modifier: Modifier
    first: int
    last: int | None
    next_step: Callable[[int], int | None]
    make: Callable[[int], list[Event]]
    order: tuple[Any, ...] = ()
    spacing: float = 0.0
    fixed: int | None = None
    #: a track with one sparsity event per event step, whose value is ``curve(epoch)`` and
    #: whose other fields are ``row`` = (modifier, type, line, params): the plan builds the
    #: events of many such tracks with one curve at once (per-layer recipes)
    curve: Callable[[float], Any] | None = None
    row: tuple[Any, ...] = ()

    def count_bound(self, steps_per_epoch: int, stop: int | None = None) -> float:
        """An upper bound of the number of this track's event steps before ``stop`` (None: all
        of them; ``inf`` for a track that never ends), in constant time."""
        if self.fixed is not None:
            return self.fixed
        end: float = self.last + 1 if self.last is not None else math.inf
        if stop is not None:
            end = min(end, stop)
        steps = end - self.first
        if steps <= 0:
            return 0
        if steps > FLOAT_INT_LIMIT:
            return math.inf  # (an ``end_epoch`` near 1e308: more steps than a float holds)
        if self.spacing > 0:
            # Grid points spacing*S steps apart, plus the start and end events.
            return min(steps, steps / (self.spacing * steps_per_epoch) + 2)
        return steps
