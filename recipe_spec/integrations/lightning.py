"""Run a recipe inside ``lightning.pytorch.Trainer``: ``RecipeCallback``.

::

    from recipe_spec.integrations.lightning import RecipeCallback

The callback is PyTorch's and lives with the PyTorch backend
(:mod:`recipe_spec_torch.integrations.lightning`, which imports ``torch`` and ``lightning``);
this name imports it. ``import recipe_spec`` never does.
"""

from __future__ import annotations

from recipe_spec_torch.integrations.lightning import CHECKPOINT_KEY, RecipeCallback, steps_per_epoch

__all__ = ["RecipeCallback", "CHECKPOINT_KEY", "steps_per_epoch"]
