"""``llmcompressor.modifiers.transform.awq``'s modifier classes under the same path: plain data turned into a recipe by
:func:`recipe_spec.oneshot` (:mod:`recipe_spec.modifiers.objects`)."""

from ..objects import AWQMapping, AWQModifier

__all__ = ['AWQMapping', 'AWQModifier']
