"""Masks on Keras variables: bool arrays, enforced before every training step and after every
optimizer step while a pruning modifier holds them.

Keras runs its train step as a compiled graph, so masks are applied by assigning the masked
value to the variable between steps (``variable.assign``), which works in eager, ``tf.function``
and ``jit_compile`` training alike and on every replica of a ``tf.distribute`` strategy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from recipe_spec.runtime import global_mask_type_message, non_finite_message

from .masks import compute_mask, global_unstructured_masks

__all__ = ["MaskedVariable", "MaskSet", "NonFiniteWeightsError"]


class NonFiniteWeightsError(FloatingPointError):
    """A weight holds NaN or infinite values when a mask is computed from it."""


@dataclass(eq=False)
class MaskedVariable:
    name: str
    variable: Any
    layer_type: str
    mask: np.ndarray
    owner: int
    applied_sparsity: float | None = None


def _value(variable: Any) -> np.ndarray:
    import keras

    return np.asarray(keras.ops.convert_to_numpy(variable))


class MaskSet:
    """Every mask of a model, keyed by variable name (the Keras path)."""

    def __init__(self) -> None:
        self.params: dict[str, MaskedVariable] = {}

    def hold(self, name: str, variable: Any, layer_type: str, owner: int, mask: np.ndarray | None = None) -> MaskedVariable:
        entry = self.params.get(name)
        if entry is None:
            initial = np.ones(tuple(variable.shape), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
            entry = MaskedVariable(name, variable, layer_type, initial.copy(), owner)
            self.params[name] = entry
        else:
            entry.owner = owner
            if mask is not None:
                entry.mask[...] = mask
        return entry

    def release(self, names: Any) -> None:
        for name in list(names):
            self.params.pop(name, None)

    def release_all(self) -> None:
        self.params.clear()

    def apply(self) -> None:
        """``variable = variable * mask`` for every held mask."""
        for entry in self.params.values():
            value = _value(entry.variable)
            if not entry.mask.all():
                entry.variable.assign(np.where(entry.mask, value, np.zeros((), value.dtype)))

    def update(self, entries: list[MaskedVariable], sparsity: float, mask_type: Any, global_sparsity: bool, step: int) -> None:
        values = [_value(e.variable) for e in entries]
        for entry, value in zip(entries, values, strict=True):
            if not np.isfinite(value).all():
                raise NonFiniteWeightsError(non_finite_message(entry.name, step, sparsity))
        if global_sparsity and mask_type not in (None, "unstructured"):
            raise ValueError(global_mask_type_message(mask_type))
        if global_sparsity and len(entries) > 1:
            masks = global_unstructured_masks([(v, e.layer_type) for v, e in zip(values, entries, strict=True)], sparsity)
        else:
            masks = [compute_mask(v, sparsity, mask_type, e.layer_type) for v, e in zip(values, entries, strict=True)]
        for entry, value, mask in zip(entries, values, masks, strict=True):
            entry.mask[...] = mask
            entry.applied_sparsity = sparsity
            entry.variable.assign(np.where(mask, value, np.zeros((), value.dtype)))
