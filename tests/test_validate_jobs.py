"""`recipe-spec validate --jobs N`: worker processes change nothing in the output."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import corpus_rows

from recipe_spec.cli import main


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 100 corpus files (errors, warnings and clean ones) in one directory tree."""
    root = tmp_path_factory.mktemp("many")
    rows = corpus_rows()
    for i, row in enumerate(rows[:100]):
        src = Path(row["path"])
        folder = root / f"d{i % 7}"
        folder.mkdir(exist_ok=True)
        shutil.copy(src, folder / f"{i:03d}_{src.name}")
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["validate", *argv])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_jobs_2_prints_what_one_process_prints(many: Path, capsys, fmt: str) -> None:
    one = run(capsys, str(many), "--format", fmt, "--jobs", "1")
    two = run(capsys, str(many), "--format", fmt, "--jobs", "2")
    assert two == one
    assert one[1].count(str(many)) > 0


def test_the_summary_and_exit_code_match(many: Path, capsys) -> None:
    code1, out1 = run(capsys, str(many), "--jobs", "1")
    code2, out2 = run(capsys, str(many), "--jobs", "2")
    assert code1 == code2 == 1  # the corpus has recipes with errors
    assert out1.splitlines()[-1] == out2.splitlines()[-1]
    assert out1.splitlines()[-1].startswith("100 file(s) checked:")


def test_select_and_exit_zero_with_jobs(many: Path, capsys) -> None:
    args = ("--select", "M", "--exit-zero")
    assert run(capsys, str(many), *args, "--jobs", "2") == run(capsys, str(many), *args, "--jobs", "1")


@pytest.mark.parametrize("bad", ["0", "-1", "two"])
def test_jobs_must_be_a_positive_integer(many: Path, capsys, bad: str) -> None:
    assert main(["validate", str(many), "--jobs", bad]) == 2
