"""Schedule maths: one definition of time for every backend.

Pure functions of plain Python numbers (no framework):

- :mod:`.clock`: optimizer steps and epochs, the first step at an epoch, the update grid;
- :mod:`.curves`: gradual interpolation (linear, cubic, inverse_cubic) and learning-rate
  classes and functions;
- :mod:`.epochs`: ``max_epochs`` / ``min_epochs`` and stage composition;
- :mod:`.plan`: a recipe compiled for a ``steps_per_epoch`` into a :class:`~.plan.Plan` that
  says, for any optimizer step, which modifier does what, and to which value.

Backends only sample the plan, so PyTorch and Keras cannot disagree.
"""

from __future__ import annotations

from .clock import epoch_of_step, first_step_at
from .epochs import max_epochs, min_epochs
from .events import Event
from .plan import Plan, compile_plan

__all__ = ["Event", "Plan", "compile_plan", "epoch_of_step", "first_step_at", "max_epochs", "min_epochs"]
