"""Acceptance test of the pre-commit hook in .pre-commit-hooks.yaml.

pre-commit selects the staged files whose path matches the hook's ``files`` regex
(``re.search`` on the path relative to the repository root) and whose identify tags include
one of ``types_or``, then runs ``entry`` followed by those paths. This test does the same with
the ``recipe-spec`` executable of the running environment.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO

HOOKS = REPO / ".pre-commit-hooks.yaml"

GOOD = (
    "modifiers:\n"
    "  - !EpochRangeModifier\n"
    "    start_epoch: 0\n"
    "    end_epoch: 10\n"
)
# end_epoch given twice: Y002 at line 5, column 5 (the second key).
BAD = (
    "modifiers:\n"
    "  - !GMPruningModifier\n"
    "    params: __ALL_PRUNABLE__\n"
    "    end_epoch: 10\n"
    "    end_epoch: 20\n"
)
CARD = "---\n" + GOOD + "---\n\n# A recipe card\n\nThe recipe is the front matter.\n"

# The identify tags (https://github.com/pre-commit/identify) of the extensions the hook's
# `files` regex selects; identify itself is not a dependency of this project.
IDENTIFY_TAGS = {".yaml": "yaml", ".yml": "yaml", ".md": "markdown", ".json": "json"}


@pytest.fixture(scope="module")
def hook() -> dict[str, Any]:
    hooks = yaml.safe_load(HOOKS.read_text(encoding="utf-8"))
    assert isinstance(hooks, list) and len(hooks) == 1
    return hooks[0]


@pytest.fixture(scope="module")
def executable() -> str:
    name = "recipe-spec.exe" if os.name == "nt" else "recipe-spec"
    path = Path(sys.executable).parent / name
    if not path.exists():
        pytest.skip(f"{path} is not installed (pip install -e . installs it)")
    return str(path)


def _selected(hook: dict[str, Any], paths: list[str]) -> list[str]:
    """The paths pre-commit would pass to the hook, in order."""
    files = re.compile(hook["files"])
    types = set(hook.get("types_or", [])) or None
    out = []
    for p in paths:
        if not files.search(p):
            continue
        if types is not None and IDENTIFY_TAGS.get(Path(p).suffix) not in types:
            continue
        out.append(p)
    return out


def _run(hook: dict[str, Any], executable: str, files: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(hook["entry"])
    assert argv[0] == "recipe-spec"
    return subprocess.run(
        [executable, *argv[1:], *hook.get("args", []), *files],
        cwd=cwd, capture_output=True, text=True, timeout=60,
    )


def test_hook_definition(hook: dict[str, Any]) -> None:
    assert hook["id"] == "recipe-spec-validate"
    assert hook["name"] == "recipe-spec validate"
    assert hook["entry"] == "recipe-spec validate"
    assert hook["language"] == "python"
    assert hook["files"] == r"\.(ya?ml|md|json)$"
    assert set(hook["types_or"]) == {"yaml", "markdown", "json"}
    assert hook.get("pass_filenames", True) is True, "the hook must receive the file names"
    assert not hook.get("always_run", False)
    assert set(hook) <= {
        "id", "name", "entry", "language", "files", "exclude", "types", "types_or",
        "exclude_types", "args", "pass_filenames", "always_run", "description",
        "require_serial", "minimum_pre_commit_version", "stages", "verbose",
    }, "unknown key in .pre-commit-hooks.yaml"


def test_files_regex_selects_recipe_files_only(hook: dict[str, Any]) -> None:
    staged = [
        "recipes/good.yaml", "recipes/old.yml", "recipes/card.md", "recipes/r.json",
        "train.py", "notes.txt", "recipes/good.yaml.bak", "recipes/yaml", "Makefile",
        "recipes/template.yml.j2",
    ]
    assert _selected(hook, staged) == [
        "recipes/good.yaml", "recipes/old.yml", "recipes/card.md", "recipes/r.json",
    ]


def test_hook_passes_on_good_recipes(hook: dict[str, Any], executable: str, tmp_path: Path) -> None:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes/good.yaml").write_text(GOOD)
    (tmp_path / "recipes/card.md").write_text(CARD)
    (tmp_path / "train.py").write_text("import this  # not a recipe: never passed to the hook\n")
    files = _selected(hook, ["recipes/card.md", "recipes/good.yaml", "train.py"])
    assert files == ["recipes/card.md", "recipes/good.yaml"]
    result = _run(hook, executable, files, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 file(s) checked" in result.stdout


def test_hook_fails_on_a_duplicate_key(hook: dict[str, Any], executable: str, tmp_path: Path) -> None:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes/good.yaml").write_text(GOOD)
    (tmp_path / "recipes/bad.yml").write_text(BAD)
    (tmp_path / "notes.txt").write_text("end_epoch: 1\nend_epoch: 2\n")  # never selected
    files = _selected(hook, ["notes.txt", "recipes/bad.yml", "recipes/good.yaml"])
    assert files == ["recipes/bad.yml", "recipes/good.yaml"]
    result = _run(hook, executable, files, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "recipes/bad.yml:5:5: Y002 [error]" in result.stdout
    assert "notes.txt" not in result.stdout and "good.yaml:" not in result.stdout
