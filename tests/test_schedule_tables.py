"""Hand-computed schedule tables (SPEC "Schedule" and "What SparseML's own runs showed").

Every expected value below is a literal worked out by hand from the SPEC formulas; the comment
beside it shows the arithmetic. Values that are exact in binary (halvings, 0.578125, ...) are
compared with ``==``; the others with a relative tolerance of 1e-12 (the conformance test is the
one that pins the floats bit for bit against SparseML).

Conventions: step k is at epoch k/S; an event's ``action`` is start/update/end/set.
"""

from __future__ import annotations

import math

import pytest

import recipe_spec
from recipe_spec.schedule import compile_plan, curves
from recipe_spec.schedule.events import PlanError


def plan_of(body: str, S: int):
    return compile_plan(recipe_spec.loads("modifiers:\n" + body), S)


def table(plan, target: str | None = None, stop: int | None = None) -> list[tuple[int, object]]:
    """(step, value) of every event (of ``target``), in order."""
    return [
        (e.step, e.value) for e in plan.iter_events(0, stop) if target is None or e.target == target
    ]


def steps_of(plan, target: str | None = None, stop: int | None = None) -> list[int]:
    return [k for k, _ in table(plan, target, stop)]


class approx:  # noqa: N801 - reads like pytest.approx
    """Compare with ``==`` except floats (anywhere inside tuples/lists), which may differ
    from the hand value by a relative 1e-12. Exact values stay exact: ``0.0 == 0.0``."""

    def __init__(self, expected):
        self.expected = expected

    @classmethod
    def _same(cls, a, b) -> bool:
        if isinstance(b, float) and isinstance(a, (int, float)) and not isinstance(a, bool):
            return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
        if isinstance(b, (list, tuple)) and isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(cls._same(x, y) for x, y in zip(a, b, strict=True))
        return a == b

    def __eq__(self, actual) -> bool:
        return self._same(actual, self.expected)

    def __repr__(self) -> str:
        return f"approx({self.expected!r})"


def gmp(start, end, uf, init=0.05, final=0.8, inter="cubic", extra="") -> str:
    return (
        "  - !GMPruningModifier\n"
        "    params: [conv2.weight]\n"
        f"    init_sparsity: {init}\n    final_sparsity: {final}\n"
        f"    start_epoch: {start}\n    end_epoch: {end}\n"
        f"    update_frequency: {uf}\n    inter_func: {inter}\n{extra}"
    )


# --------------------------------------------------------------------------------------------
# Update grid
# --------------------------------------------------------------------------------------------


def test_grid_uf1_s4():
    # start 0, end 5, uf 1, S 4: grid 0,1,2,3,4 epochs -> steps 0,4,8,12,16; end 5*4 = 20
    plan = plan_of(gmp(0, 5, 1), 4)
    assert table(plan) == approx(
        [
            (0, 0.05),  # p 0
            (4, 0.416),  # p .2: y = 1-.8^3 = .488;  .05 + .488*.75 = .416
            (8, 0.638),  # p .4: y = 1-.6^3 = .784;  .05 + .784*.75 = .638
            (12, 0.752),  # p .6: y = 1-.4^3 = .936; .05 + .936*.75 = .752
            (16, 0.794),  # p .8: y = 1-.2^3 = .992; .05 + .992*.75 = .794
            (20, 0.8),  # end: exactly final
        ]
    )
    assert [e.action for e in plan.iter_events()] == [
        "start",
        "update",
        "update",
        "update",
        "update",
        "end",
    ]
    assert table(plan)[-1][1] == 0.8


def test_grid_uf05_s5_fixed_no_drift():
    # start 0, end 4, uf .5, S 5 (uf*S = 2.5): grid points 0,.5,1,...,3.5 -> k = ceil(2.5 n):
    # 0, 2.5->3, 5, 7.5->8, 10, 12.5->13, 15, 17.5->18; end 4*5 = 20. (SparseML drifts: 0,3,6,9,...)
    plan = plan_of(gmp(0, 4, 0.5, init=0.1, final=0.7, inter="linear"), 5)
    assert table(plan) == approx(
        [
            (0, 0.1),
            (3, 0.19),  # e .6,  p .15: .1 + .15*.6 = .19
            (5, 0.25),  # e 1,   p .25: .1 + .25*.6 = .25
            (8, 0.34),  # e 1.6, p .4:  .1 + .4*.6  = .34
            (10, 0.4),  # e 2,   p .5
            (13, 0.49),  # e 2.6, p .65: .1 + .39 = .49
            (15, 0.55),  # e 3,   p .75
            (18, 0.64),  # e 3.6, p .9:  .1 + .54 = .64
            (20, 0.7),
        ]
    )


