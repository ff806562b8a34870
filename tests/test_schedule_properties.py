"""Property tests of the compiled schedule (SPEC "Schedule").

Random but valid modifiers, compiled for a random ``steps_per_epoch``:

* gradual pruning: targets never decrease along one modifier's events, start at ``init`` on an
  exact-start step, end at exactly ``final`` at step ``ceil(end * S)``, stay finite and inside
  ``[min(init, final), max(init, final)]``; update steps are strictly increasing and are exactly
  the fixed grid ``ceil((start + n * uf) * S)`` (every step for ``uf: -1``), computed here with
  exact fractions of the written decimals;
* learning rates (every class and function): finite and > 0 when the LRs involved are > 0; a
  cosine function to ``final_lr: 0`` reaches 0 only at its end step;
* ``events_at`` step by step, and in any order, gives what ``iter_events`` gives.
"""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import recipe_spec
from recipe_spec.schedule import compile_plan

SETTINGS = settings(deadline=None, max_examples=120, suppress_health_check=[HealthCheck.too_slow])


def dec(x: float) -> Fraction:
    """A recipe decimal as an exact fraction (what the recipe says, not the binary float)."""
    return Fraction(repr(float(x)))


def decimals(lo: int, hi: int, places: int) -> st.SearchStrategy[float]:
    """Decimals ``n / 10**places`` in ``[lo, hi]`` (what people write in recipes)."""
    scale = 10**places
    return st.integers(lo * scale, hi * scale).map(lambda n: round(n / scale, places))


starts = st.one_of(
    st.just(-1.0),
    st.integers(0, 20).map(lambda n: n / 4),  # 0, .25, ..., 5
    decimals(0, 5, 1),
    decimals(0, 5, 3),
)
durations = st.one_of(
    st.integers(1, 24).map(lambda n: n / 4), decimals(0, 6, 2).filter(lambda d: d > 0)
)
update_frequencies = st.one_of(
    st.just(-1.0),
    decimals(0, 3, 2).filter(lambda u: u > 0),
    st.floats(0.05, 3.0).map(lambda u: round(u, 4)).filter(lambda u: u > 0),
)
steps_per_epoch = st.integers(1, 50)


@st.composite
def gmp_modifiers(draw):
    init = draw(decimals(0, 1, 3).filter(lambda v: v <= 0.9))
    final = draw(decimals(0, 1, 3).filter(lambda v: init <= v <= 0.99))
    start = draw(starts)
    origin = 0.0 if start == -1 else start
    end = round(origin + draw(durations), 6)
    return {
        "init": init,
        "final": final,
        "start": start,
        "end": end,
        "uf": draw(update_frequencies),
        "inter": draw(st.sampled_from(["linear", "cubic", "inverse_cubic"])),
    }


def gmp_yaml(g) -> str:
    return (
        "  - !GMPruningModifier\n"
        "    params: __ALL_PRUNABLE__\n"
        f"    init_sparsity: {g['init']!r}\n    final_sparsity: {g['final']!r}\n"
        f"    start_epoch: {g['start']!r}\n    end_epoch: {g['end']!r}\n"
        f"    update_frequency: {g['uf']!r}\n    inter_func: {g['inter']}\n"
    )


def compiled(body: str, S: int):
    return compile_plan(recipe_spec.loads("modifiers:\n" + body), S)


def fixed_grid(start: float, end: float, uf: float, S: int) -> list[int]:
    """SPEC: the first step with e_k >= start + n*uf for every grid point before the end, then
    the end step; ``uf: -1`` = every step. Exact fractions of the written decimals."""
    origin = Fraction(0) if start == -1 else dec(start)
    first, last = math.ceil(origin * S), math.ceil(dec(end) * S)
    if uf == -1:
        return list(range(first, last + 1))
    points, n = {last}, 0
    while origin + n * dec(uf) < dec(end):
        points.add(math.ceil((origin + n * dec(uf)) * S))
        n += 1
    return sorted(points)


@SETTINGS
@given(g=gmp_modifiers(), S=steps_per_epoch)
def test_gradual_pruning_properties(g, S):
    plan = compiled(gmp_yaml(g), S)
    evs = list(plan.iter_events())
    assert evs and all(e.target == "sparsity" for e in evs)
    values = [e.value for e in evs]
    steps = [e.step for e in evs]

    # finite, inside [min, max], never decreasing
    lo, hi = min(g["init"], g["final"]), max(g["init"], g["final"])
    assert all(isinstance(v, float) and math.isfinite(v) for v in values), values
    assert all(lo <= v <= hi for v in values), (lo, hi, values)
    assert all(a <= b for a, b in zip(values, values[1:], strict=False)), values

    # first value is init on an exact-start step; last is exactly final at ceil(end*S)
    origin = Fraction(0) if g["start"] == -1 else dec(g["start"])
    if (origin * S).denominator == 1:
        assert steps[0] == origin * S
        assert values[0] == g["init"], (steps[0], values[0])
    assert steps[-1] == math.ceil(dec(g["end"]) * S)
    assert values[-1] == g["final"]
    assert evs[-1].action == "end"

    # strictly increasing, exactly on the fixed grid
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False)), steps
    assert steps == fixed_grid(g["start"], g["end"], g["uf"], S)


