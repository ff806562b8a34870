"""Run a recipe inside ``lightning.pytorch.Trainer``: ``RecipeCallback``.

::

    from recipe_spec.integrations.lightning import RecipeCallback

The callback is PyTorch's and lives with the backend that declares ``integration:lightning``
(the PyTorch one, :mod:`recipe_spec_torch.integrations`), which imports ``torch`` and
``lightning``; this name imports it. ``import recipe_spec`` never does.
"""

from __future__ import annotations

from typing import Any

from ..registry import backend_with

__all__ = ["RecipeCallback", "CHECKPOINT_KEY", "steps_per_epoch"]

_HOME: Any = backend_with("integration:lightning").integration("lightning")
RecipeCallback = _HOME.RecipeCallback
CHECKPOINT_KEY = _HOME.CHECKPOINT_KEY
steps_per_epoch = _HOME.steps_per_epoch