def test_grid_every_step():
    # uf -1: every step from start to end; start 0, end 1, S 4, linear 0 -> .8
    plan = plan_of(gmp(0, 1, -1, init=0.0, final=0.8, inter="linear"), 4)
    assert table(plan) == approx([(0, 0.0), (1, 0.2), (2, 0.4), (3, 0.6), (4, 0.8)])  # .8 * k/4


def test_grid_fractional_start_end_s4():
    # start 1.5, end 6.5, uf 1, S 4: grid 1.5,2.5,...,5.5 -> 6,10,14,18,22; end 6.5*4 = 26
    plan = plan_of(gmp(1.5, 6.5, 1, init=0.05, final=0.85), 4)
    assert table(plan) == approx(
        [
            (6, 0.05),
            (10, 0.4404),  # p (2.5-1.5)/5 = .2: y .488; .05 + .488*.8 = .4404
            (14, 0.6772),  # p .4: y .784; .05 + .6272
            (18, 0.7988),  # p .6: y .936; .05 + .7488
            (22, 0.8436),  # p .8: y .992; .05 + .7936
            (26, 0.85),
        ]
    )


def test_grid_fractional_start_end_s7():
    # README: S 7, start 1.5, end 6.5 starts at k = ceil(10.5) = 11 and ends at ceil(45.5) = 46;
    # grid 1.5 + n: 10.5, 17.5, 24.5, 31.5, 38.5 -> 11, 18, 25, 32, 39
    assert steps_of(plan_of(gmp(1.5, 6.5, 1), 7)) == [11, 18, 25, 32, 39, 46]


def test_grid_start_minus_one_is_step_zero():
    # start -1 = from the start: origin 0; uf 1, end 2, S 3 -> 0, 3, end 6
    assert steps_of(plan_of(gmp(-1, 2, 1), 3)) == [0, 3, 6]


@pytest.mark.parametrize("inter", ["linear", "cubic", "inverse_cubic"])
def test_start_equals_end_is_one_shot(inter):
    # start == end == 2, S 4: one event at step 8 with exactly final_sparsity (no division by zero)
    plan = plan_of(gmp(2, 2, 1, inter=inter), 4)
    assert table(plan) == [(8, 0.8)]


# --------------------------------------------------------------------------------------------
# Interpolation and clamping
# --------------------------------------------------------------------------------------------

# 0 -> 1 over [0, 4]; p = e/4
INTERP = [
    ("linear", 1, 0.25),
    ("linear", 2, 0.5),
    ("linear", 3, 0.75),
    ("cubic", 1, 0.578125),  # 1 - .75^3 = 1 - .421875
    ("cubic", 2, 0.875),  # 1 - .5^3  = 1 - .125
    ("cubic", 3, 0.984375),  # 1 - .25^3 = 1 - .015625
]
INTERP_INV = [
    ("inverse_cubic", 1, 0.0914397035839),  # 1 - .75^(1/3) = 1 - .9085602964161
    ("inverse_cubic", 2, 0.2062994740159),  # 1 - .5^(1/3)  = 1 - .7937005259841
    ("inverse_cubic", 3, 0.3700394750526),  # 1 - .25^(1/3) = 1 - .6299605249474
]


@pytest.mark.parametrize("inter,e,want", INTERP)
def test_interpolate_exact_points(inter, e, want):
    assert curves.interpolate(e, 0, 4, 0.0, 1.0, inter) == want


@pytest.mark.parametrize("inter,e,want", INTERP_INV)
def test_interpolate_inverse_cubic(inter, e, want):
    assert curves.interpolate(e, 0, 4, 0.0, 1.0, inter) == pytest.approx(want, abs=1e-12)


def test_interpolate_with_init_and_final():
    # .05 -> .8 cubic over [0, 5] at e = 2: p .4, y .784, .05 + .784*.75 = .638
    assert curves.interpolate(2, 0, 5, 0.05, 0.8, "cubic") == pytest.approx(0.638, rel=1e-12)
    # decreasing is allowed by the formula: .9 -> .1 linear over [0, 4] at e 1: .9 - .25*.8 = .7
    assert curves.interpolate(1, 0, 4, 0.9, 0.1, "linear") == pytest.approx(0.7, rel=1e-12)