# --------------------------------------------------------------------------------------------
# Learning rates
# --------------------------------------------------------------------------------------------

lrs = decimals(0, 1, 4).filter(lambda v: v > 0)
# gamma >= .1 and step sizes >= max(.25, one step): at most ~60 decays over a run, so a
# product of positive floats cannot underflow to 0 (a step size under one optimizer step
# would decay several times per step: SparseML's round(step_size*S) = 0 crashes there)
gammas = decimals(0, 1, 2).filter(lambda v: v >= 0.1)


@st.composite
def lr_modifiers(draw):
    """(yaml, S, kind, start, init_lr, final_lr or None) of a random LearningRate(Function)Modifier."""
    S = draw(steps_per_epoch)
    start = draw(starts)
    origin = 0.0 if start == -1 else start
    init_lr = draw(lrs)
    kind = draw(
        st.sampled_from(
            [
                "StepLR",
                "MultiStepLR",
                "ExponentialLR",
                "CosineAnnealingWarmRestarts",
                "linear",
                "cosine",
                "cyclic_linear",
            ]
        )
    )
    if kind in ("linear", "cosine", "cyclic_linear"):
        end = round(origin + draw(durations), 6)
        final_lr = draw(lrs)
        extra = ""
        if kind == "cyclic_linear":
            cycle = draw(decimals(0, 3, 2).filter(lambda c: round(c * S) >= 2))
            extra = f", cycle_epochs: {cycle!r}"
        body = (
            f"  - !LearningRateFunctionModifier {{lr_func: {kind}, init_lr: {init_lr!r}, final_lr: {final_lr!r}, "
            f"start_epoch: {start!r}, end_epoch: {end!r}{extra}}}\n"
        )
        return body, S, kind, start, init_lr, final_lr
    end = draw(st.one_of(st.just(-1.0), durations.map(lambda d: round(origin + d, 6))))
    final_lr = None
    if kind == "StepLR":
        size = draw(decimals(0, 3, 2).filter(lambda v: v >= 0.25 and v * S >= 1))
        kwargs = f"{{step_size: {size!r}, gamma: {draw(gammas)!r}}}"
    elif kind == "ExponentialLR":
        kwargs = f"{{gamma: {draw(gammas)!r}}}"
    elif kind == "MultiStepLR":
        top = end if end != -1 else origin + 6
        marks = draw(
            st.lists(
                decimals(0, 12, 2).filter(lambda m: origin < m < top),
                min_size=1,
                max_size=4,
                unique=True,
            )
        )
        kwargs = f"{{milestones: {sorted(marks)!r}, gamma: {draw(gammas)!r}}}"
    else:
        eta_min = (
            draw(decimals(0, 1, 4).filter(lambda v: 0 < v < init_lr)) if init_lr > 0.0001 else None
        )
        if eta_min is None:
            eta_min = init_lr / 2
        final_lr = eta_min
        t_0 = draw(decimals(0, 3, 2).filter(lambda v: v > 0))
        kwargs = f"{{cycle_epochs: {t_0!r}, T_mult: {draw(st.sampled_from([1, 2]))}, lr_min: {eta_min!r}}}"
    body = (
        f"  - !LearningRateModifier {{lr_class: {kind}, lr_kwargs: {kwargs}, init_lr: {init_lr!r}, "
        f"start_epoch: {start!r}, end_epoch: {end!r}}}\n"
    )
    return body, S, kind, start, init_lr, final_lr


@SETTINGS
@given(m=lr_modifiers())
def test_learning_rates_finite_and_positive(m):
    body, S, kind, start, init_lr, final_lr = m
    plan = compiled(body, S)
    stop = (
        plan.last_event_step + 1
        if plan.last_event_step is not None
        else max(plan.total_steps, 1) + 3 * S
    )
    evs = [e for e in plan.iter_events(0, stop) if e.target == "lr"]
    assert evs
    if ((Fraction(0) if start == -1 else dec(start)) * S).denominator == 1:
        # an exact start step has init_lr: exactly, except for the cosine forms, whose
        # formulas (cos(0)*r/2 + r/2 + final; eta_min + (init - eta_min)*2/2) may be an ulp off
        if kind in ("cosine", "CosineAnnealingWarmRestarts"):
            assert math.isclose(evs[0].value, init_lr, rel_tol=1e-12)
        else:
            assert evs[0].value == init_lr
    for e in evs:
        assert isinstance(e.value, float) and math.isfinite(e.value), e
        assert e.value > 0, e
        if final_lr is not None:
            assert (
                min(init_lr, final_lr) * (1 - 1e-12)
                <= e.value
                <= max(init_lr, final_lr) * (1 + 1e-12)
            ), e
        else:  # decaying classes: never above init_lr
            assert e.value <= init_lr, e


