"""Every corpus recipe that validates draws a picture (``recipe-spec schedule --plot``).

Pictures are drawn at a low resolution so the whole corpus takes seconds; the layout, which
is what failed on large recipes, does not depend on the resolution.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import corpus_rows

from recipe_spec.diagnostics import Severity
from recipe_spec.loader import check, loads
from recipe_spec.schedule import compile_plan
from recipe_spec.schedule.events import MAX_EVENTS, PlanError
from recipe_spec.schedule.plot import MAX_LEGEND_ENTRIES, _capped, _markers
from recipe_spec.validation import validate_recipe

pytest.importorskip("matplotlib")

from recipe_spec.schedule.plot import plot  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"
BERT_73 = "integrations/huggingface-transformers/recipes/99sparsity2epoch.yaml"


def _plot_rows(job: tuple[list[dict[str, str]], str]) -> dict[str, list[str]]:
    """Plot each valid recipe of ``rows`` into ``folder``: what was plotted, skipped, failed."""
    rows, folder = job
    out: dict[str, list[str]] = {"plotted": [], "plan_errors": [], "too_big": [], "failures": []}
    for row in rows:
        recipe, diags = check(row["path"])
        if recipe is None or any(
            d.severity is Severity.ERROR for d in diags + validate_recipe(recipe)
        ):
            continue
        try:
            plan = compile_plan(recipe, 10)  # few events per epoch: quick to enumerate
        except PlanError:
            out["plan_errors"].append(row["file"])
            continue
        if plan.events_bound() > MAX_EVENTS:  # the command refuses to preview these
            out["too_big"].append(row["file"])
            continue
        png = Path(folder) / f"{row['file'].replace('/', '_')}.png"
        try:
            plot(plan, png, dpi=20)
        except Exception as exc:  # collect them all, to name every recipe that fails
            out["failures"].append(f"{row['file']}: {type(exc).__name__}: {exc}")
            continue
        out["plotted"].append(str(png))
    return out


@pytest.mark.slow  # about 200 pictures: most of a minute on two busy cores
def test_every_valid_corpus_recipe_plots(tmp_path: Path) -> None:
    rows = corpus_rows()
    found = _plot_rows((rows, str(tmp_path)))
    assert not found["failures"], "\n".join(found["failures"])
    assert len(found["plan_errors"]) <= 10, found["plan_errors"]
    assert len(found["too_big"]) <= 10, found["too_big"]
    plotted = found["plotted"]
    assert len(plotted) >= 200 and len(plotted) > len(rows) // 2, len(plotted)
    for png in plotted:
        assert Path(png).read_bytes()[:8] == PNG, png


def _recipe(n_gmp: int, distinct: bool) -> str:
    lines = ["modifiers:", "  - !EpochRangeModifier {start_epoch: 0, end_epoch: 40}"]
    for i in range(n_gmp):
        start = i % 10 if distinct else 0
        lines.append(
            f"  - !GMPruningModifier {{params: [layer{i}.weight], init_sparsity: 0.05, "
            f"final_sparsity: {0.5 + i / (2 * n_gmp) if distinct else 0.9:.3f}, "
            f"start_epoch: {start}, end_epoch: {start + 20}, update_frequency: 1}}"
        )
    for i in range(n_gmp // 3):
        lines.append(
            f"  - !ConstantPruningModifier {{params: [head{i}.weight], start_epoch: {i}, "
            f"end_epoch: {30 + i % 7}}}"
        )
    for i in range(n_gmp // 4):
        lines.append(f"  - !SetLearningRateModifier {{learning_rate: {0.1 / (i + 1):.4f}, start_epoch: {2 * i}}}")
    return "\n".join(lines) + "\n"


def test_many_modifiers_of_one_schedule_share_a_label() -> None:
    plan = compile_plan(loads(_recipe(72, distinct=False)), 10)
    labels = dict(_markers(plan, list(plan.iter_events())))
    assert "GMP \u00d772 start" in labels[0]
    assert all(len(text) < 200 for text in labels.values())


def test_capped_labels_count_what_they_leave_out() -> None:
    parts = [f"GMP (line {n}) start" for n in range(40)]
    text = _capped(parts, 64)
    assert len(text) <= 64 and text.endswith("more")
    kept = text.count("GMP")
    assert f"+{40 - kept} more" in text
    assert _capped(["GMP end", "LR end"], 64) == "GMP end, LR end"


@pytest.mark.parametrize("distinct", [False, True], ids=["same", "distinct"])
@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_crowded_recipes_plot_the_same_bytes_twice(tmp_path: Path, distinct: bool, suffix: str) -> None:
    plan = compile_plan(loads(_recipe(60, distinct)), 20)
    first, second = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    plot(plan, first, dpi=30)
    plot(plan, second, dpi=30)
    assert first.read_bytes() == second.read_bytes()
    assert first.read_bytes()[:8] == PNG if suffix == ".png" else b"<svg" in first.read_bytes()[:400]


def test_legend_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    seen: list[int] = []
    legend = Figure.legend

    def spy(self: Figure, *args: object, **kwargs: object) -> object:
        seen.append(len(kwargs["handles"]))  # type: ignore[arg-type]
        return legend(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "legend", spy)
    plot(compile_plan(loads(_recipe(60, distinct=True)), 20), tmp_path / "x.png", dpi=30)
    assert seen == [MAX_LEGEND_ENTRIES]


def test_the_73_modifier_bert_recipe_plots_from_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from recipe_spec.cli import main

    (row,) = [r for r in corpus_rows() if r["source_path"] == BERT_73 and r["kind"] == "latest"]
    out = tmp_path / "bert.png"
    assert main(["schedule", row["path"], "--steps-per-epoch", "100", "--plot", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().err
    assert out.read_bytes()[:8] == PNG
