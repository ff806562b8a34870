"""Where a Keras kernel keeps the canonical (torch-order) axes: ``(out, in, spatial...)``.

>>> canonical_axes("Dense", 2), canonical_axes("Conv2D", 4)
((1, 0), (3, 2, 0, 1))
"""

from __future__ import annotations

import re

__all__ = ["canonical_axes"]

_CONV = re.compile(r"^Conv(?:olution)?([123])D(Transpose)?$")


def canonical_axes(layer_type: str, ndim: int) -> tuple[int, ...]:
    """Where a Keras kernel's canonical axes (PyTorch's order) are in its own layout.

    Dense ``(in, out)`` -> ``(1, 0)``; ConvND ``(k..., in, out)`` and ConvNDTranspose
    ``(k..., out, in)`` -> ``(nd + 1, nd, 0, ..., nd - 1)`` (PyTorch: ``(out, in, k...)`` and
    ``(in, out, k...)``); Embedding, biases, norms and other layers: unchanged.

    >>> canonical_axes("Dense", 2), canonical_axes("Conv2D", 4), canonical_axes("Embedding", 2)
    ((1, 0), (3, 2, 0, 1), (0, 1))
    """
    identity = tuple(range(ndim))
    if ndim < 2:
        return identity
    if layer_type == "Dense":
        spatial = 0
    else:
        match = _CONV.match(layer_type)
        if not match:
            return identity
        spatial = int(match.group(1))
    if ndim != spatial + 2:
        raise ValueError(
            f"a {layer_type} kernel has {spatial + 2} dimensions, got an array with {ndim} dimensions"
        )
    return (spatial + 1, spatial, *range(spatial))
