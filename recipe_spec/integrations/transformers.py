"""Run a recipe inside Hugging Face ``transformers.Trainer``: ``RecipeCallback``.

::

    from recipe_spec.integrations.transformers import RecipeCallback

The callback is PyTorch's and lives with the PyTorch backend
(:mod:`recipe_spec_torch.integrations.transformers`, which imports ``torch`` and
``transformers``); this name imports it. ``import recipe_spec`` never does.
"""

from __future__ import annotations

from recipe_spec_torch.integrations.transformers import (
    STATE_FILE,
    RecipeCallback,
    release_scheduler,
    steps_per_epoch,
    take_over_scheduler,
    unwrap_optimizer,
)

__all__ = [
    "RecipeCallback", "STATE_FILE", "steps_per_epoch", "unwrap_optimizer",
    "take_over_scheduler", "release_scheduler",
]
