"""``llmcompressor.modifiers.autoround``'s modifier classes under the same path: plain data turned into a recipe by
:func:`recipe_spec.oneshot` (:mod:`recipe_spec.modifiers.objects`)."""

from .objects import AutoRoundModifier

__all__ = ['AutoRoundModifier']
