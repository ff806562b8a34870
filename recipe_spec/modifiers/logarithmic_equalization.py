"""``llmcompressor.modifiers.logarithmic_equalization``'s modifier classes under the same path: plain data turned into a recipe by
:func:`recipe_spec.oneshot` (:mod:`recipe_spec.modifiers.objects`)."""

from .objects import LogarithmicEqualizationModifier

__all__ = ['LogarithmicEqualizationModifier']
