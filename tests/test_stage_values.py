"""Values of the stage/group dialect: ranges, NaN, end before start, N:M, QAT schemes and
presets no release accepts are errors under every --compat (and with none), located at the
value, with a hint."""

from __future__ import annotations

import pytest

from recipe_spec.validation import validate

COMPATS = [None, "sparseml", "llmcompressor", "sparseml==1.7", "llmcompressor==0.8"]


def sgpt(**args: object) -> str:
    body = "".join(f"      {k}: {v}\n" for k, v in args.items())
    return "oneshot_stage:\n  pruning_modifiers:\n    SparseGPTModifier:\n" + body


def magnitude(**args: object) -> str:
    base = {"targets": "['re:fc1\\.weight']", "init_sparsity": 0.05, "final_sparsity": 0.5}
    base.update(args)
    body = "".join(f"      {k}: {v}\n" for k, v in base.items())
    return "train_stage:\n  pruning_modifiers:\n    MagnitudePruningModifier:\n" + body


def errors(text: str, compat: str | None = None) -> list:
    return [d for d in validate(text, compat=compat) if d.severity.value == "error"]


@pytest.mark.parametrize("compat", COMPATS)
@pytest.mark.parametrize("value,code", [
    ("1.5", "M011"), ("1.0", "M011"), ("-0.1", "M011"), ("-0.0001", "M011"), ("85", "M011"),
    (".nan", "M005"), (".inf", "M005"), ("[0.5, 1.2]", "M011"), ("[0.5, .nan]", "M005"),
])
def test_sparsegpt_sparsity_outside_its_range_is_an_error_everywhere(value: str, code: str, compat: str | None) -> None:
    found = errors(sgpt(sparsity=value, block_size=128), compat)
    assert [d.code for d in found if d.line == 4] == [code]
    d = next(d for d in found if d.line == 4)
    assert (d.line, d.column) == (4, 23 if value.startswith("[") else 17)  # at the item
    assert d.hint


@pytest.mark.parametrize("value", ["0", "0.0", "0.5", "0.999", "[0.0, 0.5, 0.99]"])
def test_sparsity_just_inside_the_range_is_clean(value: str) -> None:
    assert errors(sgpt(sparsity=value, block_size=128), "llmcompressor") == []


def test_a_percentage_gets_the_fraction_as_hint() -> None:
    (d,) = [d for d in errors(magnitude(final_sparsity=85)) if d.code == "M011"]
    assert "did you mean 0.85?" in d.hint.lower()
    (d,) = [d for d in errors(sgpt(sparsity=1.5)) if d.code == "M011"]
    assert "did you mean" not in d.hint.lower()  # 1.5 is no percentage


def test_modifier_dialect_percentage_hint() -> None:
    text = ("modifiers:\n  - !GMPruningModifier\n    params: __ALL_PRUNABLE__\n    init_sparsity: 0.05\n"
            "    final_sparsity: 85\n    start_epoch: 0\n    end_epoch: 10\n    update_frequency: 1\n")
    (d,) = errors(text)
    assert (d.code, d.line) == ("M011", 5)
    assert d.hint.startswith("Did you mean 0.85?")


@pytest.mark.parametrize("compat", COMPATS)
@pytest.mark.parametrize("mask,bad", [("'5:4'", True), ("'3:2'", True), ("'1:0'", True), ("'4:4'", False),
                                      ("'2:4'", False), ("'0:0'", False), ("'4:5'", False)])
def test_nm_needs_n_at_most_m(mask: str, bad: bool, compat: str | None) -> None:
    found = [d for d in errors(sgpt(sparsity=0.5, block_size=128, mask_structure=mask), compat) if d.line == 6]
    assert [d.code for d in found] == (["M006"] if bad else [])
    if bad:
        assert found[0].column == 23 and "2:4" in found[0].hint


def test_magnitude_nm_checked_too() -> None:
    found = errors(magnitude(mask_structure="'8:4'", start=0, end=4, update=1))
    assert [(d.code, d.line) for d in found] == [("M006", 7)]


