"""The one-shot fuzz campaign's findings, replayed: each case of
``tests/fixtures/oneshot_fuzz_regressions.json`` (one of each defect kind the campaign found,
``benchmarks/fuzz_oneshot.py --regressions``; the case held in full, so a change of the
generator does not change it) runs through its surface in a worker process, and must end as a
clear refusal with the model untouched or as a complete run (``fuzz_oneshot_worker.classify``).

A case marked ``fails_now`` still fails on the current code: it is an ``xfail(strict=True)``
naming the defect, so the suite stays green and a fix shows as an XPASS failure until its mark
is removed (set ``fails_now`` to false in the file)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_oneshot_driver import run_cases  # noqa: E402

FILE = Path(__file__).resolve().parent / "fixtures" / "oneshot_fuzz_regressions.json"
ENTRIES: list[dict[str, Any]] = json.loads(FILE.read_text())["cases"]
HAS_KERAS = importlib.util.find_spec("keras_hub") is not None


def _param(entry: dict[str, Any]) -> Any:
    marks = []
    if entry["fails_now"]:
        marks.append(pytest.mark.xfail(strict=True, reason=f"{entry['found']}: {entry['detail'][:300]}"))
    if entry["case"]["backend"] == "keras" and not HAS_KERAS:
        marks.append(pytest.mark.skip(reason="needs keras-hub"))
    return pytest.param(entry, id=entry["key"], marks=marks)


@pytest.fixture(scope="module")
def outcomes() -> dict[str, dict[str, Any]]:
    """Every case's result, from one worker per backend (Keras on TensorFlow, 60 s a case: its
    first run of a layer shape traces functions)."""
    entries = [e for e in ENTRIES if e["case"]["backend"] == "torch" or HAS_KERAS]
    cases = [dict(e["case"], limit=60.0 if e["case"]["backend"] == "keras" else 20.0) for e in entries]
    results = run_cases(cases, limit=20.0)
    return {e["key"]: r for e, r in zip(entries, results, strict=True)}


def test_the_file_holds_each_defect_kind_once() -> None:
    kinds = [(e["case"]["backend"], e["found"], e["case"]["family"], e["case"]["mutation"]) for e in ENTRIES]
    assert len(kinds) == len(set(kinds)) and len({e["key"] for e in ENTRIES}) == len(ENTRIES)
    assert {e["found"] for e in ENTRIES} <= {"hang", "raw-error", "half-changed", "half-written", "silent", "bad-run"}


@pytest.mark.parametrize("entry", [_param(e) for e in ENTRIES])
def test_a_case_the_campaign_found_is_refused_clearly_or_runs(outcomes: dict[str, dict[str, Any]],
                                                               entry: dict[str, Any]) -> None:
    result = outcomes[entry["key"]]
    assert result["outcome"] in ("refused", "ran"), f"{result['outcome']}: {result['detail']}"
