"""Acceptance test of the pre-commit hook in .pre-commit-hooks.yaml.

pre-commit selects the staged files whose path matches the hook's ``files`` regex
(``re.search`` on the path relative to the repository root) and whose identify tags include
one of ``types_or``, then runs ``entry`` followed by those paths. Most tests here do the same
with the ``recipe-spec`` executable of the running environment; the last runs pre-commit
itself (``pre-commit run --all-files``) on a repository with recipes, a README, CI files and
its own configuration, the hook declared as a local hook with the fields of
.pre-commit-hooks.yaml (a ``language: python`` hook would make pre-commit install this
repository into a new environment from the network).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
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
    assert hook["entry"] == "recipe-spec validate --recipes-only"
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


# A repository as the hook meets it: recipes beside files that are not recipes, some of them
# YAML or Markdown that mentions modifiers without being a recipe.
NOT_RECIPES = {
    ".pre-commit-config.yaml": None,  # written by the test: it names the hook
    "README.md": (
        "# Models\n\n---\n\nThe recipe we use:\n\n```yaml\nmodifiers:\n  - !GMPruningModifier\n"
        "    end_epoch: 1\n    end_epoch: 2\n```\n\n---\n"
    ),
    ".github/workflows/ci.yml": (
        "name: ci\non: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v4\n      - run: recipe-spec validate recipes/  # !GMPruningModifier\n"
    ),
    ".gitlab-ci.yml": "stages: [build, test]\nbuild:\n  stage: build\n  script: [make]\n",
    "package.json": '{"name": "models", "version": "1.0.0", "scripts": {"test": "pytest"}}\n',
    "docs/notes.md": "---\ntitle: Notes\nlayout: post\n---\n\nPruning notes.\n",
}
STAGED = (
    "sparsity_stage:\n"
    "  sparsity_modifiers:\n"
    "    SparseGPTModifier:\n"
    "      sparsity: 0.5\n"
    "      targets: ['re:.*proj']\n"
)


def _repository(root: Path, config: str) -> list[str]:
    """The files of the test repository under ``root``, written; their relative paths."""
    files = {
        "recipes/good.yaml": GOOD, "recipes/bad.yml": BAD, "recipes/card.md": CARD,
        "recipes/llm/sparsegpt.yaml": STAGED, **NOT_RECIPES, ".pre-commit-config.yaml": config,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return sorted(files)


def _only_the_recipes_findings(output: str) -> None:
    assert "recipes/bad.yml:5:5: Y002 [error]" in output, output
    for rel in NOT_RECIPES:
        assert rel not in output, f"{rel} was checked as a recipe:\n{output}"
    assert "S001" not in output and "Y006" not in output, output
    # pre-commit may split the files over several runs of the hook: one summary line each
    checked = [int(n) for n in re.findall(r"^(\d+) file\(s\) checked", output, re.M)]
    assert sum(checked) == 4, output


def test_hook_over_every_file_reports_only_the_recipes(
    hook: dict[str, Any], executable: str, tmp_path: Path
) -> None:
    """The hook's command over every file its filters select, as pre-commit would run it."""
    files = _selected(hook, _repository(tmp_path, "repos: []\n"))
    assert ".pre-commit-config.yaml" in files and "README.md" in files and "package.json" in files
    result = _run(hook, executable, files, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    _only_the_recipes_findings(result.stdout)
    # Without --recipes-only every file named is a recipe: the configuration gets S001.
    named = subprocess.run([executable, "validate", ".pre-commit-config.yaml"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert named.returncode == 1 and "S001" in named.stdout
    # and a run given no recipe at all passes (a commit touching only the README).
    readme = _run(hook, executable, ["README.md", "package.json"], tmp_path)
    assert readme.returncode == 0 and "0 file(s) checked" in readme.stdout, readme.stdout + readme.stderr


def test_pre_commit_run_all_files(hook: dict[str, Any], executable: str, tmp_path: Path) -> None:
    pytest.importorskip("pre_commit")
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    local = {key: hook[key] for key in ("id", "name", "files", "types_or", "require_serial") if key in hook}
    local.update(entry=" ".join([shlex.quote(executable), *shlex.split(hook["entry"])[1:]]), language="system")
    config = yaml.safe_dump({"repos": [{"repo": "local", "hooks": [local]}]}, sort_keys=False)
    repo = tmp_path / "repo"
    repo.mkdir()
    _repository(repo, config)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "GIT_CONFIG_NOSYSTEM": "1",
           "HOME": str(tmp_path), "PRE_COMMIT_COLOR": "never"}
    for argv in (["init", "-q"], ["add", "-A"]):
        subprocess.run([git, *argv], cwd=repo, check=True, env=env, timeout=60)
    result = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files", "--color", "never"],
                            cwd=repo, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "recipe-spec validate" in result.stdout and "Failed" in result.stdout
    _only_the_recipes_findings(result.stdout)
    (repo / "recipes/bad.yml").write_text(GOOD)
    result = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files", "--color", "never"],
                            cwd=repo, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0 and "Passed" in result.stdout, result.stdout + result.stderr
