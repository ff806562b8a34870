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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from . import curves
from .clock import epoch_of_step, first_step_at, next_grid_step
from .epochs import END_IGNORED, max_epochs, min_epochs

if TYPE_CHECKING:
    from ..recipe import Modifier, Recipe

__all__ = ["Event", "Track", "Plan", "compile_plan", "GRADUAL_PRUNING", "PlanError"]

#: Modifiers whose target sparsity follows the gradual schedule.
GRADUAL_PRUNING = frozenset(
    {
        "GMPruningModifier", "MagnitudePruningModifier", "GlobalMagnitudePruningModifier",
        "MFACPruningModifier", "OBSPruningModifier", "MovementPruningModifier",
    }
)


class PlanError(ValueError):
    """A modifier's arguments cannot make a schedule (the message says which and why)."""


@dataclass(frozen=True, slots=True)
class Event:
    """One thing a modifier does at one optimizer step.

    ``action``: ``start``, ``update``, ``end`` or ``set``; ``target``: what changes
    (``sparsity``, ``masks``, ``lr``, ``weight_decay``, ``trainable``, ``quantization``,
    ``observers``, ``bn_stats``, ``layers``, ``distillation``); ``value``: the new value;
    ``params``: the parameters (or, for ``lr``/``weight_decay``, the param groups) it applies
    to, as the recipe selects them (None: all).
    """

    step: int
    epoch: float
    modifier: int
    type: str
    line: int
    action: str
    target: str
    value: Any = None
    params: Any = None

    def describe(self) -> str:
        """A short human sentence: ``sparsity -> 0.416``."""
        if isinstance(self.value, float):
            shown = f"{self.value:.6g}"
        else:
            shown = str(self.value)
        return f"{self.target} -> {shown}" if self.value is not None else f"{self.target} {self.action}"


@dataclass
class Track:
    """The events of one modifier.

    ``steps(k)`` gives the first event step at or after ``k`` (None: no more), and
    ``make(k)`` the events at an event step.
    """

    index: int
    modifier: Modifier
    first: int
    last: int | None
    next_step: Callable[[int], int | None]
    make: Callable[[int], list[Event]]
    order: tuple[Any, ...] = ()


def _num(m: Modifier, key: str, default: float) -> float:
    value = m.args.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(
            f"{m.type} (line {m.span.line}): argument `{key}` must be a number. Received: {key}={value!r}"
        )
    return float(value)


