"""Values over time: gradual interpolation and learning-rate schedules.

Each factory checks its arguments and returns a small pure function of the epoch (a float).
Formulas follow SparseML's, operation for operation, so that values are bit-identical where
SparseML was right, and differ where SPEC says it was wrong (no clamping, division by zero
or complex numbers there; see docs/schedule.md).

Gradual interpolation, ``p = clamp((e - start) / (end - start), 0, 1)``:

>>> f = gradual(0.05, 0.8, 0.0, 5.0, "cubic")
>>> [round(f(e), 4) for e in (0, 1, 2, 5, 9)]
[0.05, 0.416, 0.638, 0.8, 0.8]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

__all__ = [
    "INTERPOLATIONS",
    "interpolate",
    "gradual",
    "step_lr",
    "multi_step_lr",
    "exponential_lr",
    "cosine_warm_restarts_lr",
    "linear_function_lr",
    "cosine_function_lr",
    "cyclic_linear_function_lr",
    "decays",
]

Curve = Callable[[float], float]

#: ``y(p)`` for each ``inter_func``: how far along the way from init to final at progress p.
INTERPOLATIONS: dict[str, Callable[[float], float]] = {
    "linear": lambda p: p,
    "cubic": lambda p: 1 - (1 - p) ** 3,
    "inverse_cubic": lambda p: 1 - (1 - p) ** (1 / 3),
}
_EPSILON = 1e-6


def _check_function(inter_func: str) -> None:
    if inter_func not in INTERPOLATIONS:
        raise ValueError(
            f"Argument `inter_func` must be one of {sorted(INTERPOLATIONS)}. "
            f"Received: inter_func={inter_func!r}"
        )


def interpolate(
    epoch: float, start: float, end: float, init: float, final: float, inter_func: str = "linear"
) -> float:
    """``init + y(p) * (final - init)`` with ``p = clamp((epoch - start) / (end - start))``.

    ``start == end`` is a one-shot change: ``init`` before, ``final`` from ``end`` on.

    | epoch | linear 0->1 over [0, 4] | cubic | inverse_cubic |
    |-------|-------------------------|-------|---------------|
    | 1     | 0.25                    | 0.578 | 0.0914        |

    >>> [round(interpolate(1, 0, 4, 0.0, 1.0, f), 4) for f in ("linear", "cubic", "inverse_cubic")]
    [0.25, 0.5781, 0.0914]
    >>> interpolate(3, 3, 3, 0.1, 0.9, "inverse_cubic")
    0.9
    """
    _check_function(inter_func)
    if epoch >= end:
        return final
    if epoch <= start:
        return init
    p = (epoch - start) / (end - start)
    y = INTERPOLATIONS[inter_func](p)
    if y <= _EPSILON:
        return init
    if y >= 1.0 - _EPSILON:
        return final
    return y * (final - init) + init


def gradual(init: float, final: float, start: float, end: float, inter_func: str = "cubic") -> Curve:
    """The gradual schedule from ``init`` at ``start`` to ``final`` at ``end`` (epochs)."""
    _check_function(inter_func)
    if end != -1 and end < start:
        raise ValueError(
            f"Argument `end_epoch` must be >= `start_epoch`. Received: start_epoch={start}, end_epoch={end}"
        )
    origin = max(start, 0.0) if start != -1 else 0.0
    return lambda epoch: interpolate(epoch, origin, end, init, final, inter_func)


def decays(value: float, gamma: float, times: int) -> float:
    """``value`` multiplied by ``gamma`` ``times`` times, one multiplication after the other,
    as torch's chainable schedulers do (so the floats match theirs exactly).

    >>> decays(0.1, 0.9, 2)
    0.08100000000000002

    Beyond :data:`CHAINED_DECAYS` decays (a StepLR of tiny ``step_size`` far into a run) the
    closed form ``value * gamma ** times`` is used, so the cost is bounded whatever ``times``
    is; the result may then differ from the chained product in its last bits.
    """
    if times > CHAINED_DECAYS:
        if value == 0:
            return value
        try:
            return value * gamma ** times
        except OverflowError:
            return value * math.inf
    for _ in range(times):
        value *= gamma
    return value


#: The most decays :func:`decays` computes one multiplication at a time.
CHAINED_DECAYS = 100_000


def step_lr(init_lr: float, gamma: float, step_size: float, start: float) -> Curve:
    """StepLR: ``init * gamma ** floor((e - start) / step_size)``.

    >>> f = step_lr(0.05, 0.5, 2, 0)
    >>> [f(e) for e in (0, 1.75, 2, 4, 6)]
    [0.05, 0.05, 0.025, 0.0125, 0.00625]
    """
    if step_size <= 0:
        raise ValueError(f"Argument `step_size` must be > 0. Received: step_size={step_size}")
    origin = max(start, 0.0) if start != -1 else 0.0
    from .clock import exact

    size, first = exact(step_size), exact(origin)

    def curve(epoch: float) -> float:
        n = math.floor((exact(epoch) - first) / size)
        return decays(init_lr, gamma, max(n, 0))

    return curve


def multi_step_lr(init_lr: float, gamma: float, milestones: Sequence[float], start: float) -> Curve:
    """MultiStepLR: ``init * gamma ** (number of milestones <= e)``; milestones are absolute
    epochs after ``start``.

    >>> f = multi_step_lr(0.05, 0.1, [2, 5.5], 1)
    >>> [f(e) for e in (1, 1.75, 2, 5.5)]
    [0.05, 0.05, 0.005000000000000001, 0.0005000000000000001]
    """
    origin = max(start, 0.0) if start != -1 else 0.0
    for m in milestones:
        if m <= origin:
            raise ValueError(
                f"Argument `milestones` must all be > `start_epoch`. Received: milestones="
                f"{list(milestones)}, start_epoch={start}"
            )
    from .clock import exact

    marks = sorted(exact(m) for m in milestones)

    def curve(epoch: float) -> float:
        e = exact(epoch)
        return decays(init_lr, gamma, sum(1 for m in marks if m <= e))

    return curve


def exponential_lr(init_lr: float, gamma: float, start: float) -> Curve:
    """ExponentialLR: ``init * gamma ** floor(e - start)``, once per epoch (SPEC).

    >>> f = exponential_lr(0.1, 0.9, 0)
    >>> [f(e) for e in (0, 0.8, 1, 3)]
    [0.1, 0.1, 0.09000000000000001, 0.07290000000000002]
    """
    return step_lr(init_lr, gamma, 1, start)


def cosine_warm_restarts_lr(
    init_lr: float, eta_min: float, cycle_epochs: float, start: float, t_mult: int = 1
) -> Curve:
    """CosineAnnealingWarmRestarts: within a cycle of ``T_i`` epochs (``T_0 = cycle_epochs``,
    each next cycle ``t_mult`` times longer),
    ``eta_min + (init - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2``.

    >>> f = cosine_warm_restarts_lr(0.1, 0.0, 2, 0)
    >>> [round(f(e), 4) for e in (0, 1, 2, 3)]
    [0.1, 0.05, 0.1, 0.05]
    """
    if cycle_epochs <= 0:
        raise ValueError(f"Argument `cycle_epochs` must be > 0. Received: cycle_epochs={cycle_epochs}")
    if t_mult < 1:
        raise ValueError(f"Argument `T_mult` must be >= 1. Received: T_mult={t_mult}")
    origin = max(start, 0.0) if start != -1 else 0.0

    def curve(epoch: float) -> float:
        t_cur, t_i = max(epoch - origin, 0.0), float(cycle_epochs)
        if t_mult == 1 and t_cur / t_i > CHAINED_DECAYS:
            t_cur %= t_i  # the cycles all have one length: skip them at once (bounded cost)
        while t_cur >= t_i:
            t_cur -= t_i
            t_i *= t_mult
        return eta_min + (init_lr - eta_min) * (1 + math.cos(math.pi * t_cur / t_i)) / 2

    return curve


def linear_function_lr(init_lr: float, final_lr: float, start: float, end: float) -> Curve:
    """LR function ``linear``: ``init + x * (final - init)``, ``x = (e - s) / (end - s)``,
    ``s = max(start, 0)``; x is clamped to [0, 1].

    >>> f = linear_function_lr(0.1, 0.001, 0, 5)
    >>> [f(e) for e in (0, 0.25, 5)]
    [0.1, 0.09505000000000001, 0.0010000000000000009]
    """
    s = _function_range(start, end)

    def curve(epoch: float) -> float:
        x = min(max((epoch - s) / (end - s), 0.0), 1.0)
        return init_lr + x * (final_lr - init_lr)

    return curve


def cosine_function_lr(init_lr: float, final_lr: float, start: float, end: float) -> Curve:
    """LR function ``cosine``: half a cosine from ``init`` to ``final`` over ``[s, end]``
    (rising when ``final > init``).

    >>> f = cosine_function_lr(0.08, 0.0, 1, 6)
    >>> [f(e) for e in (1, 2, 6)]
    [0.08, 0.0723606797749979, 0.0]
    """
    s = _function_range(start, end)
    if final_lr < init_lr:
        y_range, y_shift, x_shift = init_lr - final_lr, final_lr, 0.0
    else:
        y_range, y_shift, x_shift = final_lr - init_lr, init_lr, math.pi

    def curve(epoch: float) -> float:
        x = min(max((epoch - s) / (end - s), 0.0), 1.0)
        return math.cos(x * math.pi + x_shift) * y_range / 2 + y_range / 2 + y_shift

    return curve


def cyclic_linear_function_lr(
    init_lr: float, final_lr: float, start: float, end: float, cycle_epochs: float, steps_per_epoch: int
) -> Curve:
    """LR function ``cyclic_linear``: linear from ``init`` to ``final`` over every cycle of
    ``cycle_epochs`` (counted in steps), then back to ``init``. A last cycle cut short by
    ``end_epoch`` is shortened to fit (as in SparseML), so the end step is back at ``init``.

    >>> f = cyclic_linear_function_lr(0.1, 0.01, 0, 4, 1.0, 5)
    >>> [f(k / 5) for k in (0, 1, 4, 5)]
    [0.1, 0.0775, 0.009999999999999995, 0.1]
    >>> g = cyclic_linear_function_lr(0.1, 0.01, 0, 2.5, 1.0, 4)  # cycles of 4, 4, then 2 steps
    >>> [round(g(k / 4), 4) for k in (7, 8, 9, 10)]
    [0.01, 0.1, 0.01, 0.1]
    """
    _function_range(start, end)
    cycle = round(cycle_epochs * steps_per_epoch)
    if cycle < 2:
        raise ValueError(
            "Argument `cycle_epochs` must span at least 2 optimizer steps. Received: "
            f"cycle_epochs={cycle_epochs} with steps_per_epoch={steps_per_epoch}"
        )
    origin = max(start, 0.0) if start != -1 else 0.0
    total = round((end - origin) * steps_per_epoch)
    full = (total // cycle) * cycle
    last_cycle = total - full

    def curve(epoch: float) -> float:
        current = round((epoch - origin) * steps_per_epoch)
        length = cycle
        if current > full and last_cycle:
            length = last_cycle
        if length < 2:
            return init_lr
        return init_lr - ((current % length) / (length - 1)) * (init_lr - final_lr)

    return curve


def _function_range(start: float, end: float) -> float:
    s = max(start, 0.0)
    if end <= s:
        raise ValueError(
            "Argument `end_epoch` must be > `start_epoch` for a learning-rate function. "
            f"Received: start_epoch={start}, end_epoch={end}"
        )
    return s