@pytest.mark.parametrize("inter", ["linear", "cubic", "inverse_cubic"])
def test_clamping_beyond_end_and_before_start(inter):
    assert curves.interpolate(9, 0, 4, 0.1, 0.9, inter) == 0.9  # p = 9/4 clamps to 1
    assert curves.interpolate(4.0000001, 0, 4, 0.1, 0.9, inter) == 0.9
    assert curves.interpolate(0.5, 1, 4, 0.1, 0.9, inter) == 0.1  # p < 0 clamps to 0
    f = curves.gradual(0.1, 0.9, 0, 4, inter)
    assert isinstance(f(100.0), float) and f(100.0) == 0.9  # no complex number


def test_end_step_after_end_epoch_is_exactly_final():
    # end 2.5, S 3: end step ceil(7.5) = 8 at e = 2.667 > 2.5; inverse_cubic would be complex
    # past the end without the clamp (SparseML: TypeError); ours: exactly final
    plan = plan_of(gmp(0, 2.5, 1, inter="inverse_cubic"), 3)
    assert steps_of(plan) == [0, 3, 6, 8]
    assert table(plan)[-1] == (8, 0.8)


# --------------------------------------------------------------------------------------------
# Learning-rate classes
# --------------------------------------------------------------------------------------------


def lr_mod(cls: str, kwargs: str, init_lr: float, start, end) -> str:
    return (
        f"  - !LearningRateModifier {{lr_class: {cls}, lr_kwargs: {kwargs}, init_lr: {init_lr}, "
        f"start_epoch: {start}, end_epoch: {end}}}\n"
    )


def test_step_lr_open_ended():
    # .05 * .5^floor(e/2), S 4: changes at e 2,4,6 -> k 8,16,24 (halvings are exact)
    plan = plan_of(lr_mod("StepLR", "{gamma: 0.5, step_size: 2}", 0.05, 0, -1), 4)
    assert table(plan, "lr", 28) == [(0, 0.05), (8, 0.025), (16, 0.0125), (24, 0.00625)]


def test_step_lr_skips_the_end_and_keeps_the_last_value():
    # .08 * .5^floor(e-1) from 1 to 5, S 2: k 2 (.08), 4 (.04), 6 (.02), 8 (.01);
    # the change at e = 5 (k 10, would be .005) lands exactly on end_epoch: skipped, .01 kept
    plan = plan_of(lr_mod("StepLR", "{gamma: 0.5, step_size: 1}", 0.08, 1, 5), 2)
    assert table(plan, "lr", 40) == [(2, 0.08), (4, 0.04), (6, 0.02), (8, 0.01)]
    assert plan.events_at(10) == ()


def test_multi_step_lr():
    # .05 * .1^(#milestones <= e), milestones [2, 5.5] absolute, start 1, end 6, S 4:
    # start k 4 (.05); 2*4 = 8 (.005); 5.5*4 = 22 (.0005); end 6*4 = 24: nothing
    plan = plan_of(lr_mod("MultiStepLR", "{milestones: [2, 5.5], gamma: 0.1}", 0.05, 1, 6), 4)
    assert table(plan, "lr", 40) == approx([(4, 0.05), (8, 0.005), (22, 0.0005)])


def test_exponential_lr_once_per_epoch():
    # .1 * .9^floor(e), S 5, 0 -> 4: k 0 (.1), 5 (.09), 10 (.081), 15 (.0729); k 20 (end) skipped,
    # so the LR ends at .1*.9^3 = .0729 (README)
    plan = plan_of(lr_mod("ExponentialLR", "{gamma: 0.9}", 0.1, 0, 4), 5)
    assert table(plan, "lr", 40) == approx([(0, 0.1), (5, 0.09), (10, 0.081), (15, 0.0729)])


