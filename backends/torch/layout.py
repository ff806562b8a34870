"""Where a PyTorch parameter keeps the canonical axes ``(out, in, spatial...)``: where they are
already (the canonical order is PyTorch's own), for every layer type.

>>> canonical_axes("Linear", 2), canonical_axes("Conv2d", 4)
((0, 1), (0, 1, 2, 3))
"""

from __future__ import annotations

__all__ = ["canonical_axes"]


def canonical_axes(layer_type: str, ndim: int) -> tuple[int, ...]:
    """The identity: PyTorch stores weights in the canonical order."""
    return tuple(range(ndim))
