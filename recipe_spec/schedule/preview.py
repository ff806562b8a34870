"""How much of a plan ``recipe-spec schedule`` lists: a preview ends within seconds.

A plan may hold up to :data:`~.events.MAX_EVENTS` event steps per modifier (what a training
run can step through), but a preview that lists millions of rows runs for minutes. So a
preview lists at most :data:`PREVIEW_LIMIT` events; beyond it, :func:`refusal` says which
modifier makes the most of them and which ``--epochs N`` fits.

>>> import recipe_spec
>>> from recipe_spec.schedule import compile_plan
>>> recipe = recipe_spec.loads('''
... modifiers:
...   - !GMPruningModifier {params: [fc.weight], init_sparsity: 0.05, final_sparsity: 0.8,
...                       start_epoch: 0, end_epoch: 900, update_frequency: -1}
... ''')
>>> plan = compile_plan(recipe, steps_per_epoch=1000)
>>> r = refusal(plan, None)
>>> r.modifier.span.line, r.epochs
(3, 400)
>>> refusal(plan, 400) is None
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .report import horizon

if TYPE_CHECKING:
    from ..recipe.model import Modifier
    from .plan import Plan

__all__ = ["PREVIEW_LIMIT", "Refusal", "refusal", "fitting_epochs"]

#: The most events a preview lists (about three seconds at 2 cores).
PREVIEW_LIMIT = 400_000


@dataclass(frozen=True)
class Refusal:
    """A preview too large to list: about ``events`` events, most of them from ``modifier``;
    ``epochs``: an ``--epochs`` value whose preview fits (None when not even a fraction of
    the first epoch does: fewer steps per epoch are needed)."""

    modifier: Modifier
    events: float
    epochs: float | None

    def message(self, steps_per_epoch: int) -> str:
        how = (f"pass --epochs {self.epochs:g} to preview the first {self.epochs:g} epoch(s)"
               if self.epochs is not None else "pass fewer --steps-per-epoch")
        return (f"{self.modifier.type} (line {self.modifier.span.line}): the preview would list about "
                f"{self.events:,.0f} events at {steps_per_epoch} steps per epoch (a preview lists at most "
                f"{PREVIEW_LIMIT:,}); {how}")


def refusal(plan: Plan, epochs: float | None, limit: int = PREVIEW_LIMIT,
            events: float | None = None) -> Refusal | None:
    """Why the preview of ``plan`` (its first ``epochs``, None: all of it) is not listed;
    None when it fits ``limit``. ``events``: the number of events when it is known (counted
    while listing), else the plan's bound is used."""
    stop = None if epochs is None else horizon(plan, epochs)
    bound = plan.events_bound(stop)
    count = bound if events is None else events
    if count <= limit or not plan.tracks:
        return None
    worst = max(plan.tracks, key=lambda t: t.count_bound(plan.steps_per_epoch, stop))
    # where the bound undercounts (several events per step), aim lower by as much
    return Refusal(worst.modifier, count, fitting_epochs(plan, limit * min(1.0, bound / count)))


def fitting_epochs(plan: Plan, limit: float) -> float | None:
    """The largest round number of epochs (two significant digits) whose preview stays
    within ``limit`` events by the plan's bound; None when not even 0.01 epochs does."""
    S = plan.steps_per_epoch
    low, high = 0, max(plan.total_steps, (plan.last_event_step or 0) + 1, 1)
    while low < high:  # the most steps whose bound fits (the bound grows with the steps)
        mid = (low + high + 1) // 2
        if plan.events_bound(mid) <= limit:
            low = mid
        else:
            high = mid - 1
    epochs = low / S
    if epochs < 0.01:
        return None
    digits = 1 - math.floor(math.log10(epochs))  # two significant digits, rounded down
    scale = 10 ** digits
    rounded = math.floor(epochs * scale) / scale
    return int(rounded) if rounded == int(rounded) else rounded
