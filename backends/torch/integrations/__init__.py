"""The training frameworks' own loops on PyTorch: ``RecipeCallback`` for Hugging Face
``transformers.Trainer`` (:mod:`.transformers`) and for ``lightning.pytorch.Trainer``
(:mod:`.lightning`), reached as :mod:`recipe_spec.integrations.transformers` and
:mod:`recipe_spec.integrations.lightning`. Each module imports its framework when it is
imported itself."""
