"""``llmcompressor.modifiers.obcq``'s modifier classes under the same path: plain data turned into a recipe by
:func:`recipe_spec.oneshot` (:mod:`recipe_spec.modifiers.objects`)."""

from .objects import SparseGPTModifier

__all__ = ['SparseGPTModifier']
