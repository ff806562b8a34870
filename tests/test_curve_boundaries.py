"""The schedule curves and the step clock at their edges: an epoch on a start, an end, a
milestone or a cycle boundary; arguments on the limit of what a factory accepts. Expected values
are worked out by hand from SPEC.md's formulas (and written as those formulas), never read back
from the code. Found by mutation testing (docs/mutation.md)."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import pytest

from recipe_spec.schedule.clock import (
    epoch_of_step,
    exact,
    first_step_at,
    grid_step,
    next_grid_step,
)
from recipe_spec.schedule.curves import (
    cosine_function_lr,
    cosine_warm_restarts_lr,
    cyclic_linear_function_lr,
    decays,
    exponential_lr,
    gradual,
    interpolate,
    linear_function_lr,
    multi_step_lr,
    step_lr,
)

# -- interpolation: init + y(p) (final - init), p = clamp((e - start) / (end - start)) --------

def test_interpolate_defaults_to_linear_and_gradual_to_cubic() -> None:
    assert interpolate(1, 0, 4, 0.0, 1.0) == 0.25
    assert gradual(0.0, 1.0, 0, 4)(1) == 1 - 0.75 ** 3


def test_interpolate_snaps_within_a_millionth_of_either_end() -> None:
    """SparseML's interpolate returns the end value itself when y is within 1e-6 of it."""
    assert interpolate(1e-6, 0, 1, 0.2, 0.8) == 0.2  # y = 1e-6: snapped
    assert interpolate(1.5e-6, 0, 1, 0.2, 0.8) == 1.5e-6 * (0.8 - 0.2) + 0.2
    top = 1.0 - 1e-6
    assert interpolate(top, 0, 1, 0.2, 0.8) == 0.8  # y = 1 - 1e-6: snapped
    assert interpolate(1.0 - 2e-6, 0, 1, 0.2, 0.8) == (1.0 - 2e-6) * (0.8 - 0.2) + 0.2


@pytest.mark.parametrize(("func", "y"), [
    ("linear", 0.5), ("cubic", 1 - 0.5 ** 3), ("inverse_cubic", 1 - 0.5 ** (1 / 3)),
])
def test_interpolate_functions_at_half(func: str, y: float) -> None:
    assert interpolate(3, 2, 4, 0.1, 0.9, func) == y * (0.9 - 0.1) + 0.1


def test_gradual_start_and_end() -> None:
    f = gradual(0.0, 1.0, -1, 4, "linear")  # -1: from epoch 0
    assert [f(e) for e in (0, 1, 4, 5)] == [0.0, 0.25, 1.0, 1.0]
    assert gradual(0.0, 1.0, 1, 5, "linear")(3) == 0.5  # from its start, 1
    g = gradual(0.0, 1.0, 2, 2, "linear")  # start == end: one shot at the end
    assert [g(e) for e in (1.5, 2, 3)] == [0.0, 1.0, 1.0]
    gradual(0.0, 1.0, 0, -1)  # -1: never ends, accepted
    with pytest.raises(ValueError, match=r"^Argument `end_epoch` must be >= `start_epoch`. Received: "
                       r"start_epoch=2, end_epoch=1$"):
        gradual(0.0, 1.0, 2, 1)
    with pytest.raises(ValueError, match=r"end_epoch=1.5"):
        gradual(0.0, 1.0, 2, 1.5)
    with pytest.raises(ValueError, match=r"^Argument `inter_func` must be one of \['cubic', "
                       r"'inverse_cubic', 'linear'\]. Received: inter_func='quadratic'$"):
        gradual(0.0, 1.0, 0, 1, "quadratic")


# -- decays: value * gamma, one multiplication at a time -----------------------------------

def chained(value: float, gamma: float, times: int) -> float:
    for _ in range(times):
        value *= gamma
    return value


