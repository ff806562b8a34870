"""The Keras 3 backend of recipe-spec (package ``recipe_spec_keras``).

Imported only when asked for (``recipe_spec.get_backend("keras")``); Keras 3 itself is imported
only when a recipe is compiled for it, never by ``import recipe_spec``.
The torch and keras backends have the same module names, one concept per module.
"""

from __future__ import annotations

from typing import Any

from .backend import backend

__all__ = ["backend", "fisher_inverse"]


def __getattr__(name: str) -> Any:
    """``fisher_inverse`` (second-order pruning's inverse Fisher, :mod:`.second_order`) is
    imported on first use, with the framework."""
    if name == "fisher_inverse":
        from .second_order import fisher_inverse

        return fisher_inverse
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