def test_cosine_annealing_warm_restarts():
    # lr_min (eta_min) 0, cycle_epochs (T_0) 2, .1 * (1 + cos(pi * t/2)) / 2, S 2, 0 -> 4, a value
    # every step (SparseML requires the spelling lr_min / cycle_epochs and renames them for torch):
    c45 = 0.1 * (1 + 0.7071067811865476) / 2  # t .5: cos(pi/4)  -> .08535533905932738
    c135 = 0.1 * (1 - 0.7071067811865476) / 2  # t 1.5: cos(3pi/4) -> .014644660940672624
    plan = plan_of(
        lr_mod("CosineAnnealingWarmRestarts", "{lr_min: 0.0, cycle_epochs: 2}", 0.1, 0, 4), 2
    )
    assert table(plan, "lr", 40) == approx(
        [
            (0, 0.1),
            (1, c45),
            (2, 0.05),
            (3, c135),  # t 0, .5, 1 (cos(pi/2) = 0 -> .05), 1.5
            (4, 0.1),
            (5, c45),
            (6, 0.05),
            (7, c135),  # restart at e 2; k 8 = end: skipped
        ]
    )


def test_cosine_annealing_warm_restarts_t_mult():
    # T_0 1, T_mult 2: cycles [0,1), [1,3), [3,7); S 2 (torch's own names are accepted too)
    plan = plan_of(
        lr_mod("CosineAnnealingWarmRestarts", "{T_0: 1, T_mult: 2, eta_min: 0.0}", 0.1, 0, -1), 2
    )
    c45 = 0.1 * (1 + 0.7071067811865476) / 2
    c135 = 0.1 * (1 - 0.7071067811865476) / 2
    assert table(plan, "lr", 7) == approx(
        [
            (0, 0.1),
            (1, 0.05),  # t .5 of 1: cos(pi/2)
            (2, 0.1),
            (3, c45),
            (4, 0.05),
            (5, c135),  # t 0, .5, 1, 1.5 of 2
            (6, 0.1),  # e 3: restart, T 4
        ]
    )


# --------------------------------------------------------------------------------------------
# Learning-rate functions
# --------------------------------------------------------------------------------------------


def lr_fn(func: str, init_lr: float, final_lr: float, start, end, extra: str = "") -> str:
    return (
        f"  - !LearningRateFunctionModifier {{lr_func: {func}, init_lr: {init_lr}, final_lr: {final_lr}, "
        f"start_epoch: {start}, end_epoch: {end}{extra}}}\n"
    )


def test_lr_function_linear():
    # .1 -> .001 over [0, 5], S 4: lr = .1 + (e/5)*(-.099), every step 0..20, then nothing
    plan = plan_of(lr_fn("linear", 0.1, 0.001, 0, 5), 4)
    values = dict(table(plan, "lr", 40))
    assert sorted(values) == list(range(21))
    assert [values[0], values[1], values[10], values[20]] == approx(
        [
            0.1,
            0.09505,  # e .25: x .05, .1 - .00495
            0.0505,  # e 2.5: x .5,  .1 - .0495
            0.001,  # end
        ]
    )


def test_lr_function_cosine_decreasing():
    # .08 -> 0 over [1, 6], S 5: lr = cos(pi x) * .04 + .04, x = (e-1)/5; steps 5..30
    plan = plan_of(lr_fn("cosine", 0.08, 0.0, 1, 6), 5)
    values = dict(table(plan, "lr", 60))
    assert sorted(values) == list(range(5, 31))
    assert [values[5], values[10], values[15], values[30]] == approx(
        [
            0.08,
            0.07236067977499790,  # e 2, x .2: cos(.2pi) = .8090169943749475; .04*1.8090169943749475
            0.05236067977499790,  # e 3, x .4: cos(.4pi) = .3090169943749474; .04*1.3090169943749474
            0.0,  # x 1: cos(pi)*.04 + .04 = 0
        ]
    )
    assert values[30] == 0.0


