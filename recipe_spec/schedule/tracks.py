"""The kinds of schedule track, by name: what a modifier does to the schedule.

A modifier's declaration names its kind (``ModifierSpec.schedule``, e.g. ``"gradual"``);
:class:`TrackBuilder` compiles it for a ``steps_per_epoch`` into a :class:`~.events.Track`:

==================  ===========================================================================
``gradual``         target sparsity along ``inter_func`` on the update grid (+ mask release)
``acdc``            alternating compressed / dense phases of ``update_frequency`` epochs
``lr_class``        a torch LR scheduler class (StepLR, MultiStepLR, ExponentialLR, cosine WR)
``lr_function``     an LR function (linear, cosine, cyclic_linear) at every step
``set_lr``          one LR value at ``start_epoch`` (``end_epoch`` ignored, as in SparseML)
``set_weight_decay`` one weight-decay value at ``start_epoch`` (``end_epoch`` ignored)
``trainable``       freeze / unfreeze from ``start_epoch``, restored at ``end_epoch``
``hold_masks``      hold the current zeros from ``start_epoch``, released at ``end_epoch``
``layers``          remove layers from ``start_epoch``, restored at ``end_epoch``
``quantization``    QAT from ``start_epoch``; observer and BN-statistics switches
``distillation``    distillation at ``hardness`` from ``start_epoch`` to ``end_epoch``
==================  ===========================================================================
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from . import curves
from .clock import epoch_of_step, first_step_at, next_grid_step
from .events import MAX_EVENTS, Event, PlanError, Track

if TYPE_CHECKING:
    from ..recipe.model import Modifier

__all__ = ["TrackBuilder", "TRACKS", "END_IGNORING_TRACKS", "end_ignored"]

#: Kinds whose modifiers ignore ``end_epoch`` (SparseML forced it to -1).
END_IGNORING_TRACKS = frozenset({"set_lr", "set_weight_decay"})


@functools.cache
def end_ignored() -> frozenset[str]:
    """The modifiers whose ``end_epoch`` does not count (their track kind ignores it)."""
    from ..modifiers import all_specs

    return frozenset(n for n, s in all_specs().items() if s.schedule in END_IGNORING_TRACKS)


def _num(m: Modifier, key: str, default: float) -> float:
    value = m.args.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(
            f"{m.type} (line {m.span.line}): argument `{key}` must be a number. Received: {key}={value!r}"
        )
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise PlanError(
            f"{m.type} (line {m.span.line}): argument `{key}` must be a finite number. "
            f"Received: {key}={value if isinstance(value, float) else f'an integer of {value.bit_length()} bits'}"
        )
    return number


def _sparsity(m: Modifier, key: str, value: Any) -> float:
    """A sparsity of ``m`` as a float; PlanError naming ``key`` when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(
            f"{m.type} (line {m.span.line}): argument `{key}` must be a number. Received: {key}={value!r}"
        )
    number = float(value) if not isinstance(value, int) or value.bit_length() <= 1024 else math.inf
    if not math.isfinite(number):
        raise PlanError(f"{m.type} (line {m.span.line}): argument `{key}` must be a finite number")
    return number


new_event = tuple.__new__  # Event(*fields) without the keyword handling: a plan builds many


@functools.lru_cache(maxsize=4096)
def _shared_curve(init: float, final: float, start: float, end: float, inter: str) -> curves.Curve:
    """:func:`curves.gradual`, one function per distinct curve, remembering its last value."""
    f = curves.gradual(init, final, start, end, inter)
    last: list[Any] = [None, None]

    def value(epoch: float) -> float:
        if last[0] != epoch:
            last[0], last[1] = epoch, f(epoch)
        return last[1]

    return value