def test_decays_chained_up_to_the_limit() -> None:
    limit = 100_000  # CHAINED_DECAYS, as documented
    assert decays(0.1, 0.9999, limit) == chained(0.1, 0.9999, limit)  # differs from 0.1 * 0.9999 ** limit
    assert chained(0.1, 0.9999, limit) != 0.1 * 0.9999 ** limit
    assert decays(0.1, 0.9999, limit + 1) == 0.1 * 0.9999 ** (limit + 1)
    assert decays(0.1, 0.5, limit + 1) == 0.0  # underflows, as the product does
    assert decays(0.0, 2.0, limit + 1) == 0.0  # never 0 * inf
    assert decays(1.0, 0.5, limit + 1) == 0.0
    assert decays(0.1, 2.0, limit + 1) == math.inf


# -- learning-rate classes ---------------------------------------------------------------

def test_step_lr_on_exact_decimal_steps() -> None:
    f = step_lr(0.1, 0.5, 0.1, 0)  # 0.3 / 0.1 is 2.9999999999999996 in floats, 3 in decimals
    assert [f(0.29), f(0.3), f(0.31)] == [0.1 * 0.5 * 0.5, 0.1 * 0.5 * 0.5 * 0.5, 0.1 * 0.5 * 0.5 * 0.5]
    g = step_lr(0.1, 0.5, 2, -1)  # -1: from epoch 0
    assert [g(0), g(1.99), g(2)] == [0.1, 0.1, 0.05]
    h = step_lr(0.1, 0.5, 2, 3)
    assert [h(0), h(3), h(4.99), h(5)] == [0.1, 0.1, 0.1, 0.05]  # before its start: init
    with pytest.raises(ValueError, match=r"^Argument `step_size` must be > 0. Received: step_size=0$"):
        step_lr(0.1, 0.5, 0, 0)
    step_lr(0.1, 0.5, 1e-9, 0)


def test_multi_step_lr_milestones() -> None:
    f = multi_step_lr(0.1, 0.5, [0.3, 2], 0.1)
    assert [f(0.29), f(0.3), f(1.99), f(2)] == [0.1, 0.05, 0.05, 0.025]
    g = multi_step_lr(0.1, 0.5, [2, 1], 0)  # unsorted milestones
    assert [g(1), g(2)] == [0.05, 0.025]
    multi_step_lr(0.1, 0.5, [0.5], -1)  # -1 starts at 0: 0.5 is after it
    for marks, start in (([1], 1), ([0], -1), ([0.5, 3], 0.5), ([0], 0)):
        with pytest.raises(ValueError, match=r"^Argument `milestones` must all be > `start_epoch`. Received: "
                           rf"milestones={re.escape(str(marks))}, start_epoch={start}$"):
            multi_step_lr(0.1, 0.5, marks, start)


def test_exponential_lr_once_per_epoch() -> None:
    f = exponential_lr(0.1, 0.5, 1)
    assert [f(1), f(1.99), f(2), f(3)] == [0.1, 0.1, 0.05, 0.025]


def test_cosine_warm_restarts_cycles() -> None:
    f = cosine_warm_restarts_lr(0.1, 0.0, 2, 0, t_mult=2)  # cycles [0, 2), [2, 6), [6, 14)
    half = 0.0 + (0.1 - 0.0) * (1 + math.cos(math.pi / 2)) / 2
    assert [f(0), f(1), f(2), f(4), f(6), f(10)] == [0.1, half, 0.1, half, 0.1, half]
    g = cosine_warm_restarts_lr(0.1, 0.02, 2, 1)  # t_mult 1: every cycle 2 epochs, from 1
    quarter = 0.02 + (0.1 - 0.02) * (1 + math.cos(math.pi * 0.5 / 2)) / 2
    assert [g(0), g(1), g(1.5), g(3), g(3.5)] == [0.1, 0.1, quarter, 0.1, quarter]
    far = 1 + 2 * 100_000  # past the cycles skipped at once (CHAINED_DECAYS of them)
    assert [g(far), g(far + 2), g(far + 0.5)] == [0.1, 0.1, quarter]
    assert g(1 + 2 * (100_000 - 1) + 0.5) == quarter
    with pytest.raises(ValueError, match=r"^Argument `cycle_epochs` must be > 0. Received: cycle_epochs=0$"):
        cosine_warm_restarts_lr(0.1, 0.0, 0, 0)
    with pytest.raises(ValueError, match=r"^Argument `T_mult` must be >= 1. Received: T_mult=0$"):
        cosine_warm_restarts_lr(0.1, 0.0, 2, 0, t_mult=0)
    h = cosine_warm_restarts_lr(0.1, 0.0, 2, -1)  # -1: from 0
    assert h(1) == half
    # t_mult 2 from cycles of 1: cycle k starts at 2**k - 1 and lasts 2**k, far past 100,000 cycles' worth
    d = cosine_warm_restarts_lr(0.1, 0.0, 1, 0, t_mult=2)
    assert [d(2 ** 20 - 1), d(2 ** 20 - 1 + 2 ** 19), d(2 ** 21 - 1)] == [0.1, half, 0.1]


