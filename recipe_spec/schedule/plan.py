"""A recipe compiled for one ``steps_per_epoch``: what happens at every optimizer step.

Each modifier becomes a :class:`Track` that can say, in constant time, which is its next
event step at or after any step, and what its events at a step are. :meth:`Plan.events_at`
keeps a heap of the tracks' next event steps, so asking step after step costs O(1) when
nothing is due and O(events) when something is, whatever the number of modifiers and steps;
nothing is tabulated up front. Jumping to another step (resuming) rebuilds the heap once.

Within one step, events come in SparseML's manager order (by end epoch, -1 last, then start
epoch), so the last learning-rate writer wins as it did there.

>>> import recipe_spec
>>> recipe = recipe_spec.loads('''
... modifiers:
...   - !GMPruningModifier {params: [fc.weight], init_sparsity: 0.05, final_sparsity: 0.8,
...                       start_epoch: 0, end_epoch: 2, update_frequency: 1}
... ''')
>>> plan = compile_plan(recipe, steps_per_epoch=4)
>>> [(e.step, e.action, round(e.value, 3)) for e in plan.iter_events()]
[(0, 'start', 0.05), (4, 'update', 0.706), (8, 'end', 0.8)]
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .epochs import max_epochs, min_epochs
from .events import MAX_EVENTS, Event, PlanError, Track
from .tracks import TRACKS, TrackBuilder, end_ignored

if TYPE_CHECKING:
    from ..recipe import Modifier, Recipe

__all__ = ["Event", "Track", "Plan", "compile_plan", "GRADUAL_PRUNING", "PlanError", "MAX_EVENTS"]

#: Modifiers whose target sparsity follows the gradual schedule (declared ``schedule:
#: gradual``); computed from the catalogue on first use.
GRADUAL_PRUNING: frozenset[str]


def _manager_order(m: Modifier, index: int) -> tuple[Any, ...]:
    end = -1 if m.type in end_ignored() else m.args.get("end_epoch", -1)
    start = m.args.get("start_epoch", -1)
    end_key = math.inf if end == -1 or not isinstance(end, (int, float)) else float(end)
    start_key = float(start) if isinstance(start, (int, float)) else -1.0
    return (end_key, start_key, index)


@dataclass
class Plan:
    """The schedule of a recipe at ``steps_per_epoch`` optimizer steps per epoch."""

    recipe: Recipe
    steps_per_epoch: int
    tracks: list[Track]
    max_epochs: int
    min_epochs: int
    _heap: list[tuple[int, tuple[Any, ...], int]] = field(default_factory=list, repr=False)
    _cursor: int = field(default=-1, repr=False)

    @property
    def total_steps(self) -> int:
        """Steps in ``max_epochs`` epochs."""
        return self.max_epochs * self.steps_per_epoch

    @property
    def last_event_step(self) -> int | None:
        """The last step with an event, or None when some track never ends."""
        lasts = [t.last for t in self.tracks]
        if any(v is None for v in lasts):
            return None
        return max((v for v in lasts if v is not None), default=0)

    def _reset(self, step: int) -> None:
        self._heap = []
        for t in self.tracks:
            nxt = t.next_step(step)
            if nxt is not None:
                self._heap.append((nxt, t.order, id(t)))
        heapq.heapify(self._heap)
        self._cursor = step

    def events_at(self, step: int) -> tuple[Event, ...]:
        """The events of optimizer step ``step``, in manager order.

        Asked step after step (0, 1, 2, ...) this costs O(1) when nothing is due; any other
        order costs one O(modifiers) rebuild first.
        """
        if step != self._cursor:
            self._reset(step)
        heap = self._heap
        self._cursor = step + 1
        if not heap or heap[0][0] > step:
            return ()
        due = []
        while heap and heap[0][0] == step:
            _, _, tid = heapq.heappop(heap)
            due.append(self._by_id[tid])
        out: list[Event] = []
        for t in sorted(due, key=lambda t: t.order):
            out.extend(t.make(step))
            nxt = t.next_step(step + 1)
            if nxt is not None:
                heapq.heappush(heap, (nxt, t.order, id(t)))
        return tuple(out)

    def iter_events(self, start: int = 0, stop: int | None = None) -> Iterator[Event]:
        """Every event from step ``start`` up to (not including) ``stop``, in order.

        Without ``stop``, runs to the last event (or to ``total_steps`` when a track never ends).
        """
        if stop is None:
            last = self.last_event_step
            stop = (last + 1) if last is not None else max(self.total_steps, start + 1)
        heap = []
        for t in self.tracks:
            nxt = t.next_step(start)
            if nxt is not None:
                heap.append((nxt, t.order, id(t)))
        heapq.heapify(heap)
        while heap and heap[0][0] < stop:
            step = heap[0][0]
            due = []
            while heap and heap[0][0] == step:
                due.append(self._by_id[heapq.heappop(heap)[2]])
            for t in sorted(due, key=lambda t: t.order):
                yield from t.make(step)
                nxt = t.next_step(step + 1)
                if nxt is not None:
                    heapq.heappush(heap, (nxt, t.order, id(t)))

    def events_bound(self, stop: int | None = None) -> float:
        """An upper bound of the event steps ``iter_events(0, stop)`` visits, in O(modifiers):
        what a caller checks before enumerating a range it did not choose."""
        if stop is None:
            last = self.last_event_step
            stop = (last + 1) if last is not None else max(self.total_steps, 1)
        return sum(t.count_bound(self.steps_per_epoch, stop) for t in self.tracks)

    @property
    def _by_id(self) -> dict[int, Track]:
        cached = self.__dict__.get("_by_id_cache")
        if cached is None:
            cached = {id(t): t for t in self.tracks}
            self.__dict__["_by_id_cache"] = cached
        return cached


def compile_plan(recipe: Recipe, steps_per_epoch: int) -> Plan:
    """Compile ``recipe`` for ``steps_per_epoch`` optimizer steps per epoch.

    Each modifier compiles to the kind of track its declaration names
    (:data:`~.tracks.TRACKS`); undeclared modifiers (the validator reports them) and
    modifiers without a schedule compile to nothing.

    Raises :class:`PlanError` naming the modifier and its line when its arguments cannot
    make a schedule: an end before its start, a MultiStepLR milestone not after the start, a
    number that is not finite, an argument of the wrong type (whatever the recipe holds: the
    plan compiler never fails with another exception), or more than
    :data:`~.events.MAX_EVENTS` event steps.
    """
    from ..modifiers import spec

    builder = TrackBuilder(steps_per_epoch)
    tracks = []
    for i, m in enumerate(recipe.modifiers):
        try:
            track = _compile_one(builder, i, m, spec(m.type))
        except PlanError:
            raise
        except (ArithmeticError, ValueError, TypeError, AttributeError, LookupError, RecursionError) as exc:
            raise PlanError(f"{_where(m)}: cannot make a schedule: {type(exc).__name__}: {exc}") from None
        if track is None:
            continue
        if track.last is not None and track.count_bound(steps_per_epoch) > MAX_EVENTS:
            raise PlanError(_too_many(m, track.count_bound(steps_per_epoch), steps_per_epoch))
        tracks.append(track)
    most, least = max_epochs(recipe.modifiers), min_epochs(recipe.modifiers)
    horizon = most * steps_per_epoch
    for track in tracks:
        # A track that never ends is enumerated up to the end of the run (``iter_events``).
        if track.last is None and track.count_bound(steps_per_epoch, max(horizon, 1)) > MAX_EVENTS:
            raise PlanError(
                _too_many(track.modifier, track.count_bound(steps_per_epoch, max(horizon, 1)),
                          steps_per_epoch, f" by the end of the run (epoch {most})")
            )
    return Plan(recipe, steps_per_epoch, tracks, most, least)


def _where(m: Modifier) -> str:
    return f"{getattr(m, 'type', '?')} (line {m.span.line if getattr(m, 'span', None) else '?'})"


def _too_many(m: Modifier, count: float, steps_per_epoch: int, until: str = "") -> str:
    return (
        f"{_where(m)}: makes about {count:.3g} schedule events{until} at {steps_per_epoch} steps "
        f"per epoch; the limit is {MAX_EVENTS:,} per modifier. Raise `update_frequency` (or "
        "the LR step size), shorten the epoch range, or use fewer steps per epoch"
    )


def _compile_one(builder: TrackBuilder, i: int, m: Modifier, declared: Any) -> Track | None:
    """The track of modifier ``m`` (None: it has no schedule). Its epochs are checked first,
    and its first and last events are made once, so a bad argument fails here and not in
    the middle of a run."""
    for key in ("start_epoch", "end_epoch"):
        value = m.args.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            finite = not isinstance(value, float) or math.isfinite(value)
            if not finite or (isinstance(value, int) and value.bit_length() > 1024):
                shown = value if isinstance(value, float) else f"an integer of {value.bit_length()} bits"
                raise PlanError(
                    f"{_where(m)}: argument `{key}` must be a finite number. Received: {key}={shown}"
                )
    max_epochs([m]), min_epochs([m])
    if declared is None or declared.schedule is None:
        return None
    track = TRACKS[declared.schedule](builder, i, m)
    track.order = _manager_order(m, i)
    for k in {track.first, track.last if track.last is not None else track.first}:
        nxt = track.next_step(k)
        if nxt is not None:
            track.make(nxt)
    return track


def __getattr__(name: str) -> Any:
    if name == "GRADUAL_PRUNING":
        from ..modifiers import all_specs

        return frozenset(n for n, s in all_specs().items() if s.schedule == "gradual")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
