"""How long a recipe runs, and stage composition.

- ``max_epochs``: the ceiling of the largest ``start_epoch`` or ``end_epoch`` that is not -1
  (0 when there is none: a recipe whose only modifier runs from 0 to -1 reports 0, as SparseML).
- ``min_epochs``: the floor of the smallest ``start_epoch`` that is not -1 (0 when none).
- Composition: a later stage's epochs follow the earlier stage's end. :func:`shift_epochs`
  moves one modifier's epochs, :func:`stage_offsets` gives each stage's offset when stages
  are written relative to their own start (``relative=True``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .tracks import end_ignored

__all__ = ["max_epochs", "min_epochs", "shift_epochs", "stage_offsets", "EPOCH_KEYS"]

#: Arguments that hold an absolute epoch and move when a stage is shifted.
EPOCH_KEYS = (
    "start_epoch",
    "end_epoch",
    "disable_quantization_observer_epoch",
    "freeze_bn_stats_epoch",
)




def _epochs(modifiers: Iterable[Any], key: str) -> list[float]:
    out = []
    for m in modifiers:
        if key == "end_epoch" and getattr(m, "type", None) in end_ignored():
            continue
        args = getattr(m, "args", m)
        value = args.get(key) if isinstance(args, Mapping) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value != -1:
            out.append(float(value))
    return out


def max_epochs(modifiers: Iterable[Any]) -> int:
    """Ceiling of the largest start or end epoch that is not -1.

    >>> max_epochs([{"start_epoch": 1.5, "end_epoch": 6.5}, {"start_epoch": 0, "end_epoch": -1}])
    7
    >>> max_epochs([{"start_epoch": 0.0, "end_epoch": -1}])
    0
    """
    mods = list(modifiers)
    values = _epochs(mods, "start_epoch") + _epochs(mods, "end_epoch")
    return max((math.ceil(v) for v in values), default=0)


def min_epochs(modifiers: Iterable[Any]) -> int:
    """Floor of the smallest start epoch that is not -1.

    >>> min_epochs([{"start_epoch": 1.5}, {"start_epoch": -1}, {"start_epoch": 3}])
    1
    """
    return min((math.floor(v) for v in _epochs(list(modifiers), "start_epoch")), default=0)


def shift_epochs(args: Mapping[str, Any], offset: float) -> dict[str, Any]:
    """``args`` with every epoch moved ``offset`` later; -1 ("from the start") becomes the
    offset itself for a start, and stays -1 ("never") for an end.

    >>> shift_epochs({"start_epoch": -1, "end_epoch": 5, "init_lr": 0.1}, 10)
    {'start_epoch': 10, 'end_epoch': 15, 'init_lr': 0.1}
    """
    out = dict(args)
    for key in EPOCH_KEYS:
        value = out.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if key == "start_epoch":
            out[key] = max(value, 0) + offset
        elif value != -1:
            out[key] = value + offset
    return out


def stage_offsets(stage_modifiers: Iterable[Iterable[Any]]) -> list[int]:
    """Offsets of stages written relative to their own start: each stage begins where the
    ones before it end (the sum of their ``max_epochs``).

    >>> stage_offsets([[{"start_epoch": 0, "end_epoch": 3}], [{"start_epoch": 0, "end_epoch": 2}], []])
    [0, 3, 5]
    """
    offsets, total = [], 0
    for mods in stage_modifiers:
        offsets.append(total)
        total += max_epochs(mods)
    return offsets
