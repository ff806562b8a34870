"""The one-shot fuzz campaign's machinery (``benchmarks/fuzz_oneshot.py``): cases rebuild from
their ids, a small campaign runs through every surface, and each defect class is caught when a
fake surface commits it on purpose: a refusal after a weight changed is ``half-changed``, after a
file was written ``half-written``; a sleep past the limit is a ``hang`` (the worker's alarm), and
so is a worker that blocks the alarm (the parent's watchdog kills it, and the next case runs in a
new worker); a numpy IndexError and a dying worker are ``raw-error``; a run of a case a correct
tool refuses is ``silent``. The campaign's own findings on the current code are in
``test_oneshot_fuzz_regressions.py``."""

from __future__ import annotations

import json
import linecache
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_oneshot_driver import DEFECTS, reproducer, run_cases, summary  # noqa: E402
from fuzz_oneshot_inputs import FAMILIES, make_case  # noqa: E402
from fuzz_oneshot_worker import unclear  # noqa: E402

OUTCOMES = {"refused", "ran", *DEFECTS}


def test_a_case_is_rebuilt_from_its_id_and_backend() -> None:
    assert json.dumps(make_case(17)) == json.dumps(make_case(17))
    assert make_case(17) != make_case(18) and make_case(17, "keras") != make_case(17)
    families = {make_case(i)["family"] for i in range(300)}
    assert families == set(FAMILIES)
    assert {make_case(i)["surface"] for i in range(300)} == {"api", "manager", "cli"}
    assert all(make_case(i, "keras")["surface"] != "cli" for i in range(100))


def _fake(surface: str, case_id: int = 0, expect: str = "refuse", output: str = "none") -> dict:
    case = make_case(case_id, "torch", "api")
    case.update(surface=f"fake-{surface}", expect=expect, family="fake", mutation=surface, limit=2.0)
    case["output"] = {"kind": output}
    return case


CAMPAIGN = 16


@pytest.fixture(scope="module")
def results() -> list[dict]:
    """A small campaign (PyTorch cases 0-15, 20 s each), then the fake surfaces (2 s each, the
    watchdog 2 s after the worker's own alarm), in one worker while it lives."""
    cases = [make_case(i) for i in range(CAMPAIGN)]
    cases += [_fake("refuse", 1), _fake("half", 2), _fake("halfwrite", 3, output="new"), _fake("raw", 4),
              _fake("silent", 5), _fake("ok", 6, expect="run"), _fake("hang", 7), _fake("stuck", 8),
              _fake("refuse", 9), _fake("ok", 11, expect="run", output="new"), _fake("crash", 10)]
    return list(run_cases(cases, limit=20.0, grace=2.0))


@pytest.fixture(scope="module")
def fakes(results: list[dict]) -> dict[str, dict]:
    return {f"{r['mutation']}-{r['id']}": r for r in results[CAMPAIGN:]}


@pytest.mark.parametrize(("key", "outcome"), [
    ("refuse-1", "refused"), ("half-2", "half-changed"), ("halfwrite-3", "half-written"), ("raw-4", "raw-error"),
    ("silent-5", "silent"), ("ok-6", "ran"), ("hang-7", "hang"), ("stuck-8", "hang"), ("refuse-9", "refused"),
    ("crash-10", "raw-error"), ("ok-11", "half-written")])
def test_each_defect_class_is_caught(fakes: dict[str, dict], key: str, outcome: str) -> None:
    """``ok-11`` asked for an output folder and wrote none: a run without its folder."""
    assert fakes[key]["outcome"] == outcome, fakes[key]


def test_a_stuck_worker_is_killed_by_the_watchdog_and_replaced(fakes: dict[str, dict]) -> None:
    assert "killed" in fakes["stuck-8"]["detail"]
    assert "worker process died" in fakes["crash-10"]["detail"]
    assert fakes["refuse-9"]["outcome"] == "refused"  # the next case, in a new worker


def test_what_a_clear_refusal_is() -> None:
    import numpy as np

    import recipe_spec

    with pytest.raises(TypeError) as ours:
        recipe_spec.oneshot(model=None, recipe=None)
    assert unclear(ours.value) is None
    with pytest.raises(IndexError) as numpy_error:
        np.zeros(3)[5]  # noqa: B018
    assert "not a refusal" in unclear(numpy_error.value)
    try:
        np.zeros(3).reshape(7)
    except ValueError as exc:  # a ValueError, but raised inside numpy
        assert "raised in" in unclear(exc)
    for where in (".shim/recipe_spec_keras/x.py", "site-packages/recipe_spec_torch/x.py", "site-packages/torch/x.py"):
        # a backend's own refusal, reached through a link or installed as its package; torch's is not ours
        name = str(Path(__file__).resolve().parent.parent / where) if where.startswith(".") else "/lib/" + where
        source = "def refuse():\n    raise ValueError('a clear refusal')\n"
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        scope: dict = {}
        exec(compile(source, name, "exec"), scope)  # noqa: S102 - a function whose frame has that file name
        try:
            scope["refuse"]()
        except ValueError as exc:
            assert (unclear(exc) is None) == ("/torch/" not in where), (where, unclear(exc))
    try:
        int("x")
    except ValueError as exc:  # Python's own, here: not a raise statement of recipe-spec's code
        assert unclear(exc) is not None


def test_a_small_campaign_classifies_every_case(results: list[dict]) -> None:
    """16 PyTorch cases, each surface at least once: every outcome is a known class, and the
    report's table and reproducers are written."""
    results = results[:CAMPAIGN]
    assert {r["surface"] for r in results} == {"api", "manager", "cli"}
    assert [r["id"] for r in results] == list(range(CAMPAIGN))
    assert {r["outcome"] for r in results} <= OUTCOMES, [r for r in results if r["outcome"] not in OUTCOMES]
    assert any(r["outcome"] == "ran" for r in results) and any(r["outcome"] == "refused" for r in results)
    table = summary(results)
    assert "torch    api" in table and "family" in table
    assert reproducer(results[3]) == "python benchmarks/fuzz_oneshot.py --backend torch --case 3"
    assert os.path.exists(Path(__file__).resolve().parent.parent / "benchmarks" / "fuzz_oneshot.py")
