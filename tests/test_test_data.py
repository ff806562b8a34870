"""The suite reads nothing outside the repository: its data is in ``tests/data`` (see its
README), every file there is one that ``tests/data/refresh.py`` takes in, and the refresh
script reports what differs from a shared folder."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import shutil
import sys
from fnmatch import fnmatch
from pathlib import Path
from types import ModuleType

import pytest
from conftest import REPO
from testdata import DATA, QUALITY

#: path forms that reach outside the checkout (the project's ../shared, one machine's folders)
OUTSIDE = re.compile(r"""parents\[2\]|parent\.parent\.parent|["']/work/|(REPO|ROOT)\.parent\b""")


@functools.cache
def _refresh() -> ModuleType:
    """``tests/data/refresh.py`` (a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("refresh_test_data", DATA / "refresh.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_no_test_reads_a_path_outside_the_repository() -> None:
    files = [p for p in (REPO / "tests").rglob("*.py") if not {"data", "fixtures"} & set(p.relative_to(REPO / "tests").parts)]
    assert len(files) > 100
    found = {str(p.relative_to(REPO)): m.group(0) for p in files if (m := OUTSIDE.search(p.read_text()))}
    assert found == {}


def test_every_vendored_file_is_one_the_refresh_takes_in() -> None:
    refresh = _refresh()
    patterns = [pattern for s in refresh.SETS for pattern in s.patterns]
    files = refresh.present()
    assert len(files) > 300
    stray = sorted(f for f in files if not any(fnmatch(f, p) or fnmatch(f, p.replace("**/", "")) for p in patterns))
    assert stray == []
    index = (DATA / "README.md").read_text()
    for s in refresh.SETS:  # each set says where it came from: its own README, and a row of the index
        assert all((DATA / p).is_file() for p in s.patterns if p.endswith("README.md")), s.name
        folder = s.patterns[0].split("/*")[0].rsplit("/README.md")[0]
        assert f"| `{folder}/` |" in index, s.name


def test_the_quality_slice_keeps_the_anchors_form() -> None:
    d = json.loads((QUALITY / "calibration.json").read_text())
    assert d["num_samples"] == len(d["samples"]) == _refresh().QUALITY_SAMPLES
    assert d["seq_len"] == 512 and {len(s) for s in d["samples"]} == {512}


def test_refresh_reports_what_differs_from_a_shared_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A shared folder holding exactly the vendored files (the READMEs already reworded, the
    calibration already cut) is in step; a changed file, a new one and a missing one are each
    reported and make ``--check`` exit 1, with nothing written."""
    refresh = _refresh()
    shared = tmp_path / "shared"
    shutil.copytree(DATA, shared, ignore=shutil.ignore_patterns("refresh.py", "__pycache__"))
    (shared / "README.md").unlink()
    assert refresh.main(["--shared", str(shared), "--check"]) == 0
    assert "0 added, 0 changed, 0 removed" in capsys.readouterr().out
    (shared / "seeds" / "000_52e37f8d0dd9b096.txt").write_text("changed\n")
    (shared / "conformance" / "sparseml" / "98_new_case.json").write_text("{}\n")
    (shared / "corpus" / "INDEX.tsv").unlink()
    before = (DATA / "seeds" / "000_52e37f8d0dd9b096.txt").read_bytes()
    assert refresh.main(["--shared", str(shared), "--check"]) == 1
    out = capsys.readouterr().out
    assert "changed  seeds/000_52e37f8d0dd9b096.txt" in out
    assert "added    conformance/sparseml/98_new_case.json" in out
    assert "removed  corpus/INDEX.tsv" in out
    assert (DATA / "seeds" / "000_52e37f8d0dd9b096.txt").read_bytes() == before
    assert refresh.main(["--shared", str(tmp_path / "nowhere")]) == 2
