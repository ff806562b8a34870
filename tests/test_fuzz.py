"""Property: no recipe text, however hostile, gets past load / validate / plan / lint / the CLI
with anything but a located diagnostic, within its time limit (:mod:`fuzz_inputs`).

About a minute here; ``benchmarks/fuzz_recipes.py`` runs the same check for as long as asked.
"""

from __future__ import annotations

import collections
import random
from pathlib import Path

import pytest
from fuzz_inputs import FuzzFailure, corpus_texts, exercise, make_input
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TEXTS = corpus_texts()
OUTCOMES: collections.Counter[str] = collections.Counter()


@settings(max_examples=1500, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rnd=st.randoms(use_true_random=False))
def test_hostile_recipes_end_in_located_diagnostics(rnd: random.Random, tmp_path: Path) -> None:
    text = make_input(rnd, TEXTS)
    OUTCOMES[exercise(text, tmp_path)] += 1


@pytest.mark.parametrize("seed", [305])
def test_regressions_found_by_fuzzing(seed: int, tmp_path: Path) -> None:
    """Seed 305 made a 20,000-point LR track whose next step was a linear scan (3 s to preview):
    now a bisection."""
    assert exercise(make_input(random.Random(seed), TEXTS), tmp_path, limit=1.0) == "clean"


HUGE = "9" * 401


@pytest.mark.parametrize("text", [
    # a rule read the epochs of a modifier whose numbers had already failed
    f"modifiers:\n  - !LearningRateFunctionModifier {{lr_func: linear, init_lr: 0.1, final_lr: 0.01, "
    f"start_epoch: {HUGE}, end_epoch: 3}}\n",
    "modifiers:\n  - !OBSPruningModifier {params: __ALL_PRUNABLE__, init_sparsity: 0.1, final_sparsity: 0.5, "
    "start_epoch: 0, end_epoch: 2, update_frequency: 1, num_grads: .inf}\n",
])
def test_rules_never_read_arguments_that_failed(text: str, tmp_path: Path) -> None:
    assert exercise(text, tmp_path, limit=1.0) == "errors"


@pytest.mark.parametrize("text", [
    # lint compared the epochs of a modifier whose start is an integer beyond a float's range
    f"modifiers:\n  - !ACDCPruningModifier\n    compression_sparsity: 0.66\n    start_epoch: {HUGE}\n"
    "    end_epoch: 47\n    update_frequency: 48\n    params: __ALL_PRUNABLE__\n",
    f"modifiers:\n  - !GMPruningModifier {{params: [fc1.weight], init_sparsity: 0.1, final_sparsity: 0.5, "
    f"start_epoch: 0, end_epoch: {HUGE}, update_frequency: 1}}\n",
])
def test_inputs_the_long_run_found(text: str, tmp_path: Path) -> None:
    assert exercise(text, tmp_path, limit=1.0) == "errors"


@pytest.mark.parametrize("value", [2**1024 - 1, 2**1024 - 2**970, -(2**1024 - 1)])
def test_an_int_of_1024_bits_beyond_the_largest_float_is_an_error(value: int, tmp_path: Path) -> None:
    """Such an int passed a 1,024-bit limit, then float() overflowed in a rule (a traceback)."""
    text = f"modifiers:\n  - !EpochRangeModifier {{start_epoch: 0, end_epoch: {value}}}\n"
    assert exercise(text, tmp_path, limit=2.0) == "errors"


def test_the_check_fails_on_an_internal_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fuzz_inputs

    def crash(recipe: object, records: object, framework: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(fuzz_inputs, "lint_recipe", crash)
    with pytest.raises(FuzzFailure, match="uncaught KeyError"):
        exercise("modifiers: []\n", tmp_path)


def test_zz_the_fuzz_reached_every_stage() -> None:
    """The generator still makes inputs that pass validation and compile (the plan and lint are
    exercised), and inputs that fail."""
    total = sum(OUTCOMES.values())
    assert total >= 1500, OUTCOMES
    assert OUTCOMES["clean"] >= 0.05 * total and OUTCOMES["errors"] >= 0.5 * total, OUTCOMES
