"""A plain (non-editable) build ships the core, both backends, the schemas and the entry
points, and works from outside the source tree. (.ci/run also installs it into a fresh venv.)"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    (found,) = out.glob("recipe_spec-*.whl")
    return found


@pytest.mark.slow
def test_wheel_ships_schemas_backends_and_entry_points(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "recipe_spec/__init__.py" in names
    # every package of the source tree ships (a missing one hides behind an editable install)
    source_packages = {
        str(p.parent.relative_to(REPO)) for p in (REPO / "recipe_spec").rglob("__init__.py")
    }
    shipped = {n.rsplit("/", 1)[0] for n in names if n.endswith("/__init__.py")}
    assert source_packages <= shipped, source_packages - shipped
    assert "recipe_spec_torch/backend.py" in names and "recipe_spec_keras/backend.py" in names
    assert "recipe_spec/schemas/modifiers/GMPruningModifier.schema.json" in names
    assert "recipe_spec/schemas/stage/GPTQModifier.schema.json" in names
    assert "recipe_spec/schemas/recipe-stage.schema.json" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "recipe-spec = recipe_spec.cli:main" in text
    assert "torch = recipe_spec_torch:backend" in text and "keras = recipe_spec_keras:backend" in text
    assert not any(n.startswith(("tests/", "examples/")) for n in names)


@pytest.mark.slow
def test_installed_wheel_works_outside_the_source_tree(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    code = (
        "import importlib.resources as r, recipe_spec, recipe_spec.schedule, recipe_spec.cli, sys\n"
        "mods = [m for n, m in sys.modules.items() if n.startswith('recipe_spec') and getattr(m, '__file__', None)]\n"
        "bad = [m.__file__ for m in mods if not m.__file__.startswith(sys.argv[1])]\n"
        "assert not bad, bad\n"
        "names = [p.name for p in (r.files('recipe_spec.schemas') / 'modifiers').iterdir()]\n"
        "print(len(names), recipe_spec.available_backends(), recipe_spec.get_backend('keras').name)\n"
        "from recipe_spec.cli import main\n"
        "sys.exit(main(['validate', sys.argv[2]]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(target), str(REPO / "examples")],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr + out.stdout
    count, rest = out.stdout.split(" ", 1)
    assert int(count) >= 9
    assert "'keras', 'torch'" in rest and rest.strip().splitlines()[0].endswith("keras")
