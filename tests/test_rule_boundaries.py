"""The validation rules at their edges: each case sits just inside or just outside a boundary
(an end a fraction of an epoch before its start, a milestone on the end, windows that touch),
with the expected (code, line, column) worked out by hand from SPEC.md and SparseML's
``validate_schedule`` (``/work/shared/reference/sparseml-semantics.md`` 3.1), never taken from
the code's output. Found by mutation testing (docs/mutation.md): each case kills a changed
comparison that every older test let through."""

from __future__ import annotations

import pytest

from recipe_spec.validation import validate


def found(text: str) -> list[tuple[str, int, int]]:
    return sorted((d.code, d.line, d.column) for d in validate(text))


EPOCH_RANGE = "modifiers:\n  - !EpochRangeModifier\n    start_epoch: {s}\n    end_epoch: {e}\n"


# SparseML's end_comparator -1: ``end >= start or end == -1``. E001 is on the end value, line 4
# column 16 ("    end_epoch: " is 15 characters).
@pytest.mark.parametrize(("start", "end", "expected"), [
    (10, 9.5, [("E001", 4, 16)]),  # less than one epoch before its start
    (10, 9.999, [("E001", 4, 16)]),
    (0.5, 0.25, [("E001", 4, 16)]),
    (1, 0, [("E001", 4, 16)]),  # exactly one epoch before
    (10, 5, [("E001", 4, 16)]),
    (10, 10, []),  # equal: allowed (a one-shot change)
    (10, 10.001, []),
    (10, -1, []),  # never ends
    (-1, 0.5, []),  # from the start
])
def test_E001_end_before_start_by_less_than_an_epoch(start: float, end: float, expected: list) -> None:
    assert found(EPOCH_RANGE.format(s=start, e=end)) == expected


def test_E001_message_names_both_epochs() -> None:
    (d,) = validate(EPOCH_RANGE.format(s=10, e=9.5))
    assert d.message == "end_epoch 9.5 is before start_epoch 10"
    assert d.hint == "Swap them, or use end_epoch: -1 for 'never ends'."


def test_E001_after_a_modifier_without_end() -> None:
    """A modifier without ``end_epoch`` is skipped, not the end of the check."""
    text = (
        "modifiers:\n"
        "  - !SetLearningRateModifier {learning_rate: 0.1, start_epoch: 0}\n"
        "  - !EpochRangeModifier {start_epoch: 3, end_epoch: 2.5}\n"
    )
    assert found(text) == [("E001", 3, 53)]


def test_E001_gradual_pruning_end_a_fraction_before_start() -> None:
    text = (
        "modifiers:\n"
        "  - !GMPruningModifier\n"
        "    params: [fc.weight]\n"
        "    init_sparsity: 0.05\n"
        "    final_sparsity: 0.8\n"
        "    start_epoch: 2\n"
        "    end_epoch: 1.75\n"
        "    update_frequency: 0.5\n"
    )
    assert found(text) == [("E001", 7, 16)]


def test_rules_run_on_a_plain_recipe() -> None:
    """``RULES`` is public (``recipe_spec.validation.RULES``): on a recipe that is not the
    validator's view, each rule reads the modifiers' facts itself."""
    import recipe_spec
    from recipe_spec.validation import RULES

    recipe = recipe_spec.loads(EPOCH_RANGE.format(s=10, e=9.5) + (
        "  - !SetLearningRateModifier {learning_rate: 0.1, start_epoch: 2}\n"
        "  - !SetLearningRateModifier {learning_rate: 0.2, start_epoch: 2}\n"))
    got = [(f.code.id, f.modifier.type, f.keys) for rule in RULES for f in rule(recipe)]
    assert got == [("E001", "EpochRangeModifier", ("end_epoch",)),
                   ("E004", "SetLearningRateModifier", ())]


# -- M006 and M010: an N:M mask keeps N of every M, so its sparsity is 1 - N/M ---------------

def gmp(mask: str, init: float = 0.05, final: float = 0.5) -> str:
    return (
        "modifiers:\n"
        "  - !GMPruningModifier\n"
        "    params: [fc.weight]\n"
        f"    init_sparsity: {init}\n"
        f"    final_sparsity: {final}\n"
        "    start_epoch: 0\n"
        "    end_epoch: 10\n"
        "    update_frequency: 1\n"
        f"    mask_type: '{mask}'\n"
    )


INIT, FINAL, MASK = ("M010", 4, 20), ("M010", 5, 21), ("M006", 9, 16)


@pytest.mark.parametrize(("mask", "init", "final", "expected"), [
    ("2:4", 0.5, 0.5, []),
    ("2:4", 0, 0.5, []),  # an initial 0 is always fine
    ("2:4", 0.05, 0.5, [INIT]),
    ("2:4", 0.5, 0.505, []),  # within 0.01
    ("2:4", 0.5, 0.52, [FINAL]),
    ("tensorrt", 0.5, 0.5, []),  # tensorrt is 2:4
    ("tensorrt", 0.5, 0.8, [FINAL]),
    ("1:4", 0.75, 0.75, []),
    ("1:4", 0.5, 0.5, [INIT, FINAL]),
    ("4:4", 0.01, 0.01, []),  # N == M: sparsity 0, and exactly 0.01 off is within 0.01
    ("4:4", 0.02, 0.02, [INIT, FINAL]),
    ("1:1", 0.5, 0.5, [INIT, FINAL]),
    ("5:4", 0.5, 0.5, [MASK]),  # N > M
    ("1:0", 0.5, 0.5, [MASK, MASK]),  # M = 0: the schema's pattern refuses it too
])
def test_nm_mask_sparsity(mask: str, init: float, final: float, expected: list) -> None:
    assert found(gmp(mask, init, final)) == sorted(expected)


