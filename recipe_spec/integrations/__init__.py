"""Callbacks that run a recipe inside a training framework's own loop.

- :mod:`recipe_spec.integrations.transformers`: ``RecipeCallback`` for Hugging Face
  ``transformers.Trainer``;
- :mod:`recipe_spec.integrations.lightning`: ``RecipeCallback`` for ``lightning.pytorch.Trainer``.

Each module imports its framework when it is imported itself; ``import recipe_spec`` and
``import recipe_spec.integrations`` import neither. The schedule counts optimizer steps (with
gradient accumulation, one step per accumulated batch group), the recipe's learning-rate
modifiers take over from the trainer's scheduler, and the recipe's state travels with the
trainer's checkpoints. See ``docs/integrations.md``.
"""
