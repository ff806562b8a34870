"""A second-order modifier's settings with its declaration's defaults filled in
(:mod:`recipe_spec.modifiers.second_order_args` reads the arguments)."""

from __future__ import annotations

from ...modifiers import spec
from ...modifiers.second_order_args import SecondOrderSettings, defaults_of
from ...modifiers.second_order_args import settings_for as settings_with
from ...modifiers.second_order_args import static_findings as static_with
from ...recipe.findings import Finding
from ...recipe.model import Modifier

__all__ = ["settings_for", "static_findings"]


def _defaults(m: Modifier) -> dict:
    declared = spec(m.type)
    assert declared is not None, m.type
    return defaults_of(declared)


def settings_for(m: Modifier) -> SecondOrderSettings:
    """The settings of an ``MFACPruningModifier`` or ``OBSPruningModifier``."""
    return settings_with(m, _defaults(m))


def static_findings(m: Modifier) -> list[Finding]:
    """What the recipe alone shows cannot run (M009/M012)."""
    return list(static_with(m, _defaults(m)))
