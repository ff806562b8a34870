"""The PyTorch backend of recipe-spec (package ``recipe_spec_torch``).

Imported only when asked for (``recipe_spec.get_backend("torch")``); PyTorch itself is imported
only when a recipe is compiled for it, never by ``import recipe_spec``.
The torch and keras backends have the same module names, one concept per module.
"""

from __future__ import annotations

from .backend import backend

__all__ = ["backend"]
