"""`recipe-spec schedule`: the event table, JSON and CSV agree, exit codes, the picture, and the
LR / sparsity series against hand-computed values."""

from __future__ import annotations

import csv
import io
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

import recipe_spec
from recipe_spec.cli import main
from recipe_spec.schedule import compile_plan
from recipe_spec.schedule.report import (
    COLUMNS,
    lr_series,
    render_csv,
    render_json,
    render_table,
    schedule_rows,
    sparsity_series,
)

RESNET = REPO / "examples" / "resnet50-gmp-85.yaml"
MOBILENET = REPO / "examples" / "mobilenet-prune-quantize.md"
BERT = REPO / "examples" / "bert-staged-prune-then-finetune.yaml"

# GMP 0.05 -> 0.8 (cubic) over epochs 0..2, updated every epoch; a linear LR function
# 0.1 -> 0.02 over epochs 1..2. At S=4 steps per epoch:
#   sparsity: steps 0-3 0.05; 4-7 0.05 + (1 - 0.5**3) * 0.75 = 0.70625; step 8 0.8
#   lr: steps 4..8 (epochs 1, 1.25, 1.5, 1.75, 2) 0.1, 0.08, 0.06, 0.04, 0.02
TINY = """\
modifiers:
  - !GMPruningModifier
    params: [fc.weight]
    init_sparsity: 0.05
    final_sparsity: 0.8
    start_epoch: 0
    end_epoch: 2
    update_frequency: 1

  - !LearningRateFunctionModifier
    lr_func: linear
    init_lr: 0.1
    final_lr: 0.02
    start_epoch: 1
    end_epoch: 2
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY)
    return p


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _parse_table(text: str) -> list[dict[str, str]]:
    lines = text.splitlines()
    header, dashes = lines[0], lines[1]
    spans, start = [], 0
    for chunk in dashes.split("  "):
        spans.append((start, start + len(chunk)))
        start += len(chunk) + 2
    rows = []
    for line in lines[2:]:
        if not line.strip():
            break
        cells = [
            line[a : b if i < len(spans) - 1 else None].strip() for i, (a, b) in enumerate(spans)
        ]
        rows.append(dict(zip(header.split(), cells, strict=True)))
    return rows


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    epoch = round(float(row["epoch"]), 6)  # the table shows 6 significant digits
    return (
        int(row["step"]),
        epoch,
        row["modifier"],
        int(row["line"]),
        row["action"],
        row["target"],
    )


# -- the three formats ---------------------------------------------------------------------
@pytest.mark.parametrize("recipe", [RESNET, MOBILENET, BERT], ids=lambda p: p.name)
def test_table_json_csv_hold_the_same_events(
    recipe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["schedule", str(recipe), "--steps-per-epoch", "100"]
    rc, out, _ = _run(base + ["--format", "json"], capsys)
    assert rc == 0
    doc = json.loads(out)
    assert set(doc) == {"version", "recipe", "steps_per_epoch", "epochs", "max_epochs", "min_epochs", "events"}
    assert (doc["version"], doc["recipe"], doc["steps_per_epoch"], doc["epochs"]) == (
        1,
        str(recipe),
        100,
        None,
    )
    events = doc["events"]
    assert events and all(set(e) == set(COLUMNS) for e in events)

    rc, out, _ = _run(base + ["--format", "csv"], capsys)
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == list(COLUMNS)

    rc, out, _ = _run(base, capsys)
    assert rc == 0
    table = _parse_table(out)
    assert f"{len(events)} event(s)" in out

    assert [_key(e) for e in events] == [_key(r) for r in rows] == [_key(t) for t in table]
    for e, r, t in zip(events, rows, table, strict=True):
        if isinstance(e["value"], float):
            assert float(r["value"]) == e["value"]  # CSV keeps full precision
            assert float(t["value"]) == pytest.approx(e["value"], rel=1e-5)
        else:
            assert r["value"] == ("" if e["value"] is None else str(e["value"]))
            assert t["value"] == r["value"]
        params = e["params"]
        if isinstance(params, list):
            assert json.loads(r["params"]) == params
        else:
            assert r["params"] == ("" if params is None else params)


def test_resnet_events(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(
        ["schedule", str(RESNET), "--steps-per-epoch", "100", "--format", "json"], capsys
    )
    assert rc == 0
    events = json.loads(out)["events"]
    gmp = [e for e in events if e["modifier"] == "GMPruningModifier"]
    assert [e["step"] for e in gmp] == list(range(0, 4001, 100))
    assert (gmp[0]["action"], gmp[0]["value"], gmp[-1]["action"], gmp[-1]["value"]) == (
        "start",
        0.05,
        "end",
        0.85,
    )
    assert gmp[0]["params"] == [r"re:sections\.\d+\.\d+\.conv[123]\.weight"]
    lr = [(e["step"], e["value"]) for e in events if e["target"] == "lr"]
    assert lr == [(0, 0.005), (4300, pytest.approx(0.0005)), (6000, pytest.approx(0.00005))]
    assert json.loads(out)["max_epochs"] == 70


@pytest.mark.parametrize("recipe", [RESNET, MOBILENET, BERT], ids=lambda p: p.name)
def test_line_numbers_point_at_the_modifier_tag(
    recipe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = _run(
        ["schedule", str(recipe), "--steps-per-epoch", "10", "--format", "json"], capsys
    )
    assert rc == 0
    lines = recipe.read_text().splitlines()
    events = json.loads(out)["events"]
    for e in events:
        assert f"!{e['modifier']}" in lines[e["line"] - 1], e
    assert len({e["line"] for e in events}) > 1


def test_line_numbers_in_a_small_recipe(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(["schedule", str(tiny), "--steps-per-epoch", "4", "--format", "csv"], capsys)
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {(r["modifier"], r["line"]) for r in rows} == {
        ("GMPruningModifier", "2"),
        ("LearningRateFunctionModifier", "10"),
    }


def test_epochs_limits_the_rows(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["schedule", str(tiny), "--steps-per-epoch", "4", "--format", "json"]
    rc, out, _ = _run(base, capsys)
    assert rc == 0 and len(json.loads(out)["events"]) == 8  # GMP 3 + LR 5
    rc, out, _ = _run(base + ["--epochs", "1"], capsys)
    doc = json.loads(out)
    assert rc == 0 and doc["epochs"] == 1
    assert [(e["step"], e["modifier"]) for e in doc["events"]] == [(0, "GMPruningModifier")]
    rc, out, _ = _run(base + ["--epochs", "1.5"], capsys)  # steps < 6
    assert [e["step"] for e in json.loads(out)["events"]] == [0, 4, 4, 5]
    rc, out, _ = _run(
        ["schedule", str(RESNET), "--steps-per-epoch", "100", "--epochs", "10"], capsys
    )
    table = _parse_table(out)
    assert rc == 0 and len(table) == 11 and max(int(r["step"]) for r in table) == 900


def test_var_overrides_a_recipe_variable(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "schedule",
        str(RESNET),
        "--steps-per-epoch",
        "10",
        "--format",
        "json",
        "--var",
        "pruning_end=20",
    ]
    rc, out, _ = _run(argv, capsys)
    assert rc == 0
    ends = [e for e in json.loads(out)["events"] if e["action"] == "end"]
    assert [(e["modifier"], e["step"]) for e in ends] == [("GMPruningModifier", 200)]


# -- exit codes ----------------------------------------------------------------------------
def test_recipe_with_errors_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(
        "modifiers:\n  - !GMPruningModifier {params: [a], init_sparsity: 0.05, "
        "final_sparsty: 0.8, start_epoch: 5, end_epoch: 2}\n"
    )
    rc, out, err = _run(["schedule", str(p), "--steps-per-epoch", "10"], capsys)
    assert rc == 1 and out == ""
    assert f"{p}:2:" in err and "M002" in err and "E001" in err


def test_plan_error_exits_1_naming_modifier_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "plan.yaml"
    p.write_text(
        "modifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 4}\n"
        "  - !LearningRateFunctionModifier {lr_func: cyclic_linear, init_lr: 0.1, "
        "final_lr: 0.01, start_epoch: 0, end_epoch: 4, cycle_epochs: 0.1}\n"
    )
    assert main(["validate", str(p)]) == 0
    capsys.readouterr()
    rc, out, err = _run(["schedule", str(p), "--steps-per-epoch", "4"], capsys)
    assert rc == 1 and out == ""
    assert "LearningRateFunctionModifier (line 3)" in err and "cycle_epochs" in err


@pytest.mark.parametrize(
    "extra",
    [
        [],  # --steps-per-epoch is required
        ["--steps-per-epoch", "0"],
        ["--steps-per-epoch", "-3"],
        ["--steps-per-epoch", "1.5"],
        ["--steps-per-epoch", "many"],
        ["--steps-per-epoch", "10", "--format", "xml"],
        ["--steps-per-epoch", "10", "--epochs", "0"],
        ["--steps-per-epoch", "10", "--epochs", "nan"],
        ["--steps-per-epoch", "10", "--initial-lr", "-1"],
        ["--steps-per-epoch", "10", "--var", "novalue"],
        ["--steps-per-epoch", "10", "--plot", "out.gif"],
        ["--steps-per-epoch", "10", "--frobnicate"],
    ],
)
def test_bad_flags_exit_2(
    extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = _run(["schedule", str(RESNET), *extra], capsys)
    assert rc == 2 and out == ""
    assert not (tmp_path / "out.gif").exists()


def test_missing_or_directory_recipe_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schedule", str(tmp_path / "nope.yaml"), "--steps-per-epoch", "10"]) == 2
    assert main(["schedule", str(tmp_path), "--steps-per-epoch", "10"]) == 2
    assert main(["schedule", "--steps-per-epoch", "10"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_plot_without_matplotlib_exits_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    out_png = tmp_path / "s.png"
    rc, out, err = _run(
        ["schedule", str(RESNET), "--steps-per-epoch", "10", "--plot", str(out_png)], capsys
    )
    assert rc == 2 and out == ""
    assert '--plot needs matplotlib, which is not installed: pip install "matplotlib>=3.7"' in err
    assert "recipe-spec[" not in err  # recipe-spec is installed from a clone, not the registry
    assert not out_png.exists()


# -- the picture ---------------------------------------------------------------------------
def test_plot_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "sched.png"
    rc, out, err = _run(
        ["schedule", str(RESNET), "--steps-per-epoch", "100", "--plot", str(png)], capsys
    )
    assert rc == 0 and "GMPruningModifier" in out and f"wrote {png}" in err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000


@pytest.mark.parametrize("recipe", [MOBILENET, BERT], ids=lambda p: p.name)
def test_plot_svg(recipe: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    svg = tmp_path / "sched.svg"
    rc, _, _ = _run(
        ["schedule", str(recipe), "--steps-per-epoch", "50", "--format", "csv", "--plot", str(svg)],
        capsys,
    )
    assert rc == 0
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert len(svg.read_bytes()) > 10_000


def test_plot_small_recipe_without_lr_and_with_initial_lr(tiny: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    no_lr = tmp_path / "nolr.yaml"
    no_lr.write_text(TINY.split("\n\n")[0] + "\n")
    for recipe, extra in (
        (tiny, []),
        (no_lr, []),
        (no_lr, ["--initial-lr", "0.1"]),
        (tiny, ["--epochs", "1.5"]),
    ):
        png = tmp_path / f"{recipe.stem}-{len(extra)}.png"
        assert (
            main(["schedule", str(recipe), "--steps-per-epoch", "4", "--plot", str(png), *extra])
            == 0
        )
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_into_a_missing_folder_exits_2(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    assert (
        main(
            [
                "schedule",
                str(RESNET),
                "--steps-per-epoch",
                "10",
                "--plot",
                str(tmp_path / "no" / "such" / "dir" / "s.png"),
            ]
        )
        == 2
    )


# -- the series, by hand ---------------------------------------------------------------------
def _plan(text: str, S: int = 4) -> Any:
    return compile_plan(recipe_spec.loads(text), steps_per_epoch=S)


def test_sparsity_series_by_hand() -> None:
    plan = _plan(TINY)
    series = sparsity_series(plan)
    assert list(series) == ["GMPruningModifier line 2"]
    s = series["GMPruningModifier line 2"]
    assert s.values == pytest.approx([0.05] * 4 + [0.70625] * 4 + [0.8])
    assert [k for k, _ in s.updates] == [0, 4, 8]
    assert [v for _, v in s.updates] == pytest.approx([0.05, 0.70625, 0.8])
    # a later start: nothing in force before it; --epochs cuts the series
    late = _plan(TINY.replace("start_epoch: 0", "start_epoch: 1"))
    values = sparsity_series(late, epochs=1.5)["GMPruningModifier line 2"].values
    assert values[:4] == [None] * 4 and len(values) == 6
    assert values[4:] == pytest.approx([0.05, 0.05])


def test_sparsity_series_released_masks_and_groups() -> None:
    plan = _plan(
        TINY.replace("update_frequency: 1", "update_frequency: 1\n    leave_enabled: false")
    )
    values = sparsity_series(plan, epochs=3)["GMPruningModifier line 2"].values
    assert values[8] == 0.8 and values[9:] == [None] * 3
    grouped = _plan(
        "modifiers:\n  - !GMPruningModifier {params: [], init_sparsity: 0.0, "
        "final_sparsity: {0.5: [a], 0.9: [b, c]}, start_epoch: 0, end_epoch: 1, "
        "update_frequency: 0.5, inter_func: linear}\n",
        S=2,
    )
    series = sparsity_series(grouped)
    assert list(series) == [
        "GMPruningModifier line 2, group 1",
        "GMPruningModifier line 2, group 2",
    ]
    assert series["GMPruningModifier line 2, group 1"].values == pytest.approx([0.0, 0.25, 0.5])
    assert series["GMPruningModifier line 2, group 2"].values == pytest.approx([0.0, 0.45, 0.9])


def test_lr_series_by_hand() -> None:
    plan = _plan(TINY)
    assert lr_series(plan, initial_lr=0.5) == pytest.approx(
        [0.5] * 4 + [0.1, 0.08, 0.06, 0.04, 0.02]
    )
    assert lr_series(plan)[:4] == [None] * 4
    # after the function ends its final value stays in force
    assert lr_series(plan, epochs=3)[8:] == pytest.approx([0.02] * 4)
    assert len(lr_series(plan, epochs=0.5)) == 2


def test_lr_series_follows_group_0() -> None:
    plan = _plan(
        "modifiers:\n"
        "  - !SetLearningRateModifier {learning_rate: 0.3, start_epoch: 0, param_groups: [1]}\n"
        "  - !SetLearningRateModifier {learning_rate: 0.2, start_epoch: 1, param_groups: [0, 1]}\n"
        "  - !SetLearningRateModifier {learning_rate: 0.1, start_epoch: 2}\n"
        "  - !EpochRangeModifier {start_epoch: 0, end_epoch: 3}\n",
        S=2,
    )
    assert lr_series(plan, initial_lr=1.0) == [1.0, 1.0, 0.2, 0.2, 0.1, 0.1]


def test_lr_series_multistep_by_hand() -> None:
    plan = compile_plan(recipe_spec.load(RESNET), steps_per_epoch=10)
    lr = lr_series(plan)
    assert len(lr) == 700
    assert lr[0] == lr[429] == 0.005
    assert lr[430] == lr[599] == pytest.approx(0.0005)
    assert lr[600] == lr[-1] == pytest.approx(0.00005)


# -- the renderers directly ------------------------------------------------------------------
def test_renderers_agree_on_a_tiny_plan() -> None:
    rows = schedule_rows(_plan(TINY))
    assert [(r["step"], r["modifier"], r["action"]) for r in rows] == [
        (0, "GMPruningModifier", "start"),
        (4, "GMPruningModifier", "update"),
        (4, "LearningRateFunctionModifier", "start"),
        (5, "LearningRateFunctionModifier", "update"),
        (6, "LearningRateFunctionModifier", "update"),
        (7, "LearningRateFunctionModifier", "update"),
        (8, "GMPruningModifier", "end"),
        (8, "LearningRateFunctionModifier", "end"),
    ]
    assert rows[0]["params"] == ["fc.weight"] and rows[2]["params"] is None
    doc = json.loads(
        render_json(
            rows, {"recipe": "t.yaml", "steps_per_epoch": 4, "epochs": None, "max_epochs": 2}
        )
    )
    assert doc["events"] == rows
    assert len(list(csv.DictReader(io.StringIO(render_csv(rows))))) == len(rows)
    table = render_table(rows).splitlines()
    assert table[0].split() == list(COLUMNS) and len(table) == len(rows) + 2
    assert render_table([]) == "(no events)\n"
    assert json.loads(render_json([], {"recipe": "t.yaml"}))["events"] == []
    assert render_json(rows, {}).count("\n") == len(rows) + 10  # one line per event


# -- the docs page shows real output ---------------------------------------------------------
@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_docs_examples_are_real_output(
    fmt: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    monkeypatch.chdir(REPO)  # the page shows the recipe path relative to the repository

    page = (REPO / "docs" / "schedule-command.md").read_text()
    section = page.split(f"### `--format {fmt}`", 1)[1]
    shown = re.search(r"```\w*\n(.*?)```", section, re.S)
    assert shown is not None
    argv = ["schedule", "examples/mobilenet-prune-quantize.md", "--steps-per-epoch", "100"]
    rc, out, _ = _run([*argv, "--epochs", "0.6", "--format", fmt], capsys)
    assert rc == 0
    assert out == shown.group(1)


@pytest.mark.parametrize(
    ("starts", "expected"),
    [((-1, -1), 0), ((2.5, 7), 2), ((-1, 3.9, 5), 3), ((0.5,), 0)],
)
def test_json_reports_min_epochs(
    starts: tuple[float, ...], expected: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 16: ``min_epochs`` beside ``max_epochs``, as SparseML's manager reports it (the
    floor of the smallest start that is not -1; 0 when every start is -1)."""
    lines = ["modifiers:"] + [
        f"  - !SetLearningRateModifier {{start_epoch: {s}, learning_rate: 0.1}}" for s in starts
    ] + ["  - !EpochRangeModifier {start_epoch: -1, end_epoch: 9}"]
    recipe = tmp_path / "r.yaml"
    recipe.write_text("\n".join(lines) + "\n")
    rc, out, _ = _run(["schedule", str(recipe), "--steps-per-epoch", "4", "--format", "json"], capsys)
    assert rc == 0
    doc = json.loads(out)
    assert (doc["min_epochs"], doc["max_epochs"]) == (expected, 9)
    assert doc["min_epochs"] == compile_plan(recipe_spec.load(recipe), 4).min_epochs
    assert list(doc)[:7] == ["version", "recipe", "steps_per_epoch", "epochs", "max_epochs", "min_epochs", "events"]