@pytest.mark.parametrize("compat", COMPATS)
def test_start_nan_and_end_before_start(compat: str | None) -> None:
    found = errors(magnitude(start=".nan", end=4), compat)
    assert [(d.code, d.line, d.column) for d in found] == [("M005", 7, 14)]
    found = errors(magnitude(start=10, end=5), compat)
    assert [(d.code, d.line, d.column) for d in found] == [("E001", 8, 12)]
    assert "end: -1" in found[0].hint


@pytest.mark.parametrize("start,end,bad", [(10, 9.99, True), (10, 10, False), (10, -1, False),
                                           (0, 0.5, False), (-1, 5, False)])
def test_end_before_start_boundaries(start: float, end: float, bad: bool) -> None:
    found = [d for d in errors(magnitude(start=start, end=end)) if d.code == "E001"]
    assert bool(found) is bad


@pytest.mark.parametrize("value,bad", [("-1", False), ("-1.01", True), ("-2", True), ("0", False)])
def test_start_from_minus_one(value: str, bad: bool) -> None:
    found = [d for d in errors(magnitude(start=value, end=-1)) if d.code == "M005"]
    assert bool(found) is bad


@pytest.mark.parametrize("compat", [None, "sparseml", "llmcompressor", "sparseml==1.8"])
def test_unknown_preset_is_an_error_everywhere(compat: str | None) -> None:
    text = ("oneshot_stage:\n  quant_modifiers:\n    QuantizationModifier:\n"
            "      scheme: W4A61\n      targets: [Linear]\n")
    found = [d for d in errors(text, compat) if d.line == 4]
    assert [d.code for d in found] == ["M006"]
    assert "W4A16" in found[0].hint


QAT = """train_stage:
  quant_modifiers:
    LegacyQuantizationModifier:
      start: 0
      scheme_overrides:
        Linear:
          weights: {num_bits: NUM, symmetric: true}
"""


@pytest.mark.parametrize("compat", [None, "sparseml", "sparseml==1.8"])
@pytest.mark.parametrize("num,bad", [("abc", "M004"), ("0", "M005"), ("9", "M005"), ("1", None), ("8", None)])
def test_qat_scheme_overrides_values(num: str, bad: str | None, compat: str | None) -> None:
    found = [d for d in errors(QAT.replace("NUM", num), compat) if d.line == 7]
    assert [d.code for d in found] == ([bad] if bad else [])
    if bad:
        assert found[0].column == 31 and found[0].hint


def test_qat_scheme_alias_typo() -> None:
    text = QAT.replace("weights: {num_bits: NUM, symmetric: true}", "input_activations: null") + \
        "      scheme: defualt\n"
    found = errors(text, "sparseml")
    assert [(d.code, d.line) for d in found] == [("M006", 8)]
    assert "'default'" in found[0].hint


def test_typo_of_a_required_argument_reported_once() -> None:
    text = magnitude().replace("final_sparsity", "final_sparsit")
    found = validate(text)
    typos = [d for d in found if d.code in ("M002", "M003")]
    assert [(d.code, d.line) for d in typos] == [("M002", 6)]
    assert "final_sparsity" in typos[0].hint
    # a required argument simply missing still is M003
    text = magnitude().replace("      final_sparsity: 0.5\n", "")
    assert [d.code for d in validate(text) if d.code in ("M002", "M003")] == ["M003"]


def test_typo_of_a_required_argument_modifier_dialect() -> None:
    text = ("modifiers:\n  - !GMPruningModifier\n    params: __ALL_PRUNABLE__\n    init_sparsity: 0.05\n"
            "    final_sparsit: 0.8\n    start_epoch: 0\n    end_epoch: 10\n    update_frequency: 1\n")
    assert [(d.code, d.line) for d in validate(text)] == [("M002", 5)]
    text = text.replace("    final_sparsit: 0.8\n", "")
    assert [d.code for d in validate(text)] == ["M003"]