def test_lr_function_cosine_rising():
    # .01 -> .1 over [0, 4], S 2: lr = cos(pi x + pi) * .045 + .045 + .01, x = e/4
    plan = plan_of(lr_fn("cosine", 0.01, 0.1, 0, 4), 2)
    values = [v for _, v in table(plan, "lr", 20)]
    # lr = .045 * (1 + cos(pi x + pi)) + .01 at x = k/8:
    #   x 0:    cos(pi)      = -1                  -> .01
    #   x .125: cos(1.125pi) = -.9238795325112867  -> .045 * .0761204674887133  + .01
    #   x .25:  cos(1.25pi)  = -.7071067811865476  -> .045 * .2928932188134524  + .01
    #   x .375: cos(1.375pi) = -.3826834323650898  -> .045 * .6173165676349102  + .01
    #   x .5:   cos(1.5pi)   = 0                   -> .045 + .01
    #   x .625: cos(1.625pi) = .3826834323650898   -> .045 * 1.3826834323650898 + .01
    #   x .75:  cos(1.75pi)  = .7071067811865476   -> .045 * 1.7071067811865476 + .01
    #   x .875: cos(1.875pi) = .9238795325112867   -> .045 * 1.9238795325112867 + .01
    #   x 1:    cos(2pi)     = 1                   -> .045 * 2 + .01
    expected = [
        0.01,
        0.0134254210369921,
        0.0231801948466054,
        0.0377792455435710,
        0.055,
        0.0722207544564290,
        0.0868198051533946,
        0.0965745789630079,
        0.1,
    ]
    assert values == approx(expected)
    assert all(a < b for a, b in zip(values, values[1:], strict=False))  # rising


def test_lr_function_cyclic_linear():
    # .1 -> .01, cycle 1 epoch, S 5: cycle = 5 steps; lr = .1 - ((k mod 5)/4) * .09;
    # the end step (k 20) restarts the cycle, so the LR stays at init_lr afterwards
    plan = plan_of(lr_fn("cyclic_linear", 0.1, 0.01, 0, 4, ", cycle_epochs: 1.0"), 5)
    cycle = [0.1, 0.0775, 0.055, 0.0325, 0.01]  # .1 - 0, - .0225, - .045, - .0675, - .09
    assert table(plan, "lr", 40) == approx([(k, cycle[k % 5]) for k in range(20)] + [(20, 0.1)])
    assert plan.events_at(21) == ()


def test_lr_function_cyclic_linear_last_partial_cycle():
    # SparseML _cyclic_linear: cycle_steps = 1*4 = 4; range (2.5-0)*4 = 10 steps;
    # int(10/4)*4 = 8, so for current_step > 8 cycle_steps = 10 % 4 = 2:
    # k 9: 9 % 2 = 1 -> .1 - (1/1)*.09 = .01;  k 10 (end): 10 % 2 = 0 -> .1
    # (ours keeps cycle 4: k 9 -> .1 - (1/3)*.09 = .07, k 10 -> .1 - (2/3)*.09 = .04)
    plan = plan_of(lr_fn("cyclic_linear", 0.1, 0.01, 0, 2.5, ", cycle_epochs: 1.0"), 4)
    values = dict(table(plan, "lr", 20))
    assert [values[8], values[9], values[10]] == approx([0.1, 0.01, 0.1])


# --------------------------------------------------------------------------------------------
# Float epochs vs exact grid (LR classes)
# --------------------------------------------------------------------------------------------


def test_multi_step_lr_milestone_on_a_step_whose_float_epoch_is_low():
    # S 25, milestones [1.36, 3], gamma .1, init .1: milestone 1.36 -> k = 1.36*25 = 34,
    # e_34 = 34/25 = 1.36 >= 1.36 -> .1*.1 = .01 (SPEC: init * gamma^(#milestones <= e));
    # SparseML: milestone step round((1.36 - 0)*25) = 34 -> .01 as well
    plan = plan_of(lr_mod("MultiStepLR", "{milestones: [1.36, 3], gamma: 0.1}", 0.1, 0, 4), 25)
    assert table(plan, "lr") == approx([(0, 0.1), (34, 0.01), (75, 0.001)])


def test_step_lr_change_on_a_step_whose_float_epoch_is_low():
    # S 25, start .36, step_size 1, gamma .5, init .1: changes at e 1.36, 2.36, 3.36 ->
    # k 34, 59, 84 with .05, .025, .0125 (floor((34/25 - .36)/1) = 1)
    plan = plan_of(lr_mod("StepLR", "{step_size: 1, gamma: 0.5}", 0.1, 0.36, 4), 25)
    assert table(plan, "lr") == [(9, 0.1), (34, 0.05), (59, 0.025), (84, 0.0125)]


# --------------------------------------------------------------------------------------------
# Setters, trainable, quantization, constant pruning, leave_enabled
# --------------------------------------------------------------------------------------------


def events(plan, stop=None):
    return [(e.step, e.action, e.target, e.value, e.params) for e in plan.iter_events(0, stop)]