class TrackBuilder:
    """Compiles one modifier into a :class:`Track` of the kind its declaration names
    (``ModifierSpec.schedule``); each public method is one kind (see :data:`TRACKS`)."""

    def __init__(self, S: int):
        if not isinstance(S, int) or isinstance(S, bool) or S <= 0:
            raise PlanError(f"Argument `steps_per_epoch` must be a positive integer. Received: {S!r}")
        self.S = S

    def event(self, m: Modifier, i: int, k: int, action: str, target: str, value: Any, params: Any = None,
              epoch: float | None = None) -> Event:
        return Event(k, epoch_of_step(k, self.S) if epoch is None else epoch, i, m.type, m.span.line, action,
                     target, value, params)

    def window(self, m: Modifier) -> tuple[float, float, int, int | None]:
        start = _num(m, "start_epoch", -1)
        end = -1.0 if m.type in end_ignored() else _num(m, "end_epoch", -1)
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
            at = bisect.bisect_left(ordered, k)  # O(log n): a track may hold thousands of points
            return ordered[at] if at < len(ordered) else None

        return Track(i, m, ordered[0] if ordered else 0, ordered[-1] if ordered else 0, next_step,
                     lambda k: list(by_step.get(k, [])), fixed=len(ordered))

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
        if uf != -1 and uf <= 0:  # a negative spacing would never reach the next update
            raise PlanError(
                f"{m.type} (line {m.span.line}): `update_frequency` must be -1 (every step) or a "
                f"positive number of epochs. Received: update_frequency={uf:g}"
            )
        groups: list[tuple[Any, float]]
        if isinstance(final, Mapping):
            groups = [(tuple(v) if isinstance(v, (list, tuple)) else v, _sparsity(m, "final_sparsity", s))
                      for s, v in final.items()]
        else:
            groups = [(args.get("params"), _sparsity(m, "final_sparsity", final if final is not None else 0.0))]
        init_f = _sparsity(m, "init_sparsity", init) if isinstance(init, (int, float)) else 0.0
        # modifiers with the same curve share one memo of its last value (a BERT recipe's 72
        # per-layer GMP modifiers update at the same steps to the same sparsity)
        funcs = [(params, _shared_curve(init_f, target, start, end, inter)) for params, target in groups]
        leave = args.get("leave_enabled", True) is not False
        S = self.S
        kind, line = m.type, m.span.line

        def next_step(k: int) -> int | None:
            if k <= first:
                return first
            if k > last:
                return None
            if uf == -1:
                return k
            return min(next_grid_step(start, uf, k, S), last)

        if len(funcs) == 1 and leave:  # the common case, on every step of a per-layer recipe
            (params, f), = funcs

            def make_one(k: int) -> list[Event]:
                e = epoch_of_step(k, S)
                action = "update" if first < k < last else "end" if k == last else "start"
                return [new_event(Event, (k, e, i, kind, line, action, "sparsity", f(e), params))]

            return Track(i, m, first, last, next_step, make_one, spacing=max(uf, 0.0),
                         curve=f, row=(i, kind, line, params))

        def make(k: int) -> list[Event]:
            e = epoch_of_step(k, S)
            action = "end" if k == last else "start" if k == first else "update"
            out = [Event(k, e, i, kind, line, action, "sparsity", f(e), params) for params, f in funcs]
            if k == last and not leave:
                out.insert(0, self.event(m, i, k, "end", "masks", "release", args.get("params")))
            return out

        return Track(i, m, first, last, next_step, make, spacing=max(uf, 0.0))

    def lr_class(self, i: int, m: Modifier) -> Track:
        start, end, first, last = self.window(m)
        args = m.args
        init_lr = _num(m, "init_lr", 0.0)
        kwargs = args.get("lr_kwargs") or {}
        lr_class = args.get("lr_class")
        gamma = float(kwargs.get("gamma", 0.1))
        S = self.S
        change: Callable[[int], int | None]
        spacing, fixed = 0.0, None
        if lr_class in ("StepLR", "ExponentialLR"):
            size = float(kwargs.get("step_size", 1)) if lr_class == "StepLR" else 1.0
            if not size > 0 or not math.isfinite(size):
                raise PlanError(
                    f"{m.type} (line {m.span.line}): `step_size` must be a positive number. "
                    f"Received: step_size={size}"
                )
            spacing = size
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
            fixed = len(marks) + 1

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

        return Track(i, m, first, last, next_step, make, spacing=spacing, fixed=fixed)

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

    def set_lr(self, i: int, m: Modifier) -> Track:
        first = self.window(m)[2]
        return self.points(i, m, [(first, "set", "lr", m.args.get("learning_rate"), m.args.get("param_groups"))])

    def set_weight_decay(self, i: int, m: Modifier) -> Track:
        first = self.window(m)[2]
        return self.points(i, m, [(first, "set", "weight_decay", m.args.get("weight_decay"), m.args.get("param_groups"))])

    def _span(self, i: int, m: Modifier, target: str, begin: Any, finish: Any, params: Any) -> Track:
        """A start event at ``start_epoch`` and, unless the modifier never ends, an end event."""
        _, _, first, last = self.window(m)
        steps = [(first, "start", target, begin, params)]
        if last is not None:
            steps.append((last, "end", target, finish, params))
        return self.points(i, m, steps)

    def trainable(self, i: int, m: Modifier) -> Track:
        return self._span(i, m, "trainable", bool(m.args.get("trainable", True)), "restore", m.args.get("params"))

    def hold_masks(self, i: int, m: Modifier) -> Track:
        return self._span(i, m, "masks", "hold", "release", m.args.get("params"))

    def layers(self, i: int, m: Modifier) -> Track:
        return self._span(i, m, "layers", "remove", "restore", m.args.get("layers"))

    def distillation(self, i: int, m: Modifier) -> Track:
        return self._span(i, m, "distillation", m.args.get("hardness", 0.5), 0.0, None)

    def quantization(self, i: int, m: Modifier) -> Track:
        start, _, first, _ = self.window(m)
        args = m.args
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

    def acdc(self, i: int, m: Modifier) -> Track:
        """AC/DC as SparseML runs it (``ACDCPruningModifier.get_applied_sparsity_for_epoch``):
        an update every ``update_frequency`` epochs from ``start_epoch`` (phase ``n``); phase
        ``n`` is dense (sparsity 0) when ``n`` is even and ``end_epoch - update_frequency >``
        its epoch, else compressed at ``compression_sparsity``: dense first, so the last phase
        before ``end_epoch`` is always compressed. A dense phase after a compressed one starts
        with a ``momentum`` reset event (unless ``momentum_buffer_reset: false``). At
        ``end_epoch`` the compressed masks are taken once more (and released when
        ``leave_enabled`` is false)."""
        start, end, first, last = self.window(m)
        if last is None:
            raise PlanError(f"{m.type} (line {m.span.line}) needs an `end_epoch`; received -1")
        sparsity = _num(m, "compression_sparsity", 0.9)
        phase = _num(m, "update_frequency", 5)
        if phase <= 0:
            raise PlanError(f"{m.type} (line {m.span.line}): `update_frequency` must be >= 1")
        origin = max(start, 0)
        if (end - origin) / phase > MAX_EVENTS:
            raise PlanError(
                f"{m.type} (line {m.span.line}): `update_frequency` {phase:g} over epochs "
                f"{origin:g} to {end:g} makes more than {MAX_EVENTS:,} phases; raise it or "
                "shorten the epoch range"
            )
        steps: list[tuple[int, str, str, Any, Any]] = []
        reset = m.args.get("momentum_buffer_reset", True) is not False
        n = 0
        while origin + n * phase < end or n == 0:
            epoch = origin + n * phase
            dense = n % 2 == 0 and end - phase > epoch
            if dense and n and sparsity and reset:  # a dense phase after a compressed one
                steps.append((first_step_at(epoch, self.S), "update", "momentum", "reset", None))
            steps.append((first_step_at(epoch, self.S), "start" if n == 0 else "update", "sparsity",
                          0.0 if dense else sparsity, m.args.get("params")))
            n += 1
        if last > steps[-1][0]:
            steps.append((last, "end", "sparsity", sparsity, m.args.get("params")))
        if m.args.get("leave_enabled", True) is False:
            steps.append((last, "end", "masks", "release", m.args.get("params")))
        return self.points(i, m, steps)


#: Every kind of track: the name a declaration uses -> the builder method.
TRACKS: dict[str, Callable[[TrackBuilder, int, Modifier], Track]] = {
    name: getattr(TrackBuilder, name)
    for name in (
        "gradual", "acdc", "lr_class", "lr_function", "set_lr", "set_weight_decay", "trainable",
        "hold_masks", "layers", "quantization", "distillation",
    )
}
