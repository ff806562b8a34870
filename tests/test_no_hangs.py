"""Nothing hangs: inputs that once ran for minutes, looped or crashed end within a second or
two with a located diagnostic (``update_frequency`` between -1 and 0, a preview of millions
of events, closest names among a large model's layers, ``eval()`` powers beyond a float,
``end: 1e308`` with ``update: 1e-9`` in a stage/group recipe)."""

from __future__ import annotations

import difflib
import random
from pathlib import Path

import pytest
from timing import cpu_time

import recipe_spec
from recipe_spec.cli import main
from recipe_spec.lint import lint
from recipe_spec.params.records import ParamRecord
from recipe_spec.schedule import compile_plan
from recipe_spec.schedule.events import PlanError
from recipe_spec.schedule.preview import PREVIEW_LIMIT, refusal
from recipe_spec.text.similar import CloseMatches, close_matches
from recipe_spec.validation import validate

BOUND_S = 2.0


def _gmp(update_frequency: object, end: object = 2, name: str = "GMPruningModifier") -> str:
    return (
        "modifiers:\n"
        f"  - !{name}\n"
        "    params: __ALL_PRUNABLE__\n"
        "    init_sparsity: 0.05\n"
        "    final_sparsity: 0.8\n"
        "    start_epoch: 0\n"
        f"    end_epoch: {end}\n"
        f"    update_frequency: {update_frequency}\n"
    )


def _codes(text: str) -> list[tuple[str, int, int]]:
    return [(d.code, d.line, d.column) for d in validate(text)]


# -- 1. update_frequency between -1 and 0 ----------------------------------------------------
@pytest.mark.parametrize("value", ["-0.5", "-0.999", "-1e-9", "0", "-1.0001", "-2"])
def test_update_frequency_outside_the_range_is_m005_at_the_value(value: str) -> None:
    started = cpu_time()
    found = validate(_gmp(value))
    assert cpu_time() - started < BOUND_S
    assert [(d.code, d.line, d.column) for d in found] == [("M005", 8, 23)]
    shown = repr(int(value)) if value.lstrip("-").isdigit() else repr(float(value))
    below = float(value) < -1
    wanted = "at least -1" if below else "-1 or above 0"
    assert found[0].message == f"'update_frequency' must be {wanted}, not {shown}"
    assert "-1" in found[0].hint  # says what the allowed values mean


@pytest.mark.parametrize("value", ["-1", "-1.0", "1e-6", "0.01", "1"])
def test_update_frequency_minus_one_or_positive_is_clean(value: str) -> None:
    assert _codes(_gmp(value)) == []


@pytest.mark.parametrize("name", ["MagnitudePruningModifier", "GlobalMagnitudePruningModifier",
                                  "MovementPruningModifier"])
def test_every_gradual_pruner_refuses_a_negative_fraction(name: str) -> None:
    assert ("M005", 8, 23) in _codes(_gmp("-0.5", name=name))
    assert not [c for c in _codes(_gmp("0.5", name=name)) if c[0] == "M005"]


@pytest.mark.parametrize("value, ok", [("-0.5", False), ("-1.5", False), ("-1", True), ("0", True), ("2", True)])
def test_ignored_update_frequency_accepts_minus_one_zero_or_positive(value: str, ok: bool) -> None:
    text = ("modifiers:\n  - !LearningRateFunctionModifier\n    lr_func: linear\n    init_lr: 0.1\n"
            f"    final_lr: 0.01\n    start_epoch: 0\n    end_epoch: 2\n    update_frequency: {value}\n")
    assert _codes(text) == ([] if ok else [("M005", 8, 23)])


def test_the_schedule_compiler_refuses_a_negative_fraction_bypassing_validation() -> None:
    recipe = recipe_spec.loads(_gmp("-0.5"))
    started = cpu_time()
    with pytest.raises(PlanError, match=r"GMPruningModifier \(line 2\).*update_frequency.*-0.5"):
        compile_plan(recipe, 10)
    assert cpu_time() - started < BOUND_S
    assert compile_plan(recipe_spec.loads(_gmp("-1")), 10).last_event_step == 20