def test_set_learning_rate_and_weight_decay():
    # S 3: SetLR at 2 -> k 2*3 = 6; SetWD at 3 -> k 9 (group 1 only); SetLR at -1 -> k 0
    plan = plan_of(
        "  - !SetLearningRateModifier {learning_rate: 0.02, start_epoch: 2}\n"
        "  - !SetWeightDecayModifier {weight_decay: 0.0, start_epoch: 3, param_groups: [1]}\n"
        "  - !SetLearningRateModifier {learning_rate: 0.5, start_epoch: -1}\n",
        3,
    )
    assert events(plan, 100) == [
        (0, "set", "lr", 0.5, None),
        (6, "set", "lr", 0.02, None),
        (9, "set", "weight_decay", 0.0, (1,)),
    ]


def test_trainable_params_start_and_restore():
    # start 1, end 3, S 4: freeze at k 4, restore at k 12; open-ended: no restore
    plan = plan_of(
        "  - !TrainableParamsModifier {params: [conv1.weight], trainable: false, start_epoch: 1, end_epoch: 3}\n"
        "  - !TrainableParamsModifier {params: [fc1.weight], trainable: false, start_epoch: 2, end_epoch: -1}\n",
        4,
    )
    assert events(plan, 100) == [
        (4, "start", "trainable", False, ("conv1.weight",)),
        (8, "start", "trainable", False, ("fc1.weight",)),
        (12, "end", "trainable", "restore", ("conv1.weight",)),
    ]


def test_quantization_start_observers_bn_stats():
    # start 2, S 4 -> k 8; freeze_bn_stats_epoch 3 -> k 12; disable observers 3.5 -> k 14; no end
    plan = plan_of(
        "  - !QuantizationModifier {start_epoch: 2, disable_quantization_observer_epoch: 3.5, "
        "freeze_bn_stats_epoch: 3}\n",
        4,
    )
    assert [(k, a, t, v) for k, a, t, v, _ in events(plan, 100)] == [
        (8, "start", "quantization", "on"),
        (12, "set", "bn_stats", "frozen"),
        (14, "set", "observers", "disabled"),
    ]


def test_constant_pruning_hold_and_release():
    # start 1, end 3, S 4: hold at k 4, release at k 12; end -1: hold only
    plan = plan_of(
        "  - !ConstantPruningModifier {params: [conv2.weight], start_epoch: 1, end_epoch: 3}\n"
        "  - !ConstantPruningModifier {params: [fc1.weight], start_epoch: 0, end_epoch: -1}\n",
        4,
    )
    assert events(plan, 100) == [
        (0, "start", "masks", "hold", ("fc1.weight",)),
        (4, "start", "masks", "hold", ("conv2.weight",)),
        (12, "end", "masks", "release", ("conv2.weight",)),
    ]


def test_leave_enabled_false_releases_masks_at_the_end_step():
    # start 0, end 3, uf 1, S 4: end step 12 has the masks release *before* the final target
    plan = plan_of(gmp(0, 3, 1, extra="    leave_enabled: false\n"), 4)
    at_end = [(e.action, e.target, e.value) for e in plan.events_at(12)]
    assert at_end == [("end", "masks", "release"), ("end", "sparsity", 0.8)]
    assert [e.target for e in plan.iter_events(0, 12)] == ["sparsity"] * 3  # no release before
    # leave_enabled true (default): no release at all
    assert all(e.target == "sparsity" for e in plan_of(gmp(0, 3, 1), 4).iter_events(0, 100))


# --------------------------------------------------------------------------------------------
# max_epochs / min_epochs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,max_e,min_e",
    [
        # 1.5..6.5 and 0..-1: max ceil(6.5) = 7, min floor(0) = 0
        (gmp(1.5, 6.5, 1) + lr_mod("StepLR", "{gamma: 0.5, step_size: 2}", 0.05, 0, -1), 7, 0),
        # only 0..-1: the -1 end is ignored and max(ceil 0) = 0
        (lr_mod("StepLR", "{gamma: 0.5, step_size: 2}", 0.05, 0, -1), 0, 0),
        # set WD at 3 only: max 3, min 3
        ("  - !SetWeightDecayModifier {weight_decay: 0.0, start_epoch: 3}\n", 3, 3),
        # 2.7..4.2: max ceil(4.2) = 5, min floor(2.7) = 2
        (gmp(2.7, 4.2, 0.5), 5, 2),
        # EpochRange 0..10 feeds max_epochs only; GMP 1..7
        ("  - !EpochRangeModifier {start_epoch: 0, end_epoch: 10}\n" + gmp(1, 7, 0.5), 10, 0),
        # start -1 is not a start: min over the others (floor 1.5 = 1)
        (
            "  - !SetLearningRateModifier {learning_rate: 0.1, start_epoch: -1}\n" + gmp(1.5, 3, 1),
            3,
            1,
        ),
    ],
)
def test_max_min_epochs(body, max_e, min_e):
    plan = plan_of(body, 4)
    assert (plan.max_epochs, plan.min_epochs) == (max_e, min_e)


