"""Warnings that say what is true, once, at the caller's line: unfinished pruning, repeated
deprecations, what a recipe schedules after its end (E006), unknown --select/--ignore codes,
and the schedule preview of a stage/group recipe against what the PyTorch backend runs."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
from conftest import REPO
from testdata import CORPUS

from recipe_spec.cli import main
from recipe_spec.validation import validate

torch = pytest.importorskip("torch")

from torch_nets import build, sparsity, train  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402

GMP = """modifiers:
  - !EpochRangeModifier {start_epoch: 0, end_epoch: 4}
  - !GMPruningModifier
    params: [PARAM]
    init_sparsity: 0.05
    final_sparsity: 0.5
    start_epoch: 0
    end_epoch: 4
    update_frequency: UPDATE
"""


def _run(tmp_path: Path, param: str, update: float, steps: int) -> list[warnings.WarningMessage]:
    path = tmp_path / "gmp.yaml"
    path.write_text(GMP.replace("PARAM", param).replace("UPDATE", str(update)))
    model, opt, x, y = build()
    manager = ScheduledModifierManager.from_yaml(str(path))
    opt = manager.modify(model, opt, steps_per_epoch=2)
    train(model, opt, x, y, steps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager.finalize(model)  # the line the warning must point at
    return [w for w in caught if "final sparsity" in str(w.message)]


def test_unfinished_pruning_warns_at_the_callers_finalize_naming_the_recipe(tmp_path: Path) -> None:
    # fc1.weight (2048 values): the update at epoch 3.5 leaves 1022 zeros, the target is 1024
    (w,) = _run(tmp_path, "fc1.weight", 0.5, 8)
    assert w.filename == __file__
    assert f"{tmp_path / 'gmp.yaml'}:3" in str(w.message)
    assert "training stopped after 8 steps" in str(w.message)


def test_no_warning_when_every_mask_holds_the_target(tmp_path: Path) -> None:
    # fc2.weight (256 values): the update at epoch 3.5 already gives round(0.5 * 256) zeros
    assert _run(tmp_path, "fc2.weight", 0.5, 8) == []


def test_no_warning_when_the_final_update_ran(tmp_path: Path) -> None:
    assert _run(tmp_path, "fc1.weight", 0.5, 9) == []


@pytest.mark.parametrize(("init", "warned"), [(0.8, False), (0.5, True)])
def test_a_grouped_mask_at_its_reachable_count_does_not_warn(tmp_path: Path, init: float, warned: bool) -> None:
    """fc2.weight (8 filters of 32): at 0.8 a filter mask prunes round(0.8 * 8) = 6 filters,
    192 zeros, fewer than round(0.8 * 256) = 205 single weights; masks that already hold the 6
    filters hold the final count (no warning), masks at 0.5 do not."""
    path = tmp_path / "gmp.yaml"
    path.write_text(GMP.replace("PARAM", "fc2.weight").replace("UPDATE", "1")
                    .replace("init_sparsity: 0.05", f"init_sparsity: {init}").replace("final_sparsity: 0.5", "final_sparsity: 0.8")
                    + "    mask_type: filter\n")
    model, opt, x, y = build()
    manager = ScheduledModifierManager.from_yaml(str(path))
    opt = manager.modify(model, opt, steps_per_epoch=2)
    train(model, opt, x, y, 2)
    assert int((model.fc2.weight.detach().abs().sum(1) == 0).sum()) == round(init * 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager.finalize(model)
    assert bool([w for w in caught if "final sparsity" in str(w.message)]) is warned


def test_a_global_ranking_at_its_final_count_does_not_warn(tmp_path: Path) -> None:
    """A global ranking holds round(0.5 * total) zeros over fc1 and fc2 together, shared out
    unevenly: no parameter holds "its" half, and none needs to."""
    path = tmp_path / "gmp.yaml"
    path.write_text(GMP.replace("PARAM", "fc1.weight, fc2.weight").replace("UPDATE", "1")
                    .replace("init_sparsity: 0.05", "init_sparsity: 0.5")
                    .replace("!GMPruningModifier", "!GlobalMagnitudePruningModifier"))
    model, opt, x, y = build()
    manager = ScheduledModifierManager.from_yaml(str(path))
    opt = manager.modify(model, opt, steps_per_epoch=2)
    train(model, opt, x, y, 2)
    zeros = [int((p == 0).sum()) for p in (model.fc1.weight, model.fc2.weight)]
    assert sum(zeros) == round(0.5 * (2048 + 256)) and zeros[1] != 128
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager.finalize(model)
    assert [str(w.message) for w in caught if "final sparsity" in str(w.message)] == []


def test_no_warning_after_one_shot_apply(tmp_path: Path) -> None:
    model, _, _, _ = build()
    manager = ScheduledModifierManager.from_yaml(GMP.replace("PARAM", "fc1.weight").replace("UPDATE", "1"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager.apply(model)
    assert [str(w.message) for w in caught if "final sparsity" in str(w.message)] == []
    assert sparsity(model.fc1.weight) == pytest.approx(0.5, abs=1e-3)


def test_a_deprecation_repeated_in_every_modifier_is_said_once() -> None:
    path = CORPUS / "real" / "sparseml__integrations__huggingface-transformers__recipes__20sparselong.yaml"
    found = [d for d in validate(path) if d.code == "M007"]
    assert len(found) == 1
    assert "also on lines 26, 38" in found[0].message and "65 more" in found[0].message


def test_different_deprecations_stay_apart() -> None:
    text = ("modifiers:\n  - !GMPruningModifier {params: [a], init_sparsity: 0.05, final_sparsity: 0.5, "
            "start_epoch: 0, end_epoch: 4, update_frequency: 1, log_types: __ALL__}\n"
            "  - !GMPruningModifier {params: [b], init_sparsity: 0.05, final_sparsity: 0.5, "
            "start_epoch: 0, end_epoch: 4, update_frequency: 1, log_types: __ALL__, phased: false}\n")
    found = [(d.line, d.message) for d in validate(text) if d.code == "M007"]
    assert len(found) == 2
    assert found[0][0] == 2 and "also on line 3" in found[0][1]


@pytest.mark.parametrize("option", [["--select", "Q999"], ["--ignore", "nonsense"], ["--select", "M0O3"],
                                    ["--ignore", "E001,X"]])
def test_unknown_codes_exit_2(option: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(REPO / "examples"), *option]) == 2
    assert option[0] in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--select", "E"], ["--select", "m00"], ["--ignore", "M007,P"]])
def test_known_codes_and_prefixes_still_work(option: list[str]) -> None:
    assert main(["validate", str(REPO / "examples"), *option]) == 0


EXAMPLE = REPO / "examples" / "resnet50-gmp-85.yaml"


def test_an_override_that_drops_milestones_warns_at_them() -> None:
    found = [d for d in validate(EXAMPLE, {"num_epochs": 30}) if d.code == "E006"]
    assert [(d.line, d.severity.value) for d in found] == [(12, "warning"), (18, "warning"), (18, "warning")]
    assert "43" in found[1].message and "60" in found[2].message
    assert "40" in found[0].message and found[0].hint


@pytest.mark.parametrize("epochs,dropped", [(40, [43, 60]), (43, [43, 60]), (44, [60]), (60, [60]),
                                            (61, []), (70, [])])
def test_milestones_just_inside_and_outside_the_end(epochs: int, dropped: list[int]) -> None:
    found = [d for d in validate(EXAMPLE, {"num_epochs": epochs}) if d.code == "E006"]
    assert [int(d.message.split()[1]) for d in found if d.message.startswith("milestone")] == dropped
    # the EpochRangeModifier ends before the pruning only below 40
    assert not any(d.message.startswith("EpochRange") for d in found)


@pytest.mark.parametrize("epochs,early", [(39.5, True), (40, False)])
def test_epoch_range_ending_before_other_modifiers(epochs: float, early: bool) -> None:
    found = [d for d in validate(EXAMPLE, {"num_epochs": epochs}) if d.code == "E006"]
    assert any(d.message.startswith("EpochRangeModifier ends at epoch") for d in found) is early


def test_the_readme_example_runs_its_whole_schedule() -> None:
    readme = (REPO / "README.md").read_text()
    uses = re.findall(r"variables=(\{[^}]*\})", readme)
    assert uses
    for text in uses:
        variables = json.loads(text)
        assert [d.code for d in validate(EXAMPLE, variables)] == []


def test_the_python_api_warns_what_runs_after_the_end(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(EXAMPLE.read_text().replace("re:sections\\.\\d+\\.\\d+\\.conv[123]\\.weight", "fc1.weight"))
    model, opt, _, _ = build()
    with warnings.catch_warnings(record=True) as caught:  # said once, where the recipe is taken
        warnings.simplefilter("always")
        manager = ScheduledModifierManager.from_yaml(str(path), recipe_variables={"num_epochs": 30})
        manager.modify(model, opt, steps_per_epoch=2)
    found = [w for w in caught if "E006" in str(w.message)]
    assert len(found) == 3
    assert all(w.filename == __file__ for w in found)
    assert f"{path}:18:30: E006" in str(found[1].message)


CORE = """train_stage:
  pruning_modifiers:
    MagnitudePruningModifier:
      targets: ['re:fc1\\.weight']
      init_sparsity: 0.05
      final_sparsity: 0.5
      start: 4
      end: 8
      update: 1
"""


def test_schedule_of_a_stage_group_recipe_is_what_torch_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "core.yaml"
    path.write_text(CORE)
    assert main(["schedule", str(path), "--steps-per-epoch", "2", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["events"]
    preview = [(r["step"], r["action"], r["target"], round(float(r["value"]), 6)) for r in rows]
    assert preview[0][0] == 8 and preview[-1][0] == 16

    model, opt, x, y = build()
    manager = ScheduledModifierManager.from_yaml(str(path))
    opt = manager.modify(model, opt, steps_per_epoch=2)
    runtime = manager.runtime
    applied: list[tuple[int, str, str, float]] = []
    original = runtime.apply_step_events

    def record(events, collect=True):  # type: ignore[no-untyped-def]
        applied.extend((runtime.step_count, e.action, e.target, round(float(e.value), 6)) for e in events)
        return original(events, collect)

    runtime.apply_step_events = record
    train(model, opt, x, y, 20)
    assert applied == preview
    assert sparsity(model.fc1.weight) == pytest.approx(0.5, abs=1e-3)
