"""Run a recipe inside Hugging Face ``transformers.Trainer``: ``RecipeCallback``.

::

    from recipe_spec.integrations.transformers import RecipeCallback

The callback is PyTorch's and lives with the backend that declares
``integration:transformers`` (the PyTorch one, :mod:`recipe_spec_torch.integrations`), which
imports ``torch`` and ``transformers``; this name imports it. ``import recipe_spec`` never does.
"""

from __future__ import annotations

from typing import Any

from ..registry import backend_with

__all__ = ["RecipeCallback", "STATE_FILE", "steps_per_epoch", "unwrap_optimizer",
           "take_over_scheduler", "release_scheduler"]

_HOME: Any = backend_with("integration:transformers").integration("transformers")
RecipeCallback = _HOME.RecipeCallback
STATE_FILE = _HOME.STATE_FILE
steps_per_epoch = _HOME.steps_per_epoch
unwrap_optimizer = _HOME.unwrap_optimizer
take_over_scheduler = _HOME.take_over_scheduler
release_scheduler = _HOME.release_scheduler
