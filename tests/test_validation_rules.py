"""Every validation code on a fixture recipe: the expected (code, line, column) are written in
the fixture itself as ``# expect: CODE LINE COLUMN`` comments, counted by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from recipe_spec.diagnostics import Severity
from recipe_spec.diagnostics.codes import CODES
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


def test_backend_support_B001(monkeypatch) -> None:
    """Support follows from each backend's declared capabilities: AC/DC needs the ``acdc``
    capability; with it taken from both backends, both refuse it (a modifier is never run as
    something else, the way M-FAC once ran as magnitude pruning on torch)."""
    from recipe_spec.registry import get_backend

    for name in ("torch", "keras"):
        cls = type(get_backend(name))
        monkeypatch.setattr(cls, "capabilities", frozenset(cls.capabilities) - {"acdc"})
    text = (
        "modifiers:\n"
        "  - !ACDCPruningModifier\n"
        "    params: [fc.weight]\n"
        "    compression_sparsity: 0.9\n"
        "    start_epoch: 0\n"
        "    end_epoch: 100\n"
        "    update_frequency: 5\n"
    )
    for backend in ("torch", "keras"):
        (d,) = validate(text, backend=backend)
        assert (d.code, d.line, d.column, d.severity) == ("B001", 2, 5, Severity.ERROR)
        assert "acdc" in d.message and "No installed backend runs it yet" in d.hint
    obs = text.replace("ACDCPruningModifier", "OBSPruningModifier").replace("compression_sparsity: 0.9", "init_sparsity: 0.05\n    final_sparsity: 0.8")
    assert validate(obs, backend="torch") == []
    gmp = obs.replace("OBSPruningModifier", "GMPruningModifier")
    assert validate(gmp, backend="torch") == [] and validate(gmp, backend="keras") == []


def test_backend_support_follows_capabilities() -> None:
    from recipe_spec.registry import _LOADED, register_backend, supported_modifiers

    class LROnly:
        name = "lr-only"
        capabilities = frozenset({"lr"})

    register_backend("lr-only", LROnly)
    try:
        assert supported_modifiers("lr-only") == {
            "EpochRangeModifier", "LearningRateModifier", "LearningRateFunctionModifier", "SetLearningRateModifier",
        }
        text = "modifiers:\n  - !GMPruningModifier {params: [w], init_sparsity: 0.1, final_sparsity: 0.5, start_epoch: 0, end_epoch: 2, update_frequency: 1}\n"
        (d,) = validate(text, backend="lr-only")
        assert d.code == "B001" and "masks, scores:magnitude" in d.message
        assert d.hint == "Backends with it: keras, torch."
    finally:
        from recipe_spec import registry

        registry._REGISTERED.pop("lr-only", None)
        _LOADED.pop("lr-only", None)


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


NOQA_RECIPE = """\
modifiers:
  - !GMPruningModifier
    params: __ALL_PRUNABLE__
    init_sparsity: 0.05
    final_sparsity: 0.8
    start_epoch: 0
    end_epoch: 10
    update_frequency: 1
    log_types: __ALL__{comment}
"""


@pytest.mark.parametrize("comment, silenced", [
    ("", False),
    ("  # noqa", True),
    ("  # NOQA", True),
    ("  # NoQa: M007", True),
    ("  # noqa: e004, M007", True),
    ("  # noqa: E004", False),
    ("  # no qa", False),
])
def test_noqa_silences_what_it_names_on_its_line(comment: str, silenced: bool) -> None:
    codes = [d.code for d in validate(NOQA_RECIPE.format(comment=comment))]
    assert ("M007" not in codes) == silenced, codes
