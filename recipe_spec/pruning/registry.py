"""Every pruner, registered by the ``scores`` word of the modifiers it runs
(:attr:`recipe_spec.modifiers.spec.ModifierSpec.scores`): a modifier with new scores is one
more entry here and one pruner file, never a branch in the runtime. A backend runs a modifier
with ``scores=X`` only when it declares the capability ``scores:X`` (B001 otherwise)."""

from __future__ import annotations

from collections.abc import Callable

from . import movement
from .base import Pruner, PrunerContext
from .magnitude import MagnitudePruner
from .second_order import build as second_order

__all__ = ["PRUNERS"]

#: scores word -> the pruner of a modifier with those scores.
PRUNERS: dict[str, Callable[[PrunerContext], Pruner]] = {
    "magnitude": MagnitudePruner,
    "movement": movement.build,
    "mfac": second_order.build,
    "obs": second_order.build,
}
