"""How an array stored by a framework holds a parameter's *canonical* axes, so that one mask
algorithm (:mod:`recipe_spec.masks`) serves every framework without transposing the weights.

Canonical order is PyTorch's, the order SparseML's rules are written in:

=====================  ==========================  ===========================================
parameter              canonical axes              Keras kernel (native) -> ``axes``
=====================  ==========================  ===========================================
Linear / Dense         ``(out, in)``               ``(in, out)`` -> ``(1, 0)``
ConvND                 ``(out, in, k1, .., kN)``   ``(k1, .., kN, in, out)`` -> ``(N+1, N, 0, .., N-1)``
ConvNDTranspose        ``(in, out, k1, .., kN)``   ``(k1, .., kN, out, in)`` -> ``(N+1, N, 0, .., N-1)``
Embedding, biases,     unchanged                   identity
norms, anything else
=====================  ==========================  ===========================================

So "dimension 0/1" in a mask rule always means canonical ``(out, in)`` (``(in, out)`` for a
transposed convolution, as torch stores it), and "flat order" (the tie rule) always means the
row-major order of the canonical array. A :class:`Layout` is the native shape plus, for each
canonical axis, the native axis that holds it: ``canonical = native.transpose(axes)``. Native
axes missing from ``axes`` must have size 1 (what a reduction with kept dims leaves).

Nothing here touches array values except :meth:`Layout.canonical_positions`, which maps a few
flat positions with integer array operators only (``//``, ``%``, ``*``, ``+``).

>>> lay = Layout((3, 3, 4, 8), (3, 2, 0, 1))  # a Keras Conv2D kernel (kh, kw, in, out)
>>> lay.canonical_shape, lay.is_identity
((8, 4, 3, 3), False)
>>> lay.canonical_positions(5)  # native (0, 0, 0, 5) = canonical (5, 0, 0, 0)
180
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Layout", "strides"]


def strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides, in entries.

    >>> strides((2, 3, 4))
    (12, 4, 1)
    """
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


@dataclass(frozen=True)
class Layout:
    """``shape``: the native shape; ``axes[c]``: the native axis holding canonical axis ``c``."""

    shape: tuple[int, ...]
    axes: tuple[int, ...]

    def __post_init__(self) -> None:
        shape, axes = tuple(int(d) for d in self.shape), tuple(int(a) for a in self.axes)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "axes", axes)
        if len(set(axes)) != len(axes) or not all(0 <= a < len(shape) for a in axes) or any(
            shape[a] != 1 for a in range(len(shape)) if a not in axes
        ):
            raise ValueError(f"axes {list(axes)} do not map the axes of shape {list(shape)}")

    @classmethod
    def identity(cls, shape: Sequence[int]) -> Layout:
        """Canonical = native (every torch weight; Keras embeddings, biases, norms)."""
        return cls(tuple(shape), tuple(range(len(shape))))

    @property
    def canonical_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[a] for a in self.axes)

    @property
    def is_identity(self) -> bool:
        """Whether native and canonical flat orders agree (size-1 axes do not count)."""
        moving = [a for a in self.axes if self.shape[a] != 1]
        return moving == sorted(moving)

    def reorder(self, order: Sequence[int]) -> Layout:
        """The same array seen with canonical axis ``i`` = this layout's axis ``order[i]``
        (how a score array's own canonical order is derived from its weight's)."""
        return Layout(self.shape, tuple(self.axes[c] for c in order))

    def split(self, sizes: dict[int, int]) -> tuple[tuple[int, ...], Layout, dict[int, int]]:
        """Split canonical axis ``c`` into ``(n // s, s)`` for each ``c: s`` in ``sizes``, in the
        native array (a reshape: a view of a contiguous array, no transposition).

        Returns the native shape to reshape to, the layout of what is left once the inner
        parts are reduced to size 1 (canonical axis ``c`` = the outer part), and the native
        index of each inner part.

        >>> Layout((3, 4, 8), (2, 1, 0)).split({1: 2})
        ((3, 2, 2, 8), Layout(shape=(3, 2, 1, 8), axes=(3, 1, 0)), {1: 2})
        """
        by_native = {self.axes[c]: c for c in sizes}
        new_shape: list[int] = []
        reduced: list[int] = []
        outer: dict[int, int] = {}
        inner: dict[int, int] = {}
        for a, d in enumerate(self.shape):
            c = by_native.get(a)
            outer[a] = len(new_shape)
            if c is None:
                new_shape.append(d)
                reduced.append(d)
            else:
                s = sizes[c]
                inner[c] = len(new_shape) + 1
                new_shape += [d // s, s]
                reduced += [d // s, 1]
        left = Layout(tuple(reduced), tuple(outer[a] for a in self.axes))
        return tuple(new_shape), left, inner

    def canonical_positions(self, positions: Any) -> Any:
        """Canonical flat positions of native flat ``positions`` (an int or integer array)."""
        native, canonical = strides(self.shape), strides(self.canonical_shape)
        out = positions * 0
        for c, a in enumerate(self.axes):
            if self.shape[a] != 1:
                out = out + (positions // native[a]) % self.shape[a] * canonical[c]
        return out
