"""What the rest of the code reads of a kind of track, beside building it
(:data:`~.tracks.TRACKS`): the facts a rule, the runtime, lint or the schedule picture needs,
declared once per kind, so that none of them compares kind names.

>>> track_kind("GMPruningModifier").grid.key, track_kind("ConstantPruningModifier").holds_only
(('update_frequency',), True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..modifiers import spec

if TYPE_CHECKING:
    from ..recipe.model import Modifier

__all__ = ["Grid", "TrackKind", "KINDS", "track_kind"]


@dataclass(frozen=True)
class Grid:
    """The argument that spaces a track's updates (in epochs): ``key`` is its path among the
    modifier's arguments; ``applies(m)``: whether modifier ``m`` updates on it."""

    key: tuple[str, ...]
    applies: Callable[[Modifier], bool] = lambda m: True

    def every(self, m: Modifier) -> Any:
        """The value at :attr:`key` in ``m``'s arguments (None where it is missing)."""
        value: Any = m.args
        for part in self.key:
            if not isinstance(value, Mapping):
                return None
            value = value.get(part)
        return value


@dataclass(frozen=True)
class TrackKind:
    """``grid``: the update grid (M005 counts its points); ``holds_only``: its masks hold the
    zeros already there and rank nothing (constant pruning), so it neither prunes on a window
    nor ends with a release worth showing; ``release_at_end``: a ``leave_enabled: false``
    release at its end step still prunes once to the final target, and the modifier prunes no
    more after it (SparseML's update, then end)."""

    grid: Grid | None = None
    holds_only: bool = False
    release_at_end: bool = False


_UPDATE_FREQUENCY = Grid(("update_frequency",))

#: Kind name -> its facts; a kind not listed has none of them.
KINDS: dict[str, TrackKind] = {
    "gradual": TrackKind(grid=_UPDATE_FREQUENCY, release_at_end=True),
    "acdc": TrackKind(grid=_UPDATE_FREQUENCY),
    "lr_class": TrackKind(grid=Grid(("lr_kwargs", "step_size"), lambda m: m.args.get("lr_class") == "StepLR")),
    "hold_masks": TrackKind(holds_only=True),
}

_NONE = TrackKind()


def track_kind(modifier_type: str) -> TrackKind:
    """The facts of the track kind modifier ``modifier_type`` compiles to (none for an
    unknown modifier or one without a track)."""
    declared = spec(modifier_type)
    return KINDS.get(declared.schedule, _NONE) if declared is not None and declared.schedule else _NONE
