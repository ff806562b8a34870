"""Every validation code on a fixture recipe: the expected (code, line, column) are written in
the fixture itself as ``# expect: CODE LINE COLUMN`` comments, counted by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from recipe_spec.codes import CODES
from recipe_spec.diagnostics import Severity
from recipe_spec.validation import validate

FIXTURES = Path(__file__).parent / "fixtures" / "rules"
EXPECT = re.compile(r"^# expect: ([A-Z]\d{3}) (\d+) (\d+)$", re.M)


def _expected(path: Path) -> list[tuple[str, int, int]]:
    return sorted((c, int(ln), int(col)) for c, ln, col in EXPECT.findall(path.read_text()))


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.yaml")), ids=lambda p: p.stem)
def test_fixture_gives_exactly_the_expected_diagnostics(path: Path) -> None:
    expected = _expected(path)
    assert expected, f"{path.name} has no '# expect:' line"
    got = sorted((d.code, d.line, d.column) for d in validate(path))
    assert got == expected


def test_every_validation_code_has_a_fixture() -> None:
    covered = {c for p in FIXTURES.glob("*.yaml") for c, _, _ in _expected(p)}
    validation_codes = {c for c in CODES if c[0] in "ME"} | {"S007"}
    # M008 is the fallback for schema keywords no other code describes; B001 needs --backend.
    assert validation_codes - covered == {"M008"}


def test_backend_support_B001() -> None:
    text = (
        "modifiers:\n"
        "  - !OBSPruningModifier\n"
        "    params: [fc.weight]\n"
        "    init_sparsity: 0.05\n"
        "    final_sparsity: 0.8\n"
        "    start_epoch: 0\n"
        "    end_epoch: 10\n"
        "    update_frequency: 1\n"
    )
    assert [d.code for d in validate(text, backend="torch")] == []
    (d,) = validate(text, backend="keras")
    assert (d.code, d.line, d.column, d.severity) == ("B001", 2, 5, Severity.ERROR)
    assert "torch" in d.hint


def test_messages_say_what_and_hint_says_how() -> None:
    (d,) = [d for d in validate(FIXTURES / "M002_unknown_argument.yaml") if d.code == "M002"]
    assert "final_sparsty" in d.message and d.hint == "Did you mean 'final_sparsity'?"
    (d,) = validate(FIXTURES / "M001_unknown_modifier.yaml")
    assert d.hint == "Did you mean 'GMPruningModifier'?"
    (d,) = validate(FIXTURES / "M004_wrong_type.yaml")
    assert "true or false" in d.message and "YAML 1.2" in d.hint
    (d,) = validate(FIXTURES / "M006_not_allowed.yaml")
    assert d.hint == "Did you mean 'cubic'?"


def test_end_spans_cover_the_value() -> None:
    (d,) = validate(FIXTURES / "E001_end_before_start.yaml")
    assert (d.end_line, d.end_column) == (4, 17)