# -- learning-rate functions over [max(start, 0), end] ----------------------------------------

def test_linear_function_clamped() -> None:
    f = linear_function_lr(0.1, 0.02, 1, 5)
    assert [f(0), f(1), f(3), f(5), f(7)] == [0.1, 0.1, 0.1 + 0.5 * (0.02 - 0.1), 0.1 + (0.02 - 0.1), 0.1 + (0.02 - 0.1)]
    g = linear_function_lr(0.1, 0.02, -1, 4)  # -1: from 0
    assert g(1) == 0.1 + 0.25 * (0.02 - 0.1)


def test_cosine_function_falling_and_rising() -> None:
    down = cosine_function_lr(0.1, 0.02, 0, 4)
    assert down(0) == math.cos(0) * 0.08 / 2 + 0.08 / 2 + 0.02
    assert down(1) == math.cos(0.25 * math.pi) * (0.1 - 0.02) / 2 + (0.1 - 0.02) / 2 + 0.02
    assert down(9) == math.cos(math.pi) * 0.08 / 2 + 0.08 / 2 + 0.02
    up = cosine_function_lr(0.02, 0.1, 0, 4)  # rising: half a cosine shifted by pi
    assert up(1) == math.cos(0.25 * math.pi + math.pi) * (0.1 - 0.02) / 2 + (0.1 - 0.02) / 2 + 0.02
    assert up(-1) == math.cos(math.pi) * 0.08 / 2 + 0.08 / 2 + 0.02
    flat = cosine_function_lr(0.05, 0.05, 0, 4)
    assert flat(1) == math.cos(0.25 * math.pi + math.pi) * 0.0 / 2 + 0.0 / 2 + 0.05


@pytest.mark.parametrize(("start", "end"), [(3, 3), (3, 2), (-1, 0), (0, 0), (-0.5, 0)])
def test_functions_need_a_range(start: float, end: float) -> None:
    for make in (linear_function_lr, cosine_function_lr):
        with pytest.raises(ValueError, match=r"^Argument `end_epoch` must be > `start_epoch` for a "
                           rf"learning-rate function. Received: start_epoch={start}, end_epoch={end}$"):
            make(0.1, 0.01, start, end)
    with pytest.raises(ValueError):
        cyclic_linear_function_lr(0.1, 0.01, start, end, 1.0, 4)


