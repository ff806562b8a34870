"""A recipe compiled for one ``steps_per_epoch``: what happens at every optimizer step.

Each modifier becomes a :class:`Track` that can say, in constant time, which is its next
event step at or after any step, and what its events at a step are. Tracks whose event steps
are the same (modifiers of one type whose arguments differ only in what they select, such as
one GMP modifier per layer) form a cohort that is stepped once. :meth:`Plan.events_at` keeps
a heap of the cohorts' next event steps and the step at which anything is next due, so asking
step after step costs one integer comparison when nothing is due and O(events) when something
is, whatever the number of modifiers and steps; nothing is tabulated up front. Jumping to
another step (resuming) rebuilds the heap once.

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
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from .clock import epoch_of_step
from .epochs import max_epochs, min_epochs
from .events import FLOAT_INT_LIMIT, MAX_EVENTS, Event, PlanError, Track
from .tracks import TRACKS, TrackBuilder, end_ignored

if TYPE_CHECKING:
    from ..recipe.model import Modifier, Recipe

__all__ = ["Event", "Track", "Plan", "compile_plan", "GRADUAL_PRUNING", "PlanError", "MAX_EVENTS"]

#: Modifiers whose target sparsity follows the gradual schedule (declared ``schedule:
#: gradual``); computed from the catalogue on first use.
GRADUAL_PRUNING: frozenset[str]


#: The step of "nothing more is due" (beyond any step a plan can reach).
_NEVER = 1 << 200
#: Arguments that choose what a modifier acts on, never when: tracks that differ only in
#: these have the same event steps.
_SELECTORS = frozenset({"params", "param_groups", "layers", "submodules"})
_by_order = attrgetter("order")


def _timing_key(t: Track) -> tuple[Any, ...]:
    """Equal for tracks whose ``next_step`` gives the same answers: same modifier type, same
    first and last step and same arguments except the selectors."""
    args = sorted((k, repr(v)) for k, v in t.modifier.args.items() if k not in _SELECTORS)
    return (t.modifier.type, t.first, t.last, t.spacing, t.fixed, tuple(args))


@dataclass(frozen=True)
class _Cohort:
    """Tracks with the same event steps, in manager order; ``lead`` answers ``next_step``.
    ``rows``: when every member is a one-curve sparsity track of the lead's curve (a
    per-layer recipe), the members' fixed fields, so that a step's events are built in one
    pass with the curve evaluated once."""

    lead: Track
    members: tuple[Track, ...]
    rows: tuple[tuple[Any, ...], ...] = ()

    def events(self, step: int, steps_per_epoch: int) -> list[Event]:
        if not self.rows:
            out: list[Event] = []
            for t in self.members:
                out.extend(t.make(step))
            return out
        lead = self.lead
        e = epoch_of_step(step, steps_per_epoch)
        value = lead.curve(e)  # type: ignore[misc]
        last = lead.last if lead.last is not None else lead.first  # a gradual track always ends
        action = "update" if lead.first < step < last else "end" if step == last else "start"
        new = tuple.__new__
        return [new(Event, (step, e, i, kind, line, action, "sparsity", value, params)) for i, kind, line, params in self.rows]


def _cohorts(tracks: list[Track]) -> list[_Cohort]:
    groups: dict[tuple[Any, ...], list[Track]] = {}
    for t in tracks:
        groups.setdefault(_timing_key(t), []).append(t)
    cohorts = [sorted(g, key=_by_order) for g in groups.values()]
    cohorts.sort(key=lambda g: g[0].order)
    out = []
    for g in cohorts:
        shared = len(g) > 1 and g[0].curve is not None and all(t.curve is g[0].curve for t in g)
        out.append(_Cohort(g[0], tuple(g), tuple(t.row for t in g) if shared else ()))
    return out


def _make_all(cohorts: list[_Cohort], due: list[int], step: int, steps_per_epoch: int) -> list[Event]:
    """The events at ``step`` of the cohorts ``due`` (indexes), in manager order."""
    if len(due) == 1:
        return cohorts[due[0]].events(step, steps_per_epoch)
    members = sorted((t for c in due for t in cohorts[c].members), key=_by_order)
    out: list[Event] = []
    for t in members:
        out.extend(t.make(step))
    return out


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
    _heap: list[tuple[int, int]] = field(default_factory=list, repr=False)
    _cursor: int = field(default=-1, repr=False)
    _due: int = field(default=-1, repr=False)

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

    def updates_after(self, step: int, target: str = "sparsity") -> dict[int, int]:
        """For each modifier with ``target`` events at or after ``step``, the last such step
        (modifier index -> step); empty when some track never ends."""
        stop = self.last_event_step
        if stop is None or stop < step:
            return {}
        found: dict[int, int] = {}
        for event in self.iter_events(step, stop + 1):
            if event.target == target:
                found[event.modifier] = event.step
        return found

    def _start_heap(self, step: int) -> list[tuple[int, int]]:
        """``(next event step at or after step, cohort)`` of every cohort with one, as a heap."""
        heap = []
        for c, cohort in enumerate(self._cohorts):
            nxt = cohort.lead.next_step(step)
            if nxt is not None:
                heap.append((nxt, c))
        heapq.heapify(heap)
        return heap

    def events_at(self, step: int) -> tuple[Event, ...]:
        """The events of optimizer step ``step``, in manager order.

        Asked step after step (0, 1, 2, ...) this costs one comparison when nothing is due;
        any other order costs one O(modifiers) rebuild first.
        """
        if step == self._cursor and step < self._due:
            self._cursor = step + 1
            return ()
        if step != self._cursor:
            self._heap = self._start_heap(step)
        heap = self._heap
        self._cursor = step + 1
        if not heap or heap[0][0] > step:
            self._due = heap[0][0] if heap else _NEVER
            return ()
        cohorts = self._cohorts
        due = []
        while heap and heap[0][0] == step:
            due.append(heapq.heappop(heap)[1])
        out = _make_all(cohorts, due, step, self.steps_per_epoch)
        for c in due:
            nxt = cohorts[c].lead.next_step(step + 1)
            if nxt is not None:
                heapq.heappush(heap, (nxt, c))
        self._due = heap[0][0] if heap else _NEVER
        return tuple(out)

    def iter_events(self, start: int = 0, stop: int | None = None) -> Iterator[Event]:
        """Every event from step ``start`` up to (not including) ``stop``, in order.

        Without ``stop``, runs to the last event (or to ``total_steps`` when a track never ends).
        """
        if stop is None:
            last = self.last_event_step
            stop = (last + 1) if last is not None else max(self.total_steps, start + 1)
        cohorts = self._cohorts
        heap = self._start_heap(start)
        while heap and heap[0][0] < stop:
            step = heap[0][0]
            due = []
            while heap and heap[0][0] == step:
                due.append(heapq.heappop(heap)[1])
            yield from _make_all(cohorts, due, step, self.steps_per_epoch)
            for c in due:
                nxt = cohorts[c].lead.next_step(step + 1)
                if nxt is not None:
                    heapq.heappush(heap, (nxt, c))

    def events_bound(self, stop: int | None = None) -> float:
        """An upper bound of the event steps ``iter_events(0, stop)`` visits, in O(modifiers):
        what a caller checks before enumerating a range it did not choose."""
        if stop is None:
            last = self.last_event_step
            stop = (last + 1) if last is not None else max(self.total_steps, 1)
        return sum(t.count_bound(self.steps_per_epoch, stop) for t in self.tracks)

    @property
    def _cohorts(self) -> list[_Cohort]:
        cached = self.__dict__.get("_cohorts_cache")
        if cached is None:
            cached = self.__dict__["_cohorts_cache"] = _cohorts(self.tracks)
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
            if not finite or (isinstance(value, int) and not -FLOAT_INT_LIMIT <= value <= FLOAT_INT_LIMIT):
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