def test_schedule_cli_ends_on_a_negative_fraction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(_gmp("-0.5"))
    started = cpu_time()
    assert main(["schedule", str(path), "--steps-per-epoch", "10"]) == 1
    assert cpu_time() - started < BOUND_S
    assert f"{path}:8:23: M005" in capsys.readouterr().err


CORE = """\
train_stage:
  pruning_modifiers:
    MagnitudePruningModifier:
      targets: ['re:fc1\\.weight$']
      init_sparsity: 0.05
      final_sparsity: 0.8
      start: 0
      end: {end}
      update: {update}
"""


@pytest.mark.parametrize("update, ok", [("-0.5", False), ("-1.5", False), ("0.5", True), ("-1", True)])
def test_stage_group_update_outside_the_range_is_m005_at_update(update: str, ok: bool) -> None:
    found = [d for d in validate(CORE.format(end=2, update=update)) if d.code == "M005"]
    assert [(d.line, d.column) for d in found] == ([] if ok else [(9, 15)])
    assert ok or "'update'" in found[0].message or "-1" in found[0].hint  # located at update (above)


# -- 4. overflow ------------------------------------------------------------------------------
@pytest.mark.parametrize("expr", ["3 ** 2 ** 1100", "num_epochs ** num_epochs ** num_epochs ** num_epochs",
                                  "2 ** 2 ** 1023", "2.0 ** 2 ** 1100"])
def test_a_power_beyond_a_float_is_v004(expr: str) -> None:
    text = f"num_epochs: 3\nmodifiers:\n  - !EpochRangeModifier\n    start_epoch: 0\n    end_epoch: eval({expr})\n"
    started = cpu_time()
    recipe, found = recipe_spec.check(text)
    assert cpu_time() - started < BOUND_S
    assert recipe is None
    assert [(d.code, d.line) for d in found] == [("V004", 5)]


def test_a_large_power_inside_the_limit_still_evaluates() -> None:
    text = "modifiers:\n  - !EpochRangeModifier\n    start_epoch: 0\n    end_epoch: eval(min(3 ** 2 ** 5, 10))\n"
    assert _codes(text) == []
    assert [d.code for d in validate(text.replace("2 ** 5", "2 ** 12"))] == ["V004"]  # 6,492 bits


