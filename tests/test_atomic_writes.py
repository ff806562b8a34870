"""Every file recipe-spec writes appears whole or not at all (:mod:`recipe_spec.atomic`), and a
recipe file is only ever read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from recipe_spec import atomic
from recipe_spec.cli import main

RECIPE = (
    "modifiers:\n  - !GMPruningModifier {params: __ALL_PRUNABLE__, init_sparsity: 0.05, "
    "final_sparsity: 0.8, start_epoch: 0, end_epoch: 2, update_frequency: 1}\n"
)


class Crash(Exception):
    pass


def _crash_at_replace(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``os.replace`` in :mod:`recipe_spec.atomic` fails (a kill between writing and renaming);
    returns the temporary paths it was given, which must be gone afterwards."""
    seen: list[str] = []

    def replace(src: str, dst: str) -> None:
        seen.append(src)
        assert Path(src).stat().st_size > 0, "the content is written before the rename"
        raise Crash(dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    return seen


def test_write_text_replaces_whole(tmp_path: Path) -> None:
    target = tmp_path / "out.yaml"
    target.write_text("old\n")
    atomic.write_text(target, "new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~atomic._umask()


def test_a_writer_that_fails_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.png"
    target.write_bytes(b"old")
    with pytest.raises(Crash), atomic.replacing(target) as tmp:
        assert tmp.endswith(".png") and Path(tmp).parent == tmp_path  # same directory, same suffix
        Path(tmp).write_bytes(b"half")
        raise Crash
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.png"]


def test_create_output_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "recipe.yaml"
    assert main(["create", "-o", str(out)]) == 0
    first = out.read_text()
    assert "modifiers" in first or "stage" in first
    seen = _crash_at_replace(monkeypatch)
    assert main(["create", "--lr", "cosine", "-o", str(out)]) == 2  # reported, not raised
    assert seen and out.read_text() == first and not any(Path(p).exists() for p in seen)


def test_manifest_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from recipe_spec.params import ParamRecord, read_manifest, write_manifest

    out = tmp_path / "params.json"
    records = [ParamRecord.from_json({"name": "fc.weight", "shape": [4, 4], "layer_type": "Linear", "prunable": True})]
    write_manifest(out, records, "torch")
    before = out.read_bytes()
    assert read_manifest(out)[1][0].name == "fc.weight"
    seen = _crash_at_replace(monkeypatch)
    with pytest.raises(Crash):
        write_manifest(out, records * 2, "torch")
    assert out.read_bytes() == before and seen and not any(Path(p).exists() for p in seen)


def test_plot_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    from recipe_spec.loader import loads
    from recipe_spec.schedule import compile_plan
    from recipe_spec.schedule import plot as schedule_plot

    plan = compile_plan(loads(RECIPE), 4)
    for suffix in (".png", ".svg"):
        out = tmp_path / f"plot{suffix}"
        schedule_plot.plot(plan, out)
        before = out.read_bytes()
        assert before[:4] in (b"\x89PNG", b"<?xm")
        seen = _crash_at_replace(monkeypatch)
        with pytest.raises(Crash):
            schedule_plot.plot(plan, out)
        assert out.read_bytes() == before and not any(Path(p).exists() for p in seen)
        monkeypatch.undo()


def test_keras_recipe_state_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("keras")
    import numpy as np
    from recipe_spec_keras.checkpoint import load_recipe_state, save_recipe_state

    out = tmp_path / "model.keras.recipe.npz"
    state = {"version": 1, "step": 3, "masks": {"fc/kernel": (np.ones((2, 2), bool), 0, 0.5)}}
    save_recipe_state(state, out)
    before = out.read_bytes()
    assert load_recipe_state(out)["step"] == 3
    seen = _crash_at_replace(monkeypatch)
    with pytest.raises(Crash):
        save_recipe_state({**state, "step": 4}, out)
    assert out.read_bytes() == before and not any(Path(p).exists() for p in seen)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.keras.recipe.npz"]


def test_recipes_are_only_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """validate, lint, schedule and the plot leave a read-only recipe and its folder as they were."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    recipe.chmod(0o444)
    before = (recipe.read_bytes(), recipe.stat().st_mtime_ns, sorted(os.listdir(tmp_path)))
    params = tmp_path.parent / f"{tmp_path.name}-params.json"
    from recipe_spec.params import ParamRecord, write_manifest

    write_manifest(params, [ParamRecord.from_json({"name": "fc.weight", "shape": [4, 4], "layer_type": "Linear", "prunable": True})], "torch")
    assert main(["validate", str(recipe)]) == 0
    assert main(["lint", str(recipe), "--params", str(params)]) in (0, 1)
    assert main(["schedule", str(recipe), "--steps-per-epoch", "4", "--format", "json"]) == 0
    capsys.readouterr()
    assert (recipe.read_bytes(), recipe.stat().st_mtime_ns, sorted(os.listdir(tmp_path))) == before


def _folder(path: Path, files: dict[str, str]) -> Path:
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def _listing(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir()}


@pytest.mark.parametrize("failure", [Crash, KeyboardInterrupt, OSError])
def test_a_folder_writer_that_fails_leaves_the_old_folder(tmp_path: Path, failure: type[BaseException]) -> None:
    old = {"model.safetensors.index.json": "{}", "model-00001-of-00002.safetensors": "a",
           "model-00002-of-00002.safetensors": "b"}
    target = _folder(tmp_path / "model", old)
    with pytest.raises(failure), atomic.replacing_dir(target) as tmp:
        assert Path(tmp).parent == tmp_path and Path(tmp).name.startswith(".model.")
        (Path(tmp) / "config.json").write_text("{}")  # half a model: config, no weights
        raise failure()
    assert _listing(target) == old and [p.name for p in tmp_path.iterdir()] == ["model"]


def test_a_folder_replaced_keeps_nothing_of_the_old_one(tmp_path: Path) -> None:
    target = _folder(tmp_path / "model", {"model.safetensors.index.json": "{}", "model-00001-of-00002.safetensors": "a"})
    with atomic.replacing_dir(target) as tmp:
        (Path(tmp) / "model.safetensors").write_text("new")
    assert _listing(target) == {"model.safetensors": "new"} and [p.name for p in tmp_path.iterdir()] == ["model"]
    link = tmp_path / "link"
    link.symlink_to(target)  # a link to the folder: the folder is replaced, the link kept
    with atomic.replacing_dir(link) as tmp:
        (Path(tmp) / "model.safetensors").write_text("newer")
    assert link.is_symlink() and _listing(target) == {"model.safetensors": "newer"}


@pytest.mark.parametrize("which", ["aside", "in"])
def test_a_rename_that_fails_leaves_the_old_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    """The old folder moved aside, then the new one cannot take its name (or the old one cannot
    be moved): the old folder is back under its name, and nothing else is left."""
    old = {"pytorch_model.bin": "old"}
    target = _folder(tmp_path / "model", old)
    real = os.replace

    def replace(src: str, dst: str) -> None:
        moving_in = src.endswith(".tmp") and dst == str(target)
        if moving_in == (which == "in"):
            raise Crash(dst)
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(Crash), atomic.replacing_dir(target) as tmp:
        (Path(tmp) / "model.safetensors").write_text("new")
    assert _listing(target) == old and [p.name for p in tmp_path.iterdir()] == ["model"]