def test_cyclic_linear_cycles() -> None:
    # cycles of 4 steps from step 0: init - (k % 4) / 3 * (init - final)
    f = cyclic_linear_function_lr(0.1, 0.01, 0, 2, 1.0, 4)
    assert [f(k / 4) for k in range(9)] == [0.1 - (k % 4) / 3 * (0.1 - 0.01) for k in range(9)]
    g = cyclic_linear_function_lr(0.1, 0.01, 1, 3.5, 1.0, 4)  # from epoch 1: 10 steps, 4 + 4 + 2
    assert [g(1 + k / 4) for k in (0, 3, 4, 8, 9, 10)] == [
        0.1, 0.1 - 3 / 3 * (0.1 - 0.01), 0.1, 0.1 - 0 / 1 * (0.1 - 0.01), 0.1 - 1 / 1 * (0.1 - 0.01), 0.1 - 0 / 1 * (0.1 - 0.01)]
    h = cyclic_linear_function_lr(0.1, 0.01, 0, 2.25, 1.0, 4)  # 9 steps: a last cycle of 1 step
    assert [h(2), h(2.25)] == [0.1, 0.1]
    # 11 steps: 4 + 4 + a last cycle of 3; past step 8 SparseML's formula takes ``cur mod 3``
    # (sparseml-semantics.md 3.3: the last partial cycle shortened, ``cur`` not reset)
    r = cyclic_linear_function_lr(0.1, 0.01, 0, 2.75, 1.0, 4)
    assert [r(k / 4) for k in range(12)] == [0.1 - (k % 4) / 3 * (0.1 - 0.01) for k in range(9)] + [
        0.1 - (k % 3) / 2 * (0.1 - 0.01) for k in (9, 10, 11)]
    c = cyclic_linear_function_lr(0.1, 0.01, 1, 4, 1.5, 4)  # cycles of 6 steps counted from epoch 1
    assert [c(1 + k / 4) for k in (0, 4, 5, 6, 11)] == [0.1 - (k % 6) / 5 * (0.1 - 0.01) for k in (0, 4, 5, 6, 11)]
    cyclic_linear_function_lr(0.1, 0.01, 0, 2, 0.5, 4)  # exactly 2 steps per cycle
    with pytest.raises(ValueError, match=r"^Argument `cycle_epochs` must span at least 2 optimizer steps. "
                       r"Received: cycle_epochs=0.25 with steps_per_epoch=4$"):
        cyclic_linear_function_lr(0.1, 0.01, 0, 2, 0.25, 4)


# -- the clock: step k at epoch k / S; an event at t on the first step with e_k >= t ----------

@pytest.mark.parametrize(("epoch", "spe", "step"), [
    (-1, 4, 0), (0, 4, 0), (-0.5, 4, 0), (0.25, 4, 1), (0.26, 4, 2), (0.3, 10, 3), (0.7, 10, 7),
    (1.1, 10, 11), (2, 3, 6), (0.1, 3, 1),
])
def test_first_step_at(epoch: float, spe: int, step: int) -> None:
    assert first_step_at(epoch, spe) == step


def test_epoch_of_step_and_exact() -> None:
    assert epoch_of_step(7, 7) == 1.0 and epoch_of_step(0, 5) == 0.0
    assert epoch_of_step(11, 4) == 2 + 3 / 4
    assert exact(0.1) == Fraction(1, 10) and exact(3) == Fraction(3)
    assert exact(Fraction(2, 3)) == Fraction(2, 3)


@pytest.mark.parametrize(("start", "freq", "spe", "steps"), [
    (0, 0.5, 5, [0, 3, 5, 8, 10]),  # ceil(2.5) = 3, ceil(7.5) = 8
    (-1, 0.5, 4, [0, 2, 4, 6, 8]),  # -1: from 0
    (1, 0.3, 10, [10, 13, 16, 19, 22]),  # 0.3 * 10 exactly 3
    (0.5, 1, 3, [2, 5, 8, 11, 14]),  # ceil(1.5) = 2
])
def test_update_grid(start: float, freq: float, spe: int, steps: list[int]) -> None:
    assert [grid_step(start, freq, n, spe) for n in range(5)] == steps
    for k in range(steps[-1] + 1):
        assert next_grid_step(start, freq, k, spe) == min(s for s in steps if s >= k), k


def test_next_grid_step_agrees_with_the_grid_on_awkward_decimals() -> None:
    """The integer form of ``next_grid_step`` against the grid's points enumerated one by one,
    on starts and spacings whose decimals have unlike denominators (1/3 of an epoch, 88255.07...)."""
    import random

    rnd = random.Random(7)
    for _ in range(300):
        start = rnd.choice([-1, 0, 0.1, 2.3, 1e-3, 19.999, 88255.07003334555, round(rnd.uniform(0, 9), 3)])
        freq = rnd.choice([0.25, 1e-3, 3.7, 1 / 3, 0.1, round(rnd.uniform(0.01, 4), 4)])
        spe = rnd.randint(1, 400)
        points = [grid_step(start, freq, n, spe) for n in range(60)]
        span = range(points[0] - 3, points[-1] + 1)
        for k in rnd.sample(span, min(20, len(span))):
            assert next_grid_step(start, freq, k, spe) == min(p for p in points if p >= k), (start, freq, spe, k)