# --------------------------------------------------------------------------------------------
# final_sparsity mapping, manager order, random access
# --------------------------------------------------------------------------------------------


def test_final_sparsity_mapping_one_event_per_group():
    # {.6: [conv1], .8: [fc1, fc2]}, init 0, linear, 0 -> 2, uf 1, S 2: k 0, 2 (p .5), 4
    plan = plan_of(
        "  - !GMPruningModifier\n"
        "    params: []\n"
        "    final_sparsity: {0.6: [conv1.weight], 0.8: [fc1.weight, fc2.weight]}\n"
        "    init_sparsity: 0.0\n    start_epoch: 0\n    end_epoch: 2\n"
        "    update_frequency: 1\n    inter_func: linear\n",
        2,
    )
    a, b = ("conv1.weight",), ("fc1.weight", "fc2.weight")
    assert [(k, v, p) for k, _, _, v, p in events(plan)] == approx(
        [
            (0, 0.0, a),
            (0, 0.0, b),
            (2, 0.3, a),
            (2, 0.4, b),  # .5*.6, .5*.8
            (4, 0.6, a),
            (4, 0.8, b),
        ]
    )


def test_manager_order_later_end_comes_last():
    # Two LR functions both write at k 4 (e 2, S 2). B (ends 6) is written first in the file,
    # A (ends 4) second; manager order is by end_epoch, so A then B, and B's value wins.
    # A: .1 -> .01 over [0, 4] at x .5: .055;  B: .2 -> .02 over [2, 6] at x 0: .2
    plan = plan_of(lr_fn("linear", 0.2, 0.02, 2, 6) + lr_fn("linear", 0.1, 0.01, 0, 4), 2)
    at4 = [(e.modifier, e.value) for e in plan.events_at(4) if e.target == "lr"]
    assert at4 == approx([(1, 0.055), (0, 0.2)])
    # end -1 comes after any finite end: SetLR (end -1) after the LR function ending at 4
    plan = plan_of(
        "  - !SetLearningRateModifier {learning_rate: 0.03, start_epoch: 1}\n"
        + lr_fn("linear", 0.1, 0.01, 0, 4),
        2,
    )
    assert [(e.modifier, e.value) for e in plan.events_at(2) if e.target == "lr"] == approx(
        [(1, 0.0775), (0, 0.03)]
    )
    # equal ends: the earlier start first, then file order
    plan = plan_of(lr_fn("linear", 0.3, 0.03, 1, 4) + lr_fn("linear", 0.1, 0.01, 0, 4), 2)
    assert [e.modifier for e in plan.events_at(2)] == [1, 0]


def test_events_at_random_access_equals_sequential():
    body = (
        gmp(0.5, 6.5, 0.5, inter="inverse_cubic", extra="    leave_enabled: false\n")
        + lr_fn("cosine", 0.1, 0.001, 0, 8)
        + lr_mod("StepLR", "{gamma: 0.5, step_size: 2}", 0.05, 1, 7)
        + "  - !TrainableParamsModifier {params: [conv1.weight], trainable: false, start_epoch: 1, end_epoch: 3}\n"
        + "  - !SetWeightDecayModifier {weight_decay: 0.0, start_epoch: 5}\n"
    )
    S, N = 3, 30
    sequential = {k: plan_of(body, S).events_at(k) for k in range(N)}
    seq_plan = plan_of(body, S)
    assert [seq_plan.events_at(k) for k in range(N)] == [sequential[k] for k in range(N)]
    plan = plan_of(body, S)
    order = [17, 3, 3, 0, 29, 28, 1, 2, 18, 19, 20, 5, 4, 12, 12, 11, 27, 0, 9, 8, 7, 6]
    for k in order:
        assert plan.events_at(k) == sequential[k], k
    # after jumping around, sequential access from anywhere is still right
    for k in range(10, N):
        assert plan.events_at(k) == sequential[k], k
    assert tuple(plan.iter_events(0, N)) == tuple(e for k in range(N) for e in sequential[k])
    assert tuple(plan.iter_events(11, 20)) == tuple(e for k in range(11, 20) for e in sequential[k])


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("S", [0, -3])
def test_bad_steps_per_epoch(S):
    with pytest.raises(PlanError, match="steps_per_epoch"):
        plan_of(gmp(0, 2, 1), S)