class _Builder:
    def __init__(self, S: int):
        if not isinstance(S, int) or isinstance(S, bool) or S <= 0:
            raise PlanError(f"Argument `steps_per_epoch` must be a positive integer. Received: {S!r}")
        self.S = S

    def event(self, m: Modifier, i: int, k: int, action: str, target: str, value: Any, params: Any = None) -> Event:
        return Event(k, epoch_of_step(k, self.S), i, m.type, m.span.line, action, target, value, params)

    def window(self, m: Modifier) -> tuple[float, float, int, int | None]:
        start = _num(m, "start_epoch", -1)
        end = -1.0 if m.type in END_IGNORED else _num(m, "end_epoch", -1)
        first = first_step_at(start, self.S)
        last = None if end == -1 else first_step_at(end, self.S)
        if last is not None and last < first:
            raise PlanError(
                f"{m.type} (line {m.span.line}): `end_epoch` must be >= `start_epoch`. "
                f"Received: start_epoch={start}, end_epoch={end}"
            )
        return start, end, first, last

    # -- the kinds of track ----------------------------------------------------------------
    def points(self, i: int, m: Modifier, steps: Sequence[tuple[int, str, str, Any, Any]]) -> Track:
        """A track with a few fixed event steps: (step, action, target, value, params)."""
        by_step: dict[int, list[Event]] = {}
        for k, action, target, value, params in sorted(steps, key=lambda s: s[0]):
            by_step.setdefault(k, []).append(self.event(m, i, k, action, target, value, params))
        ordered = sorted(by_step)

        def next_step(k: int) -> int | None:
            for s in ordered:
                if s >= k:
                    return s
            return None

        return Track(i, m, ordered[0] if ordered else 0, ordered[-1] if ordered else 0, next_step,
                     lambda k: list(by_step.get(k, [])))

    def gradual(self, i: int, m: Modifier) -> Track:
        start, end, first, last = self.window(m)
        if last is None:
            # No end: SparseML's interpolation returned the final value at once (one shot).
            end, last = start, first
        args = m.args
        init = args.get("init_sparsity", 0.0)
        final = args.get("final_sparsity")
        inter = str(args.get("inter_func", "cubic"))
        uf = _num(m, "update_frequency", -1)
        if uf == 0:
            raise PlanError(f"{m.type} (line {m.span.line}): `update_frequency` must not be 0")
        groups: list[tuple[Any, float]]
        if isinstance(final, Mapping):
            groups = [(tuple(v) if isinstance(v, (list, tuple)) else v, float(s)) for s, v in final.items()]
        else:
            groups = [(args.get("params"), float(final if final is not None else 0.0))]
        init_f = float(init) if isinstance(init, (int, float)) else 0.0
        funcs = [(params, curves.gradual(init_f, target, start, end, inter)) for params, target in groups]
        leave = args.get("leave_enabled", True) is not False
        S = self.S

        def next_step(k: int) -> int | None:
            if k <= first:
                return first
            if k > last:
                return None
            if uf == -1:
                return k
            return min(next_grid_step(start, uf, k, S), last)

        def make(k: int) -> list[Event]:
            e = epoch_of_step(k, S)
            action = "end" if k == last else "start" if k == first else "update"
            out = [self.event(m, i, k, action, "sparsity", f(e), params) for params, f in funcs]
            if k == last and not leave:
                out.insert(0, self.event(m, i, k, "end", "masks", "release", args.get("params")))
            return out

        return Track(i, m, first, last, next_step, make)

    def lr_class(self, i: int, m: Modifier) -> Track:
        start, end, first, last = self.window(m)
        args = m.args
        init_lr = _num(m, "init_lr", 0.0)
        kwargs = args.get("lr_kwargs") or {}
        lr_class = args.get("lr_class")
        gamma = float(kwargs.get("gamma", 0.1))
        S = self.S
        change: Callable[[int], int | None]
        if lr_class in ("StepLR", "ExponentialLR"):
            size = float(kwargs.get("step_size", 1)) if lr_class == "StepLR" else 1.0
            curve = curves.step_lr(init_lr, gamma, size, start)

            def change(k: int) -> int | None:
                return next_grid_step(start, size, max(k, first + 1), S)

        elif lr_class == "MultiStepLR":
            milestones = [float(x) for x in kwargs.get("milestones", ())]
            try:
                curve = curves.multi_step_lr(init_lr, gamma, milestones, start)
            except ValueError as exc:
                raise PlanError(f"{m.type} (line {m.span.line}): {exc}") from None
            if end != -1 and any(x >= end for x in milestones):
                raise PlanError(
                    f"{m.type} (line {m.span.line}): argument `milestones` must all be < "
                    f"`end_epoch`. Received: milestones={milestones}, end_epoch={end}"
                )
            marks = sorted({first_step_at(x, S) for x in milestones})

            def change(k: int) -> int | None:
                return next((s for s in marks if s >= max(k, first + 1)), None)

        elif lr_class == "CosineAnnealingWarmRestarts":
            curve = curves.cosine_warm_restarts_lr(
                init_lr, float(kwargs.get("eta_min", kwargs.get("lr_min", 0.0))),
                float(kwargs.get("T_0", kwargs.get("cycle_epochs", 1.0))), start,
                int(kwargs.get("T_mult", 1)),
            )

            def change(k: int) -> int | None:
                return max(k, first + 1)

        else:
            raise PlanError(f"{m.type} (line {m.span.line}): unknown lr_class {lr_class!r}")

        def next_step(k: int) -> int | None:
            if k <= first:
                return first
            nxt = change(k)
            # The update that would land exactly on end_epoch is skipped (SparseML kept the
            # last value from there on), so changes stop before the end step.
            if nxt is None or (last is not None and nxt >= last):
                return None
            return nxt

        def make(k: int) -> list[Event]:
            # Stepped classes count decays on the exact epoch k/S: the float k/S can fall a
            # hair below a milestone that the step reaches exactly.
            at = Fraction(k, S) if lr_class != "CosineAnnealingWarmRestarts" else epoch_of_step(k, S)
            value = curve(at)
            return [self.event(m, i, k, "start" if k == first else "update", "lr", value, args.get("param_groups"))]

        return Track(i, m, first, last, next_step, make)

    def lr_function(self, i: int, m: Modifier) -> Track:
        start, end, first, last = self.window(m)
        if last is None:
            raise PlanError(f"{m.type} (line {m.span.line}) needs an `end_epoch`; received -1")
        args = m.args
        init_lr, final_lr = _num(m, "init_lr", 0.0), _num(m, "final_lr", 0.0)
        func = args.get("lr_func", "linear")
        try:
            if func == "linear":
                curve = curves.linear_function_lr(init_lr, final_lr, start, end)
            elif func == "cosine":
                curve = curves.cosine_function_lr(init_lr, final_lr, start, end)
            elif func == "cyclic_linear":
                curve = curves.cyclic_linear_function_lr(
                    init_lr, final_lr, start, end, _num(m, "cycle_epochs", 1.0), self.S
                )
            else:
                raise ValueError(f"unknown lr_func {func!r}")
        except ValueError as exc:
            raise PlanError(f"{m.type} (line {m.span.line}): {exc}") from None
        S = self.S

        def next_step(k: int) -> int | None:
            k = max(k, first)
            return k if k <= last else None

        def make(k: int) -> list[Event]:
            action = "start" if k == first else "end" if k == last else "update"
            return [self.event(m, i, k, action, "lr", curve(epoch_of_step(k, S)), args.get("param_groups"))]

        return Track(i, m, first, last, next_step, make)

    def build(self, i: int, m: Modifier) -> Track | None:
        t = m.type
        if t in GRADUAL_PRUNING:
            return self.gradual(i, m)
        if t == "LearningRateModifier":
            return self.lr_class(i, m)
        if t == "LearningRateFunctionModifier":
            return self.lr_function(i, m)
        if t == "EpochRangeModifier":
            return None
        start, end, first, last = self.window(m)
        args = m.args
        params = args.get("params")
        if t == "SetLearningRateModifier":
            return self.points(i, m, [(first, "set", "lr", args.get("learning_rate"), args.get("param_groups"))])
        if t == "SetWeightDecayModifier":
            return self.points(i, m, [(first, "set", "weight_decay", args.get("weight_decay"), args.get("param_groups"))])
        if t == "TrainableParamsModifier":
            steps = [(first, "start", "trainable", bool(args.get("trainable", False)), params)]
            if last is not None:
                steps.append((last, "end", "trainable", "restore", params))
            return self.points(i, m, steps)
        if t == "ConstantPruningModifier":
            steps = [(first, "start", "masks", "hold", params)]
            if last is not None:
                steps.append((last, "end", "masks", "release", params))
            return self.points(i, m, steps)
        if t == "LayerPruningModifier":
            layers = args.get("layers")
            steps = [(first, "start", "layers", "remove", layers)]
            if last is not None:
                steps.append((last, "end", "layers", "restore", layers))
            return self.points(i, m, steps)
        if t == "DistillationModifier":
            steps = [(first, "start", "distillation", args.get("hardness", 0.5), None)]
            if last is not None:
                steps.append((last, "end", "distillation", 0.0, None))
            return self.points(i, m, steps)
        if t == "QuantizationModifier":
            steps = [(first, "start", "quantization", "on", args.get("submodules"))]
            for key, target, value in (
                ("disable_quantization_observer_epoch", "observers", "disabled"),
                ("freeze_bn_stats_epoch", "bn_stats", "frozen"),
            ):
                epoch = args.get(key)
                if isinstance(epoch, (int, float)) and not isinstance(epoch, bool):
                    if epoch != -1 and epoch < start:
                        raise PlanError(
                            f"{m.type} (line {m.span.line}): argument `{key}` must be >= "
                            f"`start_epoch`. Received: {key}={epoch}, start_epoch={start}"
                        )
                    steps.append((max(first_step_at(epoch, self.S), first), "set", target, value, None))
            return self.points(i, m, steps)
        if t == "ACDCPruningModifier":
            return self.acdc(i, m)
        return None

    def acdc(self, i: int, m: Modifier) -> Track:
        """AC/DC: alternating compressed (at ``compression_sparsity``) and decompressed (dense)
        phases of ``update_frequency`` epochs, from ``start_epoch``; the last phase before
        ``end_epoch`` is compressed and stays so."""
        start, end, first, last = self.window(m)
        if last is None:
            raise PlanError(f"{m.type} (line {m.span.line}) needs an `end_epoch`; received -1")
        sparsity = _num(m, "compression_sparsity", 0.9)
        phase = _num(m, "update_frequency", 5)
        n_phases = max(int(round((end - max(start, 0)) / phase)), 1)
        steps = []
        for n in range(n_phases):
            k = first_step_at(max(start, 0) + n * phase, self.S)
            compressed = n % 2 == 0 or n == n_phases - 1
            steps.append((k, "start" if n == 0 else "update", "sparsity", sparsity if compressed else 0.0, m.args.get("params")))
        return self.points(i, m, steps)


def _manager_order(m: Modifier, index: int) -> tuple[Any, ...]:
    end = -1 if m.type in END_IGNORED else m.args.get("end_epoch", -1)
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

    @property
    def _by_id(self) -> dict[int, Track]:
        cached = self.__dict__.get("_by_id_cache")
        if cached is None:
            cached = {id(t): t for t in self.tracks}
            self.__dict__["_by_id_cache"] = cached
        return cached


def compile_plan(recipe: Recipe, steps_per_epoch: int) -> Plan:
    """Compile ``recipe`` for ``steps_per_epoch`` optimizer steps per epoch.

    Raises :class:`PlanError` naming the modifier and its line when its arguments cannot
    make a schedule (an end before its start, a MultiStepLR milestone not after the start).
    """
    builder = _Builder(steps_per_epoch)
    tracks = []
    for i, m in enumerate(recipe.modifiers):
        track = builder.build(i, m)
        if track is not None:
            track.order = _manager_order(m, i)
            tracks.append(track)
    return Plan(recipe, steps_per_epoch, tracks, max_epochs(recipe.modifiers), min_epochs(recipe.modifiers))
