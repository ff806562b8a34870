"""The validation rules at their edges: each case sits just inside or just outside a boundary
(an end a fraction of an epoch before its start, a milestone on the end, windows that touch),
with the expected (code, line, column) worked out by hand from SPEC.md and SparseML's
``validate_schedule`` (SparseML's semantics notes, 3.1), never taken from
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


# -- E005: one parameter pruned by two modifiers over overlapping epochs ---------------------

def pruner(start: float, end: float, params: str = "[fc.weight]", kind: str = "GMPruningModifier") -> str:
    return (f"  - !{kind} {{params: {params}, init_sparsity: 0.05, final_sparsity: 0.8,"
            f" start_epoch: {start}, end_epoch: {end}, update_frequency: 0.5}}\n")


# Active on [start, end) (SPEC): windows that only touch do not overlap. E005 is on the later
# modifier's parameter: "  - !GMPruningModifier {params: [" is 33 characters.
@pytest.mark.parametrize(("items", "expected"), [
    ((pruner(0, 5), pruner(5, 10)), []),
    ((pruner(0, 5), pruner(4.5, 10)), [("E005", 3, 34)]),
    ((pruner(4.5, 10), pruner(0, 5)), [("E005", 3, 34)]),
    ((pruner(0, 5), pruner(-1, 0.5)), [("E005", 3, 34)]),  # -1: from epoch 0
    ((pruner(0, 5), pruner(4, -1)), [("E005", 3, 34)]),  # -1: never ends
    ((pruner(0, 5), pruner(0, 5, "[other.weight]")), []),
    ((pruner(0, 5), pruner(1, 4, "[other.weight, fc.weight]")), [("E005", 3, 48)]),
    ((pruner(0, 5), pruner(1, 4, "fc.weight")), [("E005", 3, 33)]),  # one name, not a list
    # a third modifier: one finding per parameter, the first overlap found
    ((pruner(0, 5), pruner(5, 10), pruner(4, 6)), [("E005", 4, 34)]),
    ((pruner(0, 5), pruner(10, 15), pruner(12, 20)), [("E005", 4, 34)]),
])
def test_E005_windows(items: tuple[str, ...], expected: list) -> None:
    assert found(lr(*items)) == expected


def test_E005_message_and_what_prunes() -> None:
    (d,) = validate(lr(pruner(0, 5), pruner(4.5, 10)))
    assert d.message == "'fc.weight' is also pruned by the GMPruningModifier on line 2 over overlapping epochs"
    assert d.hint == "Give each parameter to one pruning modifier, or make the ranges follow each other."
    trainable = "  - !TrainableParamsModifier {params: [fc.weight], trainable: false, start_epoch: 0, end_epoch: 5}\n"
    assert found(lr(trainable, pruner(0, 5))) == []  # not a pruning modifier
    assert found(lr(trainable, pruner(0, 5), pruner(1, 4))) == [("E005", 4, 34)]


def test_E005_only_within_a_stage() -> None:
    text = "stage_a:\n  modifiers:\n  " + pruner(0, 5) + "stage_b:\n  modifiers:\n  " + pruner(0, 5)
    assert found(text) == []


# -- M005: at most MAX_EVENTS (10,000,000) updates per modifier ------------------------------

# 2**-20 epochs: 10,000,000 updates take exactly 10**7 * 2**-20 = 9.5367431640625 epochs, all
# exact in binary, so the count on the limit is exactly 10,000,000.
FREQ = "9.5367431640625e-07"


def grid(start: float, end: float, freq: str = FREQ) -> str:
    return ("modifiers:\n  - !GMPruningModifier\n    params: [fc.weight]\n    init_sparsity: 0.05\n"
            f"    final_sparsity: 0.8\n    start_epoch: {start}\n    end_epoch: {end}\n"
            f"    update_frequency: {freq}\n")


@pytest.mark.parametrize(("start", "end", "freq", "expected"), [
    (0, 9.5367431640625, FREQ, []),  # exactly the limit
    (0, 9.54, FREQ, [("M005", 8, 23)]),
    (1, 10.5367431640625, FREQ, []),  # counted from the start
    (1, 10.54, FREQ, [("M005", 8, 23)]),
    (-1, 9.5367431640625, FREQ, []),  # -1: from epoch 0
    (0, -1, FREQ, []),  # never ends: no count
    (0, 9.54, "-1", []),  # every step: the steps per epoch decide
])
def test_M005_update_count(start: float, end: float, freq: str, expected: list) -> None:
    assert found(grid(start, end, freq)) == expected


def test_M005_message_and_later_modifiers() -> None:
    (d,) = validate(grid(0, 9.54))
    assert d.message == ("'update_frequency' 9.53674e-07 over epochs 0 to 9.54 makes 1e+07 updates; "
                         "the limit is 10,000,000")
    assert d.hint == ("Raise update_frequency or shorten the epoch range (at most 10,000,000 updates "
                      "per modifier).")
    before = ("modifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 20}\n"
              "  - !SetLearningRateModifier {learning_rate: 0.1, start_epoch: 0}\n"
              "  - !GMPruningModifier {params: [a.weight], init_sparsity: 0.05, final_sparsity: 0.8,"
              " start_epoch: 0, end_epoch: 1, update_frequency: -1}\n")
    assert found(before + grid(0, 9.54).replace("modifiers:\n", "")) == [("M005", 11, 23)]


# -- E006: scheduled at or after the recipe's end (max_epochs = ceil of the largest epoch) ----

def epoch_range(start: float, end: float) -> str:
    return f"  - !EpochRangeModifier {{start_epoch: {start}, end_epoch: {end}}}\n"


def multistep(marks: str, start: float = 0, end: float = -1) -> str:
    return (f"  - !LearningRateModifier {{lr_class: MultiStepLR, init_lr: 0.1, start_epoch: {start},"
            f" end_epoch: {end}, lr_kwargs: {{milestones: [{marks}], gamma: 0.1}}}}\n")


# "  - !EpochRangeModifier {start_epoch: S, end_epoch: " is 52 characters with a one-digit S.
FIRST, SECOND = len(multistep("").split("[")[0]) + 2, len(multistep("").split("[")[0]) + 6  # "[39, 40"
@pytest.mark.parametrize(("items", "expected"), [
    ((epoch_range(0, 30), pruner(0, 40)), [("E006", 2, 53)]),
    ((epoch_range(0, 40), pruner(0, 40)), []),  # ends with the recipe
    ((epoch_range(0, 39.5), pruner(0, 39.2)), []),  # max_epochs 40, but it is the last
    ((epoch_range(0, 39.5), pruner(0, 39.6)), [("E006", 2, 53)]),
    ((epoch_range(0, -1), pruner(0, 40)), []),
    ((epoch_range(5, 5), pruner(0, 20)), [("E006", 2, 53)]),  # equal ends: not E001
    ((epoch_range(5, 4.5), pruner(0, 20)), [("E001", 2, 53)]),  # E001 only
    ((epoch_range(0, 0.5), pruner(0, 1)), [("E006", 2, 53)]),  # max_epochs 1
    ((epoch_range(1, 3), epoch_range(0, 2), pruner(0, 4)),
     [("E006", 2, 53), ("E006", 3, 53)]),
    ((multistep("39, 40"), pruner(0, 40)), [("E006", 2, SECOND)]),  # on the end
    ((multistep("39, 39.5"), pruner(0, 40)), []),
    ((multistep("39, 40.5"), pruner(0, 40.2)), []),  # max_epochs 41
    ((multistep("39, 41"), pruner(0, 40.2)), [("E006", 2, SECOND)]),
    ((multistep("5"),), []),  # from 0 to -1 only: max_epochs 0, nothing to compare
    ((multistep("5", 0, 20), pruner(0, 10)), []),  # ends itself: E002's business
    ((pruner(0, 10), multistep("10, 12")), [("E006", 3, FIRST), ("E006", 3, SECOND)]),
])
def test_E006_after_the_end(items: tuple[str, ...], expected: list) -> None:
    assert found(lr(*items)) == expected


def test_E006_messages() -> None:
    (d,) = validate(lr(epoch_range(0, 30), pruner(0, 40)))
    assert d.message == ("EpochRangeModifier ends at epoch 30, but GMPruningModifier (line 3) runs to "
                         "epoch 40: the recipe lasts 40 epochs (max_epochs), and what is scheduled "
                         "after this end still runs")
    assert d.hint == "End GMPruningModifier by epoch 30, or set this end_epoch to 40."
    (d,) = validate(lr(multistep("39, 40"), pruner(0, 40)))
    assert d.message == ("milestone 40 is at or after the recipe's end (epoch 40, max_epochs): the "
                         "learning rate never changes there")
    assert d.hint == "Use milestones before epoch 40, or make the recipe last longer."


# -- a modifier's own rules (recipe_spec/modifiers/rules.py) ---------------------------------

LR_FUNCTION = ("modifiers:\n  - !LearningRateFunctionModifier\n    lr_func: linear\n    init_lr: 0.1\n"
               "    final_lr: 0.01\n    start_epoch: {s}\n    end_epoch: {e}\n")


# A learning-rate function runs over [max(start, 0), end]: it needs end > max(start, 0).
@pytest.mark.parametrize(("start", "end", "expected"), [
    (3, 3, [("E001", 7, 16)]),
    (3, 3.5, []),
    (3, 2.5, [("E001", 7, 16)]),  # before its start: the general E001, once
    (0, 0, [("E001", 7, 16)]),
    (-1, 0, [("E001", 7, 16)]),  # -1 starts at epoch 0
    (-1, 0.5, []),
    (0.5, 0.25, [("E001", 7, 16)]),
    (3, -1, [("E001", 7, 16)]),  # a function cannot run forever
    (3, 1, [("E001", 7, 16)]),
])
def test_E001_learning_rate_function_range(start: float, end: float, expected: list) -> None:
    assert found(LR_FUNCTION.format(s=start, e=end)) == expected


def test_E001_learning_rate_function_message() -> None:
    (d,) = validate(LR_FUNCTION.format(s=3, e=3))
    assert d.message == "a learning-rate function needs end_epoch after start_epoch; got 3 to 3"
    assert d.hint == "The function runs from start_epoch to end_epoch: give it a range."
    (d,) = validate(LR_FUNCTION.format(s=3, e=2.5))
    assert d.message == "end_epoch 2.5 is before start_epoch 3"


MULTISTEP = ("modifiers:\n  - !EpochRangeModifier {{start_epoch: 0, end_epoch: 200}}\n"
             "  - !LearningRateModifier\n    start_epoch: {s}\n    end_epoch: {e}\n    lr_class: MultiStepLR\n"
             "    lr_kwargs: {{milestones: [{marks}], gamma: 0.1}}\n    init_lr: 0.1\n")


def mark(marks: list[float], i: int) -> tuple[str, int, int]:
    """E002 on milestone ``i``: "    lr_kwargs: {milestones: [" is 29 characters."""
    return ("E002", 7, 30 + sum(len(str(m)) + 2 for m in marks[:i]))


# Milestones lie strictly inside (start_epoch, end_epoch); -1 bounds nothing.
@pytest.mark.parametrize(("start", "end", "marks", "bad"), [
    (5, 20, [5], [0]),
    (5, 20, [5.5, 19.5], []),
    (5, 20, [4.5, 20], [0, 1]),
    (5, 20, [6, 20.5], [1]),
    (0, 20, [0, 1], [0]),
    (-1, 20, [0.5, 1], []),
    (5, -1, [6, 150], []),
    (0, 0.5, [0.25], []),
])
def test_E002_milestones_inside_the_range(start: float, end: float, marks: list, bad: list) -> None:
    text = MULTISTEP.format(s=start, e=end, marks=", ".join(map(str, marks)))
    assert found(text) == [mark(marks, i) for i in bad]


def test_E002_messages_and_default_end() -> None:
    d1, d2 = validate(MULTISTEP.format(s=5, e=20, marks="5, 20"))
    assert (d1.message, d1.hint) == ("milestone 5 is not after start_epoch 5",
                                     "Milestones are absolute epochs: each must be greater than start_epoch.")
    assert (d2.message, d2.hint) == ("milestone 20 is not before end_epoch 20",
                                     "Milestones are absolute epochs: each must be less than end_epoch.")
    no_end = MULTISTEP.format(s=5, e=20, marks="6, 150").replace("    end_epoch: 20\n", "")
    assert found(no_end) == []  # no end_epoch: -1


@pytest.mark.parametrize(("end", "expected"), [("-1", []), ("5", [("E003", 4, 16)]), (None, [])])
def test_E003_quantization_has_no_end(end: str | None, expected: list) -> None:
    text = "modifiers:\n  - !QuantizationModifier\n    start_epoch: 0\n"
    if end is not None:
        text += f"    end_epoch: {end}\n"
    assert found(text) == expected


# -- P005: a re: selector that does not compile ---------------------------------------------

def _re_error(pattern: str) -> str:
    import re

    try:
        re.compile(pattern)
    except re.error as exc:
        return str(exc)
    raise AssertionError(pattern)


PRUNE_WITH = ("  - !GMPruningModifier {{params: {params}, init_sparsity: 0.05, final_sparsity: {final},"
              " start_epoch: 0, end_epoch: 10, update_frequency: 1}}\n")


def test_P005_bad_pattern_in_params_and_in_a_sparsity_mapping() -> None:
    text = lr(PRUNE_WITH.format(params="[fc.weight, 're:fc[']", final=0.8))
    (d,) = validate(text)
    assert (d.code, d.line, d.column) == ("P005", 2, text.splitlines()[1].index("'re:fc['") + 1)
    assert d.message == f"re:fc[: the regex does not compile: {_re_error('fc[')}"
    assert d.hint == "Fix the pattern (Python re syntax)."
    mapped = lr(PRUNE_WITH.format(params="[]", final="{0.5: [a.weight], 0.9: [b.weight, 're:c(']}"))
    assert found(mapped) == [("P005", 2, mapped.splitlines()[1].index("'re:c('") + 1)]
    one = lr(PRUNE_WITH.format(params="'re:fc['", final=0.8))  # one selector, not a list
    assert found(one) == [("P005", 2, one.splitlines()[1].index("'re:fc['") + 1)]


def test_P005_after_modifiers_without_patterns() -> None:
    text = lr(epoch_range(0, 10), PRUNE_WITH.format(params="[a.weight]", final=0.8),
              PRUNE_WITH.format(params="[b.weight, 're:ok\\.weight', 're:fc[']", final=0.8))
    assert found(text) == [("P005", 4, text.splitlines()[3].index("'re:fc['") + 1)]


def test_E005_within_a_later_stage() -> None:
    """A modifier of another stage does not end the search for an overlap in its own."""
    text = ("stage_a:\n  modifiers:\n  " + pruner(0, 5) +
            "stage_b:\n  modifiers:\n  " + pruner(0, 5) + "  " + pruner(0, 5))
    assert found(text) == [("E005", 7, 36)]


def test_rules_skip_values_they_cannot_read() -> None:
    """On a plain recipe (no validator in front), a value that is not a number is skipped by
    the rules, never a crash, and does not end the check of the others."""
    import recipe_spec
    from recipe_spec.validation import RULES

    recipe = recipe_spec.loads(lr(set_lr(2), SET.format(s="'x'", extra=""), set_lr(2),
                                  "  - !GMPruningModifier {params: [c.weight], init_sparsity: 0.05,"
                                  " final_sparsity: 0.8, start_epoch: 0, end_epoch: 10, update_frequency: 0}\n",
                                  "  - !GMPruningModifier {params: [d.weight], init_sparsity: 0.05,"
                                  " final_sparsity: 0.8, start_epoch: 0, end_epoch: 10, update_frequency: 'x'}\n"))
    got = [(f.code.id, f.modifier.span.line) for rule in RULES for f in rule(recipe)]
    assert got == [("E004", 4)]


def test_E001_learning_rate_function_without_start() -> None:
    text = LR_FUNCTION.format(s=0, e=5).replace("    start_epoch: 0\n", "")
    assert [d.code for d in validate(text)] == ["M003"]  # missing, and nothing more


def test_modifier_rules_skip_values_they_cannot_read() -> None:
    """A modifier's own rules on a plain recipe: a start or a milestone that is not a number
    (a text, a bool) is skipped, and the milestones after it are still checked."""
    import recipe_spec
    from recipe_spec.validation import RULES

    recipe = recipe_spec.loads(lr(
        "  - !LearningRateFunctionModifier {lr_func: linear, init_lr: 0.1, final_lr: 0.01,"
        " start_epoch: 'x', end_epoch: 3}\n",
        "  - !LearningRateModifier {lr_class: MultiStepLR, init_lr: 0.1, start_epoch: 5, end_epoch: 20,"
        " lr_kwargs: {milestones: [true, 'x', 4, 6], gamma: 0.1}}\n"))
    got = [(f.code.id, f.modifier.span.line, f.keys) for rule in RULES for f in rule(recipe)]
    assert got == [("E002", 3, ("lr_kwargs", "milestones", 2))]


@pytest.mark.parametrize(("start", "end", "marks", "bad"), [
    (-1, 0.5, [0.25, 0.5], [1]),  # an end below 1 still bounds the milestones
    (-1, 0, [0.5], [0]),  # even an end of 0
])
def test_E002_end_below_one_epoch(start: float, end: float, marks: list, bad: list) -> None:
    text = MULTISTEP.format(s=start, e=end, marks=", ".join(map(str, marks)))
    assert [f for f in found(text) if f[0] == "E002"] == [mark(marks, i) for i in bad]


def test_E003_message_and_an_end_of_one() -> None:
    (d,) = validate("modifiers:\n  - !QuantizationModifier\n    start_epoch: 0\n    end_epoch: 1\n")
    assert (d.code, d.line, d.column) == ("E003", 4, 16)
    assert d.message == "QuantizationModifier has no end, but end_epoch is 1"
    assert d.hint == "Remove end_epoch: quantized modules stay quantized to the end of training."


MFAC = ("modifiers:\n  - !MFACPruningModifier\n    params: [fc.weight]\n    init_sparsity: 0.05\n"
        "    final_sparsity: 0.85\n    start_epoch: 0\n    end_epoch: 10\n    update_frequency: 1\n")


@pytest.mark.parametrize(("extra", "expected"), [
    ("    num_grads: {0.0: 32, 0.5: 64}\n", []),
    ("    num_grads: {0: 32, 0.5: 64}\n", []),  # an int 0 is the same key
    ("    num_grads: {1: 32, 0.5: 64}\n", [("M009", 9, 16)]),
    ("    num_grads: 64\n", []),
    ("    mfac_options: {num_grads: {0.0: 32, 0.5: 64}}\n", []),
    ("    mfac_options: {num_grads: {0.5: 64}}\n", [("M009", 9, 31)]),
])
def test_M009_num_grads_needs_sparsity_zero(extra: str, expected: list) -> None:
    assert [f for f in found(MFAC + extra) if f[0] == "M009"] == expected


def test_M009_and_M013_messages() -> None:
    (d,) = [d for d in validate(MFAC + "    num_grads: {0.5: 64, 0.8: 128}\n") if d.code == "M009"]
    assert d.message == "num_grads gives counts for sparsities [0.5, 0.8] but none for 0.0"
    assert d.hint == "Add '0.0: COUNT', the number of gradients used until the first threshold."
    (d,) = validate("modifiers:\n  - !TrainableParamsModifier\n    params: __ALL__\n")
    assert d.code == "M013" and d.message == (
        "TrainableParamsModifier without 'trainable' makes the selected parameters trainable "
        "(default true); SparseML required the argument and refused the recipe")
    assert d.hint == "Write 'trainable: true' (or 'trainable: false' to freeze)."


MOVEMENT = ("modifiers:\n  - !MovementPruningModifier\n    params: [fc.weight]\n    init_sparsity: 0.05\n"
            "    final_sparsity: 0.8\n    start_epoch: 0\n    end_epoch: 10\n    update_frequency: 1\n")


@pytest.mark.parametrize(("mask", "expected"), [
    (None, []), ("unstructured", []), ("block4", []), ("'[1, 4]'", []), ("channel", [("M006", 9, 16)]),
    ("filter", [("M006", 9, 16)]), ("'2:4'", [("M006", 9, 16), ("M010", 4, 20), ("M010", 5, 21)]),  # and 2:4 means sparsity 0.5
])
def test_M006_movement_ranks_signed_scores(mask: str | None, expected: list) -> None:
    text = MOVEMENT + (f"    mask_type: {mask}\n".replace("'[1, 4]'", "[1, 4]") if mask else "")
    assert found(text) == expected


def test_M006_movement_message() -> None:
    (d,) = validate(MOVEMENT + "    mask_type: channel\n")
    assert d.message == ("MovementPruningModifier cannot rank mask_type 'channel': movement scores are "
                         "signed, and that mask type ranks magnitudes")
    assert d.hint == "Use one of unstructured, block4 or a block shape [a, b]."


# -- E006: which modifier is the last, and the skips --------------------------------------

@pytest.mark.parametrize(("items", "expected"), [
    ((epoch_range(0, 39.5), set_lr(39.7)), [("E006", 2, 53)]),  # a start can be the last epoch
    ((epoch_range(5, 1), pruner(0, 20)), [("E001", 2, 53)]),  # an end of exactly 1 before its start
    ((epoch_range(5, 4.5), epoch_range(0, 10), pruner(0, 20)), [("E001", 2, 53), ("E006", 3, 53)]),
    ((pruner(0, 40), epoch_range(0, 40)), []),  # ends on max_epochs, tied with the last
])
def test_E006_the_last_modifier(items: tuple[str, ...], expected: list) -> None:
    assert found(lr(*items)) == expected


def test_E006_names_the_modifier_that_runs_longest() -> None:
    (d,) = validate(lr(epoch_range(0, 0.5), pruner(0, 0.75), set_lr(-1)))  # max_epochs 1
    assert d.message.startswith("EpochRangeModifier ends at epoch 0.5, but GMPruningModifier (line 3) runs to epoch 1")


def test_E006_milestones_of_a_modifier_without_end_epoch() -> None:
    text = lr(pruner(0, 10), multistep("10, 12").replace(" end_epoch: -1,", ""))
    line = text.splitlines()[2]
    first = line.index("[10") + 2
    assert found(text) == [("E006", 3, first), ("E006", 3, first + 4)]


def test_M005_message_names_a_nested_key() -> None:
    text = lr("  - !LearningRateModifier {lr_class: StepLR, init_lr: 0.1, start_epoch: 0, end_epoch: 9.54,"
              f" lr_kwargs: {{step_size: {FREQ}, gamma: 0.9}}}}\n")
    (d,) = validate(text)
    assert d.code == "M005" and d.column == text.splitlines()[1].index(FREQ) + 1
    assert d.message == ("'lr_kwargs.step_size' 9.53674e-07 over epochs 0 to 9.54 makes 1e+07 updates; "
                         "the limit is 10,000,000")
    assert d.hint.startswith("Raise step_size or shorten the epoch range")


def test_rules_still_run_beside_a_modifier_with_a_bad_argument() -> None:
    """A modifier the rules cannot read (unknown: M001) is left out of them, the others not."""
    text = lr("  - !NoSuchModifier {start_epoch: 3, end_epoch: 1}\n", epoch_range(10, 9.5))
    assert [(d.code, d.line) for d in validate(text)] == [("M001", 2), ("E001", 3)]


def test_P005_beside_a_selector_that_is_not_text() -> None:
    """On a plain recipe a selector that is not text (the schema's M004) is skipped."""
    import recipe_spec
    from recipe_spec.validation import RULES

    recipe = recipe_spec.loads(lr(PRUNE_WITH.format(params="[3, 're:fc[']", final=0.8)))
    got = [(f.code.id, f.keys) for rule in RULES for f in rule(recipe)]
    assert got == [("P005", ("params", 1))]