def test_nm_mask_messages() -> None:
    (d,) = validate(gmp("tensorrt", 0.5, 0.8))
    assert d.message == "mask_type 'tensorrt' always gives sparsity 0.5, but final_sparsity is 0.8"
    assert d.hint == "Set init_sparsity and final_sparsity to 0.5."
    (d,) = validate(gmp("5:4"))
    assert (d.message, d.hint) == ("mask_type '5:4' keeps 5 of every 4", "N:M needs 0 < N <= M.")


def test_nm_mask_after_other_modifiers() -> None:
    """A modifier without a mask type, or with one that is not N:M, does not end the check."""
    text = gmp("2:4", 0.05, 0.5).replace("modifiers:\n", (
        "modifiers:\n"
        "  - !EpochRangeModifier {start_epoch: 0, end_epoch: 10}\n"
        "  - !GMPruningModifier {params: [a.weight], init_sparsity: 0.05, final_sparsity: 0.5,"
        " start_epoch: 0, end_epoch: 10, update_frequency: 1, mask_type: unstructured}\n"
        "  - !GMPruningModifier {params: [b.weight], init_sparsity: 0.05, final_sparsity: 0.5,"
        " start_epoch: 0, end_epoch: 10, update_frequency: 1, mask_type: '5:4'}\n"))
    assert found(text) == [("M006", 4, 150), ("M010", 7, 20)]


# -- E004: two modifiers set the learning rate at once ---------------------------------------

SET = "  - !SetLearningRateModifier {{learning_rate: 0.1, start_epoch: {s}{extra}}}\n"
FUNCTION = ("  - !LearningRateFunctionModifier {{lr_func: linear, init_lr: 0.1, final_lr: 0.01,"
            " start_epoch: {s}, end_epoch: {e}{extra}}}\n")


def lr(*items: str) -> str:
    return "modifiers:\n" + "".join(items)


def set_lr(s: float, extra: str = "") -> str:
    return SET.format(s=s, extra=extra)


def function(s: float, e: float, extra: str = "") -> str:
    return FUNCTION.format(s=s, e=e, extra=extra)


# A SetLearningRateModifier acts at one epoch (max(start, 0)), a function over [start, end]:
# they clash when a set falls strictly inside a function's range, two sets on one epoch, or two
# ranges overlap by more than a point. E004 is on the later modifier (column 5).
@pytest.mark.parametrize(("items", "expected"), [
    ((set_lr(5), set_lr(5)), [("E004", 3, 5)]),
    ((set_lr(5), set_lr(6)), []),
    ((set_lr(-1), set_lr(0)), [("E004", 3, 5)]),  # -1: from the start, epoch 0
    ((set_lr(-1), set_lr(1)), []),
    ((set_lr(0.5), set_lr(0)), []),
    ((function(0, 10), set_lr(10)), []),  # on the end: after the function
    ((function(0, 10), set_lr(0)), []),  # on the start: before it
    ((function(0, 10), set_lr(9.5)), [("E004", 3, 5)]),
    ((function(0, 10), set_lr(0.5)), [("E004", 3, 5)]),
    ((set_lr(10), function(0, 10)), []),
    ((set_lr(0), function(0, 10)), []),
    ((set_lr(9.5), function(0, 10)), [("E004", 3, 5)]),
    ((set_lr(0.5), function(0, 10)), [("E004", 3, 5)]),
    ((function(0, 5), function(5, 10)), []),  # one follows the other
    ((function(0, 5), function(4.5, 10)), [("E004", 3, 5)]),
    ((function(4.5, 10), function(0, 5)), [("E004", 3, 5)]),
    ((function(0, 5), function(-1, 0.5)), [("E004", 3, 5)]),
    ((set_lr(2, ", param_groups: [0]"), set_lr(2, ", param_groups: [1]")), []),
    ((set_lr(2, ", param_groups: [0, 1]"), set_lr(2, ", param_groups: [1]")), [("E004", 3, 5)]),
    ((set_lr(2, ", param_groups: [0]"), set_lr(2)), [("E004", 3, 5)]),
    # a pair skipped for its groups does not end the check of the first modifier
    ((set_lr(2, ", param_groups: [0]"), set_lr(2, ", param_groups: [1]"),
      set_lr(2, ", param_groups: [0]")), [("E004", 4, 5)]),
    ((set_lr(1), set_lr(2), set_lr(3)), []),
    ((set_lr(1), set_lr(2), set_lr(1)), [("E004", 4, 5)]),
])
def test_E004_lr_windows(items: tuple[str, ...], expected: list) -> None:
    assert found(lr(*items)) == expected


def test_E004_message() -> None:
    (d,) = validate(lr(function(0, 10), set_lr(9.5)))
    assert d.message == ("SetLearningRateModifier and LearningRateFunctionModifier (line 2) both set "
                         "the learning rate around epoch 9.5")
    assert d.hint == "Make their epoch ranges follow each other."
    (d,) = validate(lr(function(4.5, 10), function(0, 5)))
    assert d.message.endswith("around epoch 4.5")


def test_E004_only_within_a_stage() -> None:
    text = ("stage_a:\n  modifiers:\n    - !SetLearningRateModifier {learning_rate: 0.1, start_epoch: 2}\n"
            "stage_b:\n  modifiers:\n    - !SetLearningRateModifier {learning_rate: 0.1, start_epoch: 2}\n"
            "    - !SetLearningRateModifier {learning_rate: 0.2, start_epoch: 2}\n")
    assert [d.code for d in validate(text)] == ["E004"]
