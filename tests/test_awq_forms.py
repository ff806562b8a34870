"""AWQModifier's older forms (llm-compressor 0.5.1's own grid, 0.5.2-0.10's combined AWQ and
quantization) refused by ``oneshot()`` with the rewrite to the form of 0.11 and later, checked
against the release catalogue: the original is valid for llm-compressor 0.10 and not for 0.14,
the rewrite is valid for 0.14 and keeps every argument."""

from __future__ import annotations

import pytest

from recipe_spec import load
from recipe_spec.diagnostics.base import RecipeError
from recipe_spec.oneshot.awq.forms import COMBINED, split_form
from recipe_spec.oneshot.modifiers import resolve
from recipe_spec.validation import validate

CAPS = frozenset({"oneshot", "transform:awq"})
COMBINED_RECIPE = """quant_stage:
  quant_modifiers:
    AWQModifier:
      duo_scaling: both
      ignore: [lm_head]
      scheme: W4A16_ASYM
      targets: [Linear]
"""


def _errors(text: str, compat: str) -> list[str]:
    return [f"{d.code} {d.message}" for d in validate(text, compat=compat) if d.severity.value == "error"]


def test_the_combined_form_is_refused_once_with_the_split_form() -> None:
    with pytest.raises(RecipeError) as err:
        resolve(load(COMBINED_RECIPE), CAPS, "torch")
    (d,) = err.value.diagnostics
    assert d.code == "B001" and (d.line, d.column) == (3, 5)
    assert "0.5.2-0.10" in d.message and "QuantizationModifier" in d.message
    assert split_form(load(COMBINED_RECIPE).modifiers[0]) in d.hint


def test_the_split_form_is_the_same_modifier_for_the_release_after() -> None:
    """The catalogue (from llm-compressor's releases): the combined form runs in 0.10 and not in
    0.14; the rewrite runs in 0.14, with every argument kept on one of the two modifiers."""
    assert _errors(COMBINED_RECIPE, "llmcompressor==0.10") == []
    assert _errors(COMBINED_RECIPE, "llmcompressor==0.14")
    original = load(COMBINED_RECIPE).modifiers[0]
    body = "".join(f"    {line}\n" for line in split_form(original).splitlines())
    rewritten = load("quant_stage:\n  quant_modifiers:\n" + body)
    assert _errors("quant_stage:\n  quant_modifiers:\n" + body, "llmcompressor==0.14") == []
    awq, quant = rewritten.modifiers
    assert (awq.type, quant.type) == ("AWQModifier", "QuantizationModifier")
    assert dict(awq.args) == {k: v for k, v in original.args.items() if k not in COMBINED}
    assert dict(quant.args) == {k: v for k, v in original.args.items() if k in COMBINED}
    try:  # the AWQModifier is accepted (the QuantizationModifier is where oneshot() does not run it yet)
        resolve(rewritten, CAPS | {"quantization"}, "torch")
    except RecipeError as err:
        assert all(d.line != 3 for d in err.diagnostics), [d.format() for d in err.diagnostics]


def test_the_own_grid_of_the_first_release_is_refused_at_its_argument() -> None:
    text = ("quant_stage:\n  quant_modifiers:\n    AWQModifier:\n      duo_scaling: true\n      num_bits: 4\n"
            "      group_size: 128\n      symmetric: false\n")
    with pytest.raises(RecipeError) as err:
        resolve(load(text), CAPS, "torch")
    (d,) = err.value.diagnostics
    assert d.code == "B001" and (d.line, d.column) == (5, 7) and "0.5.1" in d.message
    assert "`num_bits`, `group_size`, `symmetric`" in d.message