@SETTINGS
@given(
    S=steps_per_epoch,
    start=starts,
    duration=durations,
    init_lr=lrs,
)
def test_cosine_to_zero_reaches_zero_only_at_the_end(S, start, duration, init_lr):
    origin = 0.0 if start == -1 else start
    end = round(origin + duration, 6)
    plan = compiled(
        f"  - !LearningRateFunctionModifier {{lr_func: cosine, init_lr: {init_lr!r}, final_lr: 0.0, "
        f"start_epoch: {start!r}, end_epoch: {end!r}}}\n",
        S,
    )
    evs = list(plan.iter_events())
    last = math.ceil(dec(end) * S)
    assert evs[-1].step == last and evs[-1].value == 0.0
    assert all(math.isfinite(e.value) and e.value > 0 for e in evs[:-1]), [
        e for e in evs if e.value <= 0
    ]
    assert all(a.value >= b.value for a, b in zip(evs, evs[1:], strict=False))  # decreasing


# --------------------------------------------------------------------------------------------
# events_at == iter_events
# --------------------------------------------------------------------------------------------


@SETTINGS
@given(g=gmp_modifiers(), m=lr_modifiers(), order=st.lists(st.integers(0, 400), max_size=25))
def test_events_at_matches_iter_events(g, m, order):
    body, S, *_ = m
    plan = compiled(gmp_yaml(g) + body, S)
    stop = min(max(math.ceil(dec(g["end"]) * S), plan.total_steps) + 2 * S, 600)
    sequential = [plan.events_at(k) for k in range(stop)]
    flat = tuple(e for evs in sequential for e in evs)
    assert flat == tuple(plan.iter_events(0, stop))
    assert all(e.step == k for k, evs in enumerate(sequential) for e in evs)
    # any order: the same events as in sequence
    for k in order:
        k = k % stop
        assert plan.events_at(k) == sequential[k]
    # a fresh plan, asked from the middle on
    again = compiled(gmp_yaml(g) + body, S)
    mid = stop // 2
    assert tuple(e for k in range(mid, stop) for e in again.events_at(k)) == tuple(
        plan.iter_events(mid, stop)
    )


@st.composite
def stepped_lr(draw):
    S = draw(steps_per_epoch)
    start = draw(st.one_of(st.just(-1.0), decimals(0, 3, 2)))
    origin = 0.0 if start == -1 else start
    end = round(origin + draw(decimals(0, 6, 2).filter(lambda d: d > 0)), 6)
    gamma = draw(gammas)
    if draw(st.booleans()):
        size = draw(decimals(0, 3, 2).filter(lambda v: v >= 0.25 and v * S >= 1))
        return "StepLR", {"step_size": size, "gamma": gamma}, S, start, end
    marks = draw(
        st.lists(
            decimals(0, 9, 2).filter(lambda m: origin < m < end),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    return "MultiStepLR", {"milestones": sorted(marks), "gamma": gamma}, S, start, end


@SETTINGS
@example(m=("MultiStepLR", {"milestones": [1.36, 3], "gamma": 0.1}, 25, 0.0, 4.0))
@example(m=("StepLR", {"step_size": 1, "gamma": 0.5}, 25, 0.36, 4.0))
@given(m=stepped_lr())
def test_stepped_lr_values_follow_the_exact_formula(m):
    """SPEC: StepLR ``init * gamma^floor((e - start)/step_size)``, MultiStepLR
    ``init * gamma^(#milestones <= e)``, with ``e = k/S`` exactly; each event's value is that
    formula at its step (decays applied one multiplication at a time, as torch does)."""
    cls, kwargs, S, start, end = m
    init_lr = 0.1
    plan = compiled(
        f"  - !LearningRateModifier {{lr_class: {cls}, lr_kwargs: {kwargs!r}, init_lr: {init_lr}, "
        f"start_epoch: {start!r}, end_epoch: {end!r}}}\n",
        S,
    )
    origin = Fraction(0) if start == -1 else dec(start)
    for e in plan.iter_events():
        epoch = Fraction(e.step, S)
        if cls == "StepLR":
            n = math.floor((epoch - origin) / dec(kwargs["step_size"]))
        else:
            n = sum(1 for mark in kwargs["milestones"] if dec(mark) <= epoch)
        want = init_lr
        for _ in range(n):
            want *= kwargs["gamma"]
        assert e.value == want, (e.step, e.value, want)