def test_end_before_start():
    with pytest.raises(PlanError, match="end_epoch"):
        plan_of(gmp(3, 2, 1), 4)
    with pytest.raises(PlanError, match="end_epoch"):
        plan_of(
            "  - !TrainableParamsModifier {params: [a], trainable: false, start_epoch: 3, end_epoch: 1}\n",
            4,
        )
    with pytest.raises(ValueError, match="end_epoch"):
        curves.gradual(0.0, 0.5, 3, 2, "cubic")


@pytest.mark.parametrize("end", [2, 1])
@pytest.mark.parametrize("func", ["linear", "cosine", "cyclic_linear"])
def test_lr_function_end_not_after_start(func, end):
    with pytest.raises(PlanError, match="end_epoch"):
        plan_of(lr_fn(func, 0.1, 0.01, 2, end), 4)


def test_lr_function_curve_end_not_after_start():
    with pytest.raises(ValueError, match="end_epoch"):
        curves.linear_function_lr(0.1, 0.01, 2, 2)
    with pytest.raises(ValueError, match="end_epoch"):
        curves.cosine_function_lr(0.1, 0.01, 3, 1)
    with pytest.raises(ValueError, match="end_epoch"):
        curves.cyclic_linear_function_lr(0.1, 0.01, 3, 3, 1.0, 4)


def test_other_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="step_size"):
        curves.step_lr(0.1, 0.5, 0, 0)
    with pytest.raises(ValueError, match="inter_func"):
        curves.interpolate(1, 0, 2, 0.0, 0.5, "quadratic")
    with pytest.raises(PlanError, match="milestones"):
        plan_of(lr_mod("MultiStepLR", "{milestones: [1, 3], gamma: 0.1}", 0.1, 1, -1), 4)
    with pytest.raises(PlanError, match="update_frequency"):
        plan_of(gmp(0, 2, 0), 4)


# --------------------------------------------------------------------------------------------
# SetLearningRate / SetWeightDecay: SparseML forces end_epoch to -1
# --------------------------------------------------------------------------------------------
# sparseml/pytorch/sparsification/training/modifier_lr.py (SetLearningRateModifier.__init__) and
# training/modifier_regularizer.py (SetWeightDecayModifier.__init__) pass end_epoch=-1 to the base
# class whatever the recipe says; reference/sparseml-semantics.md 3.3/3.4: "end_epoch forced -1 (any
# value accepted and ignored)". SPEC is silent, so SparseML's behaviour applies.


def test_set_lr_end_epoch_is_ignored_for_manager_order():
    # LR function .1 -> .01 over [0, 6] and SetLR .02 at 2 (end 5 written), S 2, step 4 (e 2):
    # SparseML order: LR function (end 6), then SetLR (end -1) -> LR .02 at step 4
    # (ours: SetLR (end 5) first, LR function (6) last -> .1 - (2/6)*.09 = .07)
    plan = plan_of(
        "  - !SetLearningRateModifier {learning_rate: 0.02, start_epoch: 2, end_epoch: 5}\n"
        + lr_fn("linear", 0.1, 0.01, 0, 6),
        2,
    )
    assert [e.value for e in plan.events_at(4) if e.target == "lr"][-1] == 0.02


def test_set_lr_end_before_start_is_ignored():
    plan = plan_of(
        "  - !SetLearningRateModifier {learning_rate: 0.02, start_epoch: 2, end_epoch: 1}\n", 2
    )
    assert table(plan) == [(4, 0.02)]


def test_set_weight_decay_end_epoch_does_not_feed_max_epochs():
    # SparseML: end forced -1, so max_epochs = ceil(start 1) = 1
    plan = plan_of(
        "  - !SetWeightDecayModifier {weight_decay: 0.0, start_epoch: 1, end_epoch: 9}\n", 2
    )
    assert plan.max_epochs == 1
