"""The SparseML 1.8 conformance cases (tests/data/conformance/sparseml/) as both backends'
conformance tests read them: each case's own model, data and setup, and the cases SparseML
failed on that this project refuses at ``modify()``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from testdata import SPARSEML

from recipe_spec import RecipeError
from recipe_spec.schedule.events import PlanError

CASES = sorted(SPARSEML.glob("*.json"))
#: ``update_frequency * steps_per_epoch`` is not an integer: SPEC's fixed grid, not SparseML's drift
DRIFT = {"02_gmp_linear_uf05_s5_drift", "34_combined_realistic_variables_eval"}


def build_case(case: dict, tmp_path: Path) -> tuple[Any, Any, Any, Any, Any, str]:
    """``(model, optimizer, inputs, targets, loss_fn, recipe source)`` from the case's own
    ``model_description`` (the code SparseML was run with) and its case setup code."""
    head, _, setup = case["model_description"].partition("# case setup code (run right after build(), before the manager):")
    ns: dict = {}
    exec(compile(head, "<model_description>", "exec"), ns)  # the data's own, trusted code
    model, optimizer, inputs, targets = ns["build"]()
    ns["model"] = model
    exec(compile(setup, "<case setup>", "exec"), ns)
    source = case["recipe"]
    if case["recipe_format"] == "md":
        path = tmp_path / f"{case['name']}.md"
        path.write_text(case["recipe"])
        source = str(path)
    return model, optimizer, inputs, targets, ns["loss_fn"], source


def refused_at_modify(case: dict) -> bool:
    """SparseML raised inside ``optimizer.step()`` (a MultiStepLR milestone at or before the
    start, a block shape the weight cannot take); here ``modify()`` refuses the recipe."""
    error = case["error"]
    return bool(error) and ("milestones" in error["message"] or "block_shape" in error["message"])


def assert_refused(source: Any, model: Any, optimizer: Any, steps_per_epoch: int) -> None:
    """The recipe is refused before it touches the model: at loading where ``validate``
    reports the error (a milestone, E002), else at ``modify()`` (a block shape the weight
    cannot take)."""
    from recipe_spec import ScheduledModifierManager

    with pytest.raises((PlanError, RecipeError)) as info:
        ScheduledModifierManager.from_yaml(source).modify(model, optimizer, steps_per_epoch=steps_per_epoch)
    assert "milestone" in str(info.value) or "block shape" in str(info.value)
