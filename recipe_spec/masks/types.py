"""Mask types as recipes write them, parsed once for the validator, the linter and every
backend: ``unstructured``, ``block4``, ``[a, b]`` blocks, ``N:M`` (``tensorrt`` = 2:4),
``channel``, ``filter``.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["parse_mask_type", "nm_of", "MOVEMENT_MASK_TYPES", "movement_mask_type_ok"]

_NM_RE = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


def parse_mask_type(mask_type: Any) -> tuple[str, Any]:
    """A recipe's ``mask_type`` as ``(kind, argument)``.

    ``"unstructured"`` and ``"block4"`` -> ``(kind, None)``; a list ``[a, b]`` of ints (``-1`` =
    the whole dimension) -> ``("block", (a, b))``; ``"N:M"`` -> ``("nm", (N, M))`` (keep N of
    every M); ``"tensorrt"`` -> ``("nm", (2, 4))``; ``"channel"`` / ``"filter"`` ->
    ``(kind, None)``. Anything else raises ``ValueError``.

    >>> parse_mask_type("tensorrt"), parse_mask_type([1, 4]), parse_mask_type("unstructured")
    (('nm', (2, 4)), ('block', (1, 4)), ('unstructured', None))
    """
    if isinstance(mask_type, str):
        if mask_type in ("unstructured", "block4", "channel", "filter"):
            return mask_type, None
        if mask_type == "tensorrt":
            return "nm", (2, 4)
        match = _NM_RE.match(mask_type)
        if match:
            n, m = int(match.group(1)), int(match.group(2))
            if not 0 < n <= m:
                raise ValueError(
                    f"Invalid N:M mask_type {mask_type!r}: N (kept per group) must be between 1 "
                    f"and M (the group size). Received: N={n}, M={m}"
                )
            return "nm", (n, m)
    elif isinstance(mask_type, (list, tuple)):
        if len(mask_type) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and (v > 0 or v == -1) for v in mask_type
        ):
            return "block", (int(mask_type[0]), int(mask_type[1]))
        raise ValueError(
            f"Invalid block mask_type {list(mask_type)!r}: expected two integers [rows, cols] "
            "(each positive, or -1 for the whole dimension), e.g. [1, 4]"
        )
    raise ValueError(
        f"Unknown mask_type {mask_type!r}. Supported mask types: 'unstructured', 'block4', "
        "'N:M' (e.g. '2:4'), 'tensorrt' (= '2:4'), 'channel', 'filter', or a block shape "
        "[rows, cols] such as [1, 4]"
    )


def nm_of(mask_type: Any) -> tuple[int, int] | None:
    """``(N, M)`` of an N:M mask type (``tensorrt`` is 2:4), else None; never raises.

    >>> nm_of("2:4"), nm_of("tensorrt"), nm_of("block4"), nm_of("5:4")
    ((2, 4), (2, 4), None, None)
    """
    try:
        kind, arg = parse_mask_type(mask_type)
    except ValueError:
        return None
    return arg if kind == "nm" else None


#: The mask types movement scores can rank: single weights and block means of the scores.
#: Channel/filter norms and N:M patterns rank magnitudes, which signed scores are not.
MOVEMENT_MASK_TYPES = ("unstructured", "block4", "block")


def movement_mask_type_ok(mask_type: Any) -> bool:
    """Whether ``mask_type`` is one of :data:`MOVEMENT_MASK_TYPES` (a ``[a, b]`` block
    shape is a ``block``)."""
    try:
        kind = parse_mask_type(mask_type)[0]
    except (TypeError, ValueError):
        return True  # not a mask type at all: the schema reports it
    return kind in MOVEMENT_MASK_TYPES
