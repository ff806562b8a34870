"""The plan's fast paths (tracks stepped together, a per-layer recipe's events built in one pass
with the curve evaluated once) give exactly the events of each track asked alone, in manager
order, on every corpus recipe that compiles."""

from __future__ import annotations

from conftest import corpus_rows

from recipe_spec.loader import check
from recipe_spec.schedule import compile_plan
from recipe_spec.schedule.events import PlanError
from recipe_spec.validation import validate_recipe


def _reference(plan, step: int) -> list:
    """Each track on its own: the events of every track due at ``step``, in manager order."""
    out = []
    for t in sorted(plan.tracks, key=lambda t: t.order):
        if t.next_step(step) == step:
            out.extend(t.make(step))
    return out


def test_fast_paths_equal_each_track_alone() -> None:
    compared = shared = 0
    for row in corpus_rows():
        recipe, diagnostics = check(row["path"])
        if recipe is None or any(d.severity.name == "ERROR" for d in validate_recipe(recipe)):
            continue
        for S in (13,):
            try:
                plan = compile_plan(recipe, S)
            except PlanError:
                continue
            last = plan.last_event_step
            stop = min(last + 2 if last is not None else plan.total_steps + 1, 60 * S)
            shared += any(c.rows for c in plan._cohorts)
            in_order = [list(plan.events_at(k)) for k in range(stop)]
            assert in_order == [_reference(plan, k) for k in range(stop)], row["path"]
            assert [e for k in range(stop) for e in in_order[k]] == list(plan.iter_events(0, stop)), row["path"]
            for k in (stop - 1, 0, stop // 2):  # out of order: a rebuild, the same answer
                assert list(plan.events_at(k)) == in_order[k], (row["path"], k)
            compared += 1
    assert compared > 180 and shared > 20, (compared, shared)
