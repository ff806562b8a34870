"""Where a Keras kernel keeps the canonical (torch-order) axes: ``(out, in, spatial...)``.

>>> canonical_axes("Dense", 2), canonical_axes("Conv2D", 4)
((1, 0), (3, 2, 0, 1))
"""

from __future__ import annotations

import re

__all__ = ["canonical_axes", "linear_axes", "LinearAxes"]

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


#: (kernel in axes, kernel out axes, input batch axes, input contracted axes, explicit input axes)
LinearAxes = tuple[list[int], list[int], list[int], list[int], int]


def linear_axes(equation: str) -> LinearAxes | None:
    """How an ``EinsumDense`` with ``equation`` is a Linear layer: ``(kernel in axes, kernel
    out axes, input batch axes, input contracted axes, explicit input axes)`` (contracted axes
    in kernel order; input positions count from the end when the input starts with ``...``),
    or None when the kernel is not a plain ``(in..., out...)`` map.

    >>> linear_axes("bqm,muh->bquh"), linear_axes("bquh,uhm->bqm")[:2]
    (([0], [1, 2], [0, 1], [2], 3), ([0, 1], [2]))
    """
    try:
        left, out = equation.replace(" ", "").split("->")
        inp, ker = left.split(",")
    except ValueError:
        return None
    if "." in ker:
        return None
    inp = inp.replace("...", "")
    if any(c in inp and c in out for c in ker) or any(c not in inp and c not in out for c in ker):
        return None
    contract = [c for c in ker if c in inp]
    outs = [c for c in ker if c in out]
    if not contract or not outs:
        return None
    return ([ker.index(c) for c in contract], [ker.index(c) for c in outs],
            [i for i, c in enumerate(inp) if c not in ker], [inp.index(c) for c in contract], len(inp))