@pytest.mark.parametrize("command", ["validate", "schedule"])
def test_cli_reports_the_power_located(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("modifiers:\n  - !EpochRangeModifier\n    start_epoch: 0\n    end_epoch: eval(3 ** 2 ** 1100)\n")
    args = [command, str(path)] + (["--steps-per-epoch", "10"] if command == "schedule" else [])
    assert main(args) == 1
    out = capsys.readouterr()
    assert f"{path}:4:21: V004" in out.out + out.err
    assert "internal error" not in out.out + out.err


@pytest.mark.parametrize("end, update, ok", [("1e308", "1e-9", False), ("1e7", "1", True), ("1e7", "0.99", False)])
def test_stage_group_timing_beyond_the_event_limit_is_m005(end: str, update: str, ok: bool) -> None:
    started = cpu_time()
    found = [d for d in validate(CORE.format(end=end, update=update)) if d.code == "M005"]
    assert cpu_time() - started < BOUND_S
    assert [(d.line, d.column) for d in found] == ([] if ok else [(9, 15)])


@pytest.mark.parametrize("text", [CORE.format(end="1e308", update="1e-9"), _gmp("1e-9", end="1e308")])
def test_the_runtime_refuses_an_end_beyond_a_float_with_a_plan_error(text: str) -> None:
    from recipe_spec.stage_dialect.to_modifiers import runnable

    recipe = runnable(recipe_spec.loads(text), None)
    started = cpu_time()
    with pytest.raises(PlanError, match=r"\(line \d+\): makes about inf schedule events"):
        compile_plan(recipe, 10)
    assert cpu_time() - started < BOUND_S


# -- 2. the schedule preview -------------------------------------------------------------------
def test_a_preview_of_millions_of_events_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(_gmp("-1", end=9000))  # 9 million events at 1,000 steps per epoch
    started = cpu_time()
    assert main(["schedule", str(path), "--steps-per-epoch", "1000"]) == 1
    assert cpu_time() - started < BOUND_S
    err = capsys.readouterr().err
    assert f"{path}:2:5: error:" in err
    assert "--epochs 400 " in err and "9,000,001 events" in err


def test_the_suggested_epochs_fit() -> None:
    plan = compile_plan(recipe_spec.loads(_gmp("-1", end=9000)), 1000)
    found = refusal(plan, None)
    assert found is not None and found.epochs == 400
    assert refusal(plan, found.epochs) is None
    assert refusal(plan, found.epochs + 0.001) is not None  # just past it: 400,001 events


def test_a_preview_at_the_limit_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(_gmp("-1", end=10))
    assert main(["schedule", str(path), "--steps-per-epoch", "1000"]) == 0  # 10,001 events
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("10001 event(s)")
    plan = compile_plan(recipe_spec.loads(_gmp("-1", end=PREVIEW_LIMIT // 1000)), 1000)
    assert plan.events_bound() == PREVIEW_LIMIT + 1  # one more than the limit
    assert refusal(plan, None) is not None
    assert refusal(compile_plan(recipe_spec.loads(_gmp("-1", end=PREVIEW_LIMIT // 1000)), 999), None) is None


def test_a_preview_of_a_few_hundred_thousand_events_takes_seconds(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(_gmp("-1", end=150))  # 150,001 events: a large real recipe at 1,000 steps per epoch
    started = cpu_time()
    assert main(["schedule", str(path), "--steps-per-epoch", "1000"]) == 0
    assert cpu_time() - started < 3 * BOUND_S
    assert "150001 event(s)" in capsys.readouterr().out


# -- 3. closest names ----------------------------------------------------------------------------
def _manifest(n: int = 768) -> list[ParamRecord]:
    names = [f"bert.encoder.layer.{i}.{m}.{s}" for i in range(12)
             for m in ("attention.self.query", "attention.self.key", "attention.self.value",
                       "attention.output.dense", "intermediate.dense", "output.dense")
             for s in ("weight", "bias")]
    names += [f"extra.block{k // 8}.sub{k % 8}.linear.weight" for k in range(n - len(names))]
    return [ParamRecord(name, (64, 64) if name.endswith("weight") else (64,), "Linear", name.endswith("weight"))
            for name in names]


def test_closest_layer_names_among_768_parameters_are_fast() -> None:
    records = _manifest()
    rng = random.Random(0)
    wrong = [f"bert.encoder.layer.{rng.randrange(12)}.attention.self.qurey{i}" for i in range(40)]
    text = ("modifiers:\n  - !QuantizationModifier\n    start_epoch: 0\n    submodules:\n"
            + "".join(f"      - {w}\n" for w in wrong))
    lint(text, records, "torch")  # imports and caches
    started = cpu_time()
    found = [d for d in lint(text, records, "torch") if d.code == "P006"]
    assert cpu_time() - started < 0.2
    assert len(found) == 40
    assert found[0].hint.startswith("Closest: bert.encoder.layer.")


def test_close_matches_agree_with_difflib() -> None:
    rng = random.Random(1)
    for _ in range(2000):
        candidates = ["".join(rng.choice("ab._1") for _ in range(rng.randint(0, 8)))
                      for _ in range(rng.randint(0, 25))]
        word = "".join(rng.choice("ab._1") for _ in range(rng.randint(0, 8)))
        n, cutoff = rng.randint(1, 4), rng.choice([0.0, 0.5, 0.6, 0.9, 1.0])
        assert close_matches(word, candidates, n, cutoff) == difflib.get_close_matches(word, candidates, n, cutoff)


def test_close_matches_among_layer_names_agree_with_difflib() -> None:
    names = sorted({p for r in _manifest() for name in r.names for p in (name, name.rsplit(".", 1)[0])})
    matcher = CloseMatches(names)
    for word in ("bert.encoder.layer.3.attention.self.qurey", "extra.block7.sub9.linear", "classifer", ""):
        assert matcher.get(word, 3, 0.5) == difflib.get_close_matches(word, names, 3, 0.5)
