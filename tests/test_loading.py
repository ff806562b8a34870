"""recipe-spec's own loader: files, front matter, safe YAML, expressions and diagnostics.

Tests are tables: a small recipe and the exact ``(code, line, column)`` of every diagnostic it
must produce (1-based, in the file the user edits), or an input and the value it must load as.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from timing import cpu_time

from recipe_spec import FrozenDict, RecipeError, Severity, check, load, loads
from recipe_spec.diagnostics.codes import CODES
from recipe_spec.text.frozen import thaw
from recipe_spec.text.source import from_text


def where(diagnostics: Any) -> list[tuple[str, int, int]]:
    return [(d.code, d.line, d.column) for d in diagnostics]


def check_text(text: str, variables: dict[str, Any] | None = None) -> tuple[Any, list[Any]]:
    """`check` of recipe text, never mistaken for a path, never raising."""
    try:
        source = from_text(text)
    except RecipeError as exc:  # text that is not text (NUL) is refused before YAML
        return None, list(exc.diagnostics)
    return check(source, variables)


def diagnose(text: str, variables: dict[str, Any] | None = None) -> list[tuple[str, int, int]]:
    """The (code, line, column) of every diagnostic of recipe ``text``."""
    return where(check_text(text, variables)[1])


# --------------------------------------------------------------------------------------------
# Every diagnostic code the loader emits, with its exact position
# --------------------------------------------------------------------------------------------

DIAGNOSTIC_CASES: list[tuple[str, str, dict[str, Any] | None, list[tuple[str, int, int]]]] = [
    # --- Y: YAML and files ---
    ("Y001-indentation",
     "modifiers:\n  - !EpochRangeModifier\n    end_epoch: 10\n   - !GMPruningModifier\n",
     None, [("Y001", 4, 4)]),
    ("Y001-unclosed-flow-list", "a: [1, 2\nmodifiers: []\n", None, [("Y001", 2, 10)]),
    ("Y001-tab-indent", "modifiers:\n\t- !EpochRangeModifier {}\n", None, [("Y001", 2, 1)]),
    ("Y001-duplicate-anchor", "a: &x 1\nb: &x 2\nmodifiers: []\n", None, [("Y001", 2, 4)]),
    ("Y001-merge-of-a-number", "modifiers: []\nx:\n  <<: 5\n", None, [("Y001", 3, 7)]),
    ("Y001-bad-explicit-int", "x: !!int abc\nmodifiers: []\n", None, [("Y001", 1, 4)]),
    ("Y002-in-modifier",
     "modifiers:\n  - !GMPruningModifier\n    end_epoch: 10\n    end_epoch: 20\n",
     None, [("Y002", 4, 5)]),
    ("Y002-top-level", "a: 1\nmodifiers: []\na: 2\n", None, [("Y002", 3, 1)]),
    ("Y002-flow",
     "modifiers:\n  - !EpochRangeModifier {start_epoch: 0, start_epoch: 1}\n",
     None, [("Y002", 2, 42)]),
    ("Y002-stage", "s:\n  x: 1\n  x: 2\n  s_modifiers: []\n", None, [("Y002", 3, 3)]),
    ("Y003-undefined-alias",
     "modifiers:\n  - !SetLearningRateModifier\n    learning_rate: *lr\n",
     None, [("Y003", 3, 20)]),
    ("Y004-recursive-list", "a: &a [*a]\nmodifiers: []\n", None, [("Y004", 1, 8)]),
    ("Y004-recursive-mapping", "a: &a {b: *a}\nmodifiers: []\n", None, [("Y004", 1, 11)]),
    # the root mapping is level 1, so the 64th '[' is level 65
    ("Y004-nesting-65", "modifiers: []\nx: " + "[" * 64 + "]" * 64 + "\n", None,
     [("Y004", 2, 67)]),
    ("Y005-python-apply",
     "x: !!python/object/apply:os.system ['echo hi']\nmodifiers: []\n",
     None, [("Y005", 1, 4)]),
    ("Y005-python-name-in-modifier",
     "modifiers:\n  - !EpochRangeModifier\n    end_epoch: !!python/name:os.system\n",
     None, [("Y005", 3, 16)]),
    ("Y005-python-new",
     "modifiers:\n  - !EpochRangeModifier\n    end_epoch: !!python/object/new:os.system [echo]\n",
     None, [("Y005", 3, 16)]),
    ("Y005-binary", "x: !!binary aGVsbG8=\nmodifiers: []\n", None, [("Y005", 1, 4)]),
    ("Y005-set", "x: !!set {a, b}\nmodifiers: []\n", None, [("Y005", 1, 4)]),
    ("Y005-timestamp", "x: !!timestamp 2001-12-14\nmodifiers: []\n", None, [("Y005", 1, 4)]),
    ("Y005-foreign-tag", "x: !<tag:example.com,2000:foo> 1\nmodifiers: []\n", None,
     [("Y005", 1, 4)]),
    ("Y005-complex-key", "? [a]\n: 1\nmodifiers: []\n", None, [("Y005", 1, 3)]),
    ("Y007-control-character", "a: 1\nmodifiers: []\nb: \x01\n", None, [("Y007", 3, 4)]),
    ("Y007-bell", "a: 1\nb: \x07\nmodifiers: []\n", None, [("Y007", 2, 4)]),
    ("Y007-nul", "a: 1\nb: \x00\nmodifiers: []\n", None, [("Y007", 2, 1)]),
    ("Y008-two-documents", "modifiers: []\n---\nmodifiers: []\n", None, [("Y008", 2, 1)]),
    # --- S: structure ---
    ("S001-no-modifiers", "epochs: 10\n", None, [("S001", 1, 1)]),
    ("S001-empty", "", None, [("S001", 1, 1)]),
    ("S001-only-comments", "# nothing here\n", None, [("S001", 1, 1)]),
    ("S002-misplaced-list",
     "training:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 5}\n",
     None, [("S002", 2, 5)]),
    ("S002-nested-in-arguments",
     "modifiers:\n  - !GMPruningModifier\n    params: !EpochRangeModifier {}\n",
     None, [("S002", 3, 13)]),
    ("S002-in-stage-variable",
     "s:\n  helper:\n    - !EpochRangeModifier {}\n  s_modifiers: []\n",
     None, [("S002", 3, 7)]),
    ("S003-two-dialects",
     "a_stage:\n  a_modifiers:\n    GPTQModifier: {scheme: W4A16}\n  b_modifiers:\n"
     "    - !GMPruningModifier {}\n",
     None, [("S003", 5, 5)]),
    ("S004-arguments-without-tag", "modifiers:\n  - start_epoch: 0\n", None, [("S004", 2, 5)]),
    ("S004-number", "modifiers:\n  - 5\n", None, [("S004", 2, 5)]),
    ("S004-list", "modifiers:\n  - [1, 2]\n", None, [("S004", 2, 5)]),
    ("S004-two-key-mapping", "modifiers:\n  - {A: {}, B: {}}\n", None, [("S004", 2, 5)]),
    ("S004-dotted-tag", "modifiers:\n  - !foo.bar.Baz {}\n", None, [("S004", 2, 5)]),
    ("S005-group-not-a-list", "modifiers: 5\n", None, [("S005", 1, 12)]),
    ("S005-scalar-recipe", "hello\n", None, [("S005", 1, 1)]),
    ("S005-mixed-staged-and-plain",
     "modifiers:\n  - !EpochRangeModifier {}\nstage:\n  stage_modifiers: []\n",
     None, [("S005", 1, 1)]),
    ("S005-nested-stage", "s:\n  x:\n    a_modifiers: []\n  s_modifiers: []\n", None,
     [("S005", 2, 3)]),
    ("S006-arguments-list", "modifiers:\n  - !GMPruningModifier [0.1, 0.9]\n", None,
     [("S006", 2, 5)]),
    ("S006-arguments-scalar", "modifiers:\n  - !GMPruningModifier 0.5\n", None,
     [("S006", 2, 5)]),
    # --- V: variables and expressions ---
    ("V001-in-modifier",
     "modifiers:\n  - !EpochRangeModifier\n    end_epoch: eval(num_epoch)\nnum_epochs: 3\n",
     None, [("V001", 3, 21)]),
    ("V001-in-variable", "a: eval(b + 1)\nmodifiers: []\n", None, [("V001", 1, 9)]),
    ("V001-quoted",
     "x: 1\nmodifiers:\n  - !EpochRangeModifier\n    end_epoch: 'eval(y + 1)'\n"
     "    start_epoch: \"eval(x + z)\"\n",
     None, [("V001", 4, 22), ("V001", 5, 28)]),
    ("V001-in-stage",
     "g: 1\ns:\n  v: 2\n  s_modifiers:\n    - !EpochRangeModifier {end_epoch: eval(vv)}\n",
     None, [("V001", 5, 44)]),
    ("V002-cycle", "a: eval(b)\nb: eval(a)\nmodifiers: []\n", None, [("V002", 1, 4)]),
    ("V002-three-cycle", "c: 1\na: eval(b)\nb: eval(d)\nd: eval(a + c)\nmodifiers: []\n", None,
     [("V002", 2, 4)]),
    ("V003-import",
     "modifiers:\n  - !EpochRangeModifier\n    end_epoch: eval(__import__('os'))\n",
     None, [("V003", 3, 21)]),
    ("V003-empty", "x: eval()\nmodifiers: []\n", None, [("V003", 1, 9)]),
    ("V004-division-by-zero", "lr: eval(1 / 0)\nmodifiers: []\n", None, [("V004", 1, 10)]),
    ("V004-text-in-arithmetic", "t: text\nn: eval(t * 2)\nmodifiers: []\n", None,
     [("V004", 2, 9)]),
    ("V004-infinite-variable", "x: .inf\na: eval(x)\nmodifiers: []\n", None, [("V004", 2, 9)]),
    ("V005-unknown-override", "num_epochs: 3\nmodifiers: []\n", {"num_epoch": 5},
     [("V005", 1, 1)]),
    ("V006-stage-reads-global",
     "end_epoch: 100\nstage:\n  end_epoch: 75\n  x: eval(end_epoch)\n  stage_modifiers: []\n",
     None, [("V006", 4, 11)]),
    ("two-errors-both-reported",
     "modifiers:\n  - !EpochRangeModifier {end_epoch: eval(a)}\n"
     "  - !EpochRangeModifier {end_epoch: eval(b)}\n",
     None, [("V001", 2, 42), ("V001", 3, 42)]),
]


@pytest.mark.parametrize(
    "text,variables,expected",
    [case[1:] for case in DIAGNOSTIC_CASES],
    ids=[case[0] for case in DIAGNOSTIC_CASES],
)
def test_diagnostic_position(text: str, variables: dict[str, Any] | None,
                             expected: list[tuple[str, int, int]]) -> None:
    """Each fixture gives exactly these diagnostics at exactly these positions."""
    recipe, diagnostics = check_text(text, variables)
    assert where(diagnostics) == expected
    for d in diagnostics:
        assert d.severity is CODES[d.code].severity
        assert d.message and d.file is None
    has_error = any(d.severity is Severity.ERROR for d in diagnostics)
    assert (recipe is None) is has_error


def test_every_loader_code_has_a_fixture() -> None:
    """Y001-Y008, S001-S006 and V001-V006 all appear in the table (Y006 is file-only and has
    its own tests below)."""
    covered = {code for _, _, _, expected in DIAGNOSTIC_CASES for code, _, _ in expected}
    wanted = {f"{family}{n:03d}" for family, last in (("Y", 8), ("S", 6), ("V", 6))
              for n in range(1, last + 1)} - {"Y006"}
    assert wanted <= covered


@pytest.mark.parametrize(
    "text,hint",
    [
        ("modifiers:\n  - !EpochRangeModifier\n    end_epoch: 10\n   - !GMPruningModifier\n",
         "While parsing a block collection (line 2): check the indentation"),
        ('modifiers: []\nx: "a\\.b"\n', "While scanning a double-quoted scalar (line 2)"),
    ],
    ids=["block", "escape"],
)
def test_y001_hint_says_what_the_parser_was_doing(text: str, hint: str) -> None:
    (d,) = check_text(text)[1]
    assert d.code == "Y001"
    assert d.hint.startswith(hint)


def test_error_raises_recipe_error_with_all_diagnostics() -> None:
    """`load` raises RecipeError carrying every error; `str()` lists `path:line:col: CODE`."""
    text = ("modifiers:\n  - !EpochRangeModifier {end_epoch: eval(a)}\n"
            "  - !EpochRangeModifier {end_epoch: eval(b)}\n")
    with pytest.raises(RecipeError) as info:
        loads(text)
    assert where(info.value.diagnostics) == [("V001", 2, 42), ("V001", 3, 42)]
    assert str(info.value).splitlines()[0].startswith("<string>:2:42: V001 [error]")
    assert info.value.first.code == "V001"


def test_warning_keeps_the_recipe() -> None:
    """A warning (V006) does not stop loading; it is on `Recipe.warnings`."""
    r = loads("end_epoch: 100\nstage:\n  end_epoch: 75\n  x: eval(end_epoch)\n"
              "  stage_modifiers: []\n")
    assert r.stage("stage").variables["x"] == 100
    assert where(r.warnings) == [("V006", 4, 11)]
    assert r.warnings[0].severity is Severity.WARNING


@pytest.mark.parametrize(
    "variables,hint",
    [
        ({"num_epoch": 5}, "Did you mean 'num_epochs'?"),
        ({"zzz": 5}, "Variables defined: init_lr, num_epochs."),
    ],
)
def test_v005_hint(variables: dict[str, Any], hint: str) -> None:
    """V005 names the unknown override, offers the closest defined name, lists the rest."""
    _, diagnostics = check_text("num_epochs: 3\ninit_lr: 0.1\nmodifiers: []\n", variables)
    (d,) = diagnostics
    assert d.code == "V005" and next(iter(variables)) in d.message
    assert hint in d.hint


# --------------------------------------------------------------------------------------------
# Files: .yaml, .yml, .json, .md, strings
# --------------------------------------------------------------------------------------------

PLAIN = "n: 4\nmodifiers:\n  - !EpochRangeModifier\n    start_epoch: 0\n    end_epoch: eval(n)\n"


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".YAML"])
def test_yaml_files_load(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"recipe{suffix}"
    path.write_text(PLAIN)
    for given in (path, str(path)):
        r = load(given)
        assert r.path == str(path)
        assert [(m.type, dict(m.args)) for m in r.modifiers] == [
            ("EpochRangeModifier", {"start_epoch": 0, "end_epoch": 4})
        ]
        assert r.modifiers[0].span.line == 3
    assert load(path) == loads(PLAIN)


def test_json_file_loads_with_positions(tmp_path: Path) -> None:
    """JSON is YAML: the one-key modifier form, eval strings and positions all work."""
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(
        {"n": 2, "modifiers": [{"EpochRangeModifier": {"start_epoch": 0, "end_epoch": "eval(n)"}}]},
        indent=2,
    ))
    r = load(path)
    assert dict(r.modifiers[0].args) == {"start_epoch": 0, "end_epoch": 2}
    assert r.variables == {"n": 2}
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "modifiers": [\n    {"EpochRangeModifier": {"end_epoch": "eval(m)"}}\n  ]\n}\n')
    _, diagnostics = check(bad)
    assert where(diagnostics) == [("V001", 3, 48)]
    assert diagnostics[0].file == str(bad)


def test_string_loads_and_never_reads_a_path(tmp_path: Path) -> None:
    """`loads` reads text only: a file name is a YAML scalar (S005), not a file."""
    path = tmp_path / "r.yaml"
    path.write_text(PLAIN)
    assert loads(PLAIN) == load(path)
    with pytest.raises(RecipeError) as info:
        loads(str(path))
    assert where(info.value.diagnostics) == [("S005", 1, 1)]


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda p: p / "missing.yaml", "No such file"),
        (lambda p: p, "cannot read the file"),
    ],
    ids=["missing", "directory"],
)
def test_unreadable_path_is_y007(tmp_path: Path, make: Any, message: str) -> None:
    path = make(tmp_path)
    _, diagnostics = check(path)
    assert where(diagnostics) == [("Y007", 1, 1)]
    assert message in diagnostics[0].message
    assert diagnostics[0].file == str(path)


def test_oversized_file_is_y007(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("modifiers: []\n" + "# padding\n" * 220_000)
    _, diagnostics = check(path)
    assert where(diagnostics) == [("Y007", 1, 1)]
    assert "MiB" in diagnostics[0].message


# --- Markdown recipe cards ----------------------------------------------------------------

CARD = """<!--
Copyright (c) 2021 - present / Neuralmagic, Inc. All Rights Reserved.
Licensed under the Apache License, Version 2.0 (the "License");
-->

---
# General variables
num_epochs: 10
note: 'a --- b'
url: see---this
text: |
  a block
  --- not the end
modifiers:
  - !EpochRangeModifier
    start_epoch: 0
    end_epoch: eval(num_epochs)
  - !GMPruningModifier
    end_epoch: 40
---

# ResNet-50 pruned

This recipe creates a sparse [ResNet-50](https://arxiv.org/abs/1512.03385) model.

---

More text after a horizontal rule: with a colon.
"""


def card_line(text: str, line: str) -> int:
    """The 1-based number of the line ``line`` in ``text``."""
    return text.splitlines().index(line) + 1


@pytest.mark.parametrize("name", ["card.md", "CARD.MD"])
def test_markdown_front_matter(tmp_path: Path, name: str) -> None:
    """The first `---` block is the recipe: a licence comment before it is fine, a `---`
    inside a value or block text does not end it early, and the body's own `---` lines are
    not part of it. Positions are lines of the .md file."""
    path = tmp_path / name
    path.write_text(CARD)
    r = load(path)
    assert r.variables == {"num_epochs": 10, "note": "a --- b", "url": "see---this",
                           "text": "a block\n--- not the end\n"}
    assert [m.type for m in r.modifiers] == ["EpochRangeModifier", "GMPruningModifier"]
    assert r.modifiers[0].args["end_epoch"] == 10
    assert r.modifiers[0].span.line == card_line(CARD, "  - !EpochRangeModifier")
    assert r.modifiers[1].span.line == card_line(CARD, "  - !GMPruningModifier")
    span = r.modifiers[1].value_span("end_epoch")
    assert (span.line, span.column) == (card_line(CARD, "    end_epoch: 40"), 16)
    assert r.modifiers[1].key_span("end_epoch").line == card_line(CARD, "    end_epoch: 40")


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_markdown_error_lines_are_file_lines(tmp_path: Path, newline: str) -> None:
    """An error in a card's front matter is reported at its line in the .md file (LF or CRLF,
    blank lines after the opening `---` included)."""
    text = CARD.replace("---\n# General", "---\n\n\n# General").replace(
        "eval(num_epochs)", "eval(num_epoch)")
    path = tmp_path / "card.md"
    path.write_bytes(text.replace("\n", newline).encode())
    _, diagnostics = check(path)
    assert where(diagnostics) == [("V001", card_line(text, "    end_epoch: eval(num_epoch)"), 21)]
    assert diagnostics[0].file == str(path)
    assert "Did you mean 'num_epochs'?" in diagnostics[0].hint


def test_markdown_card_text_loads_like_the_file(tmp_path: Path) -> None:
    """The text of a card (licence comment first, as 51 of the 55 real cards) loads as a
    string exactly as the file does, positions included."""
    path = tmp_path / "card.md"
    path.write_text(CARD)
    assert loads(CARD) == load(path)
    bad = CARD.replace("end_epoch: 40", "end_epoch: eval(x)")
    path.write_text(bad)
    assert where(check_text(bad)[1]) == where(check(path)[1]) == [
        ("V001", card_line(bad, "    end_epoch: eval(x)"), 21)
    ]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("# My recipe\n\nmodifiers: [] is described here\n", [("Y006", 1, 1)]),
        ("---\nmodifiers: []\n", [("Y006", 1, 1)]),  # never closed
    ],
    ids=["no-front-matter", "unclosed"],
)
def test_markdown_without_front_matter_is_y006(tmp_path: Path, text: str,
                                               expected: list[tuple[str, int, int]]) -> None:
    path = tmp_path / "card.md"
    path.write_text(text)
    _, diagnostics = check(path)
    assert where(diagnostics) == expected


PLUS_CARD = """<!--
Licence text.
-->

+++
version: 1.1.0
modifiers:
  - !EpochRangeModifier
    start_epoch: 5
    end_epoch: 2
+++

# A recipe card

Body text, with a --- and a +++ inside lines.
"""


@pytest.mark.parametrize("closing", ["+++", "---"], ids=["plus", "mixed"])
def test_plus_front_matter_is_read_with_card_lines(tmp_path: Path, closing: str) -> None:
    """Issue 16: SparseML's loader took ``(?:---|\\+\\+\\+)`` as the front-matter delimiters
    (sparseml/optim/helpers.py, _load_yaml_str_from_file), and SparseML 1.8 ran a card written
    with ``+++``. recipe-spec reads it too, and diagnostics keep the card's line numbers."""
    text = PLUS_CARD.replace("\n+++\n\n# A", f"\n{closing}\n\n# A")
    path = tmp_path / "card.md"
    path.write_text(text)
    line = text.splitlines().index("    end_epoch: 2") + 1
    assert line == 10
    from recipe_spec.validation import validate

    assert where(check(path)[1]) == where(check_text(text)[1]) == []
    assert where(validate(path)) == where(validate(text)) == [("E001", line, 16)]
    fixed = text.replace("end_epoch: 2", "end_epoch: 9")
    path.write_text(fixed)
    recipe = load(path)
    assert [m.type for m in recipe.modifiers] == ["EpochRangeModifier"]
    assert recipe.modifiers[0].span.line == 8  # the line of '- !EpochRangeModifier' in the card
    assert loads(fixed) == recipe


def test_plus_front_matter_error_lines(tmp_path: Path) -> None:
    """A YAML error and a rule finding inside ``+++`` front matter point at the card's lines."""
    from recipe_spec.validation import validate

    path = tmp_path / "card.md"
    path.write_text(PLUS_CARD)
    assert [(d.code, d.line) for d in validate(path)] == [("E001", 10)]
    path.write_text(PLUS_CARD.replace("    start_epoch: 5\n", "    start_epoch: 5\n    start_epoch: 6\n"))
    _, diagnostics = check(path)
    assert [(d.code, d.line) for d in diagnostics] == [("Y002", 10)]


def test_unclosed_plus_front_matter_is_y006(tmp_path: Path) -> None:
    path = tmp_path / "card.md"
    path.write_text("+++\nmodifiers: []\n")
    assert where(check(path)[1]) == [("Y006", 1, 1)]


def test_string_with_jekyll_front_matter_is_not_silently_truncated() -> None:
    """sparseml#2045: text starting with a `---\\nlayout: ...\\n---` block followed by the
    recipe. SparseML read only the first block and reported "Unable to find any modifiers";
    here it is two YAML documents, reported at the second `---` (Y008)."""
    text = ("---\nlayout: null\ntitle: x\n---\nmodifiers:\n"
            "  - !EpochRangeModifier {start_epoch: 0, end_epoch: 1}\n")
    assert diagnose(text) == [("Y008", 4, 1)]


# --------------------------------------------------------------------------------------------
# Text that is not text
# --------------------------------------------------------------------------------------------

BAD_BYTES = [
    # (bytes, line, column)
    (b"modifiers: []\nlr: 0.1\nname: caf\xe9\n", 3, 10),  # latin-1
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", 1, 1),  # a PNG header
    (bytes(range(256)) * 4, 2, 118),  # binary garbage: the first invalid byte, 0x80
    (b"a: 1\nb: \x01\x02\x03\nmodifiers: []\n", 2, 4),  # valid UTF-8, control characters
    (b"a: 1\nb: 2\x00\n", 2, 1),  # NUL
]


@pytest.mark.parametrize("data,line,column", BAD_BYTES,
                         ids=["latin-1", "png", "garbage", "control", "nul"])
def test_not_text_is_y007_naming_the_line(tmp_path: Path, data: bytes, line: int,
                                          column: int) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_bytes(data)
    recipe, diagnostics = check(path)
    assert recipe is None
    assert where(diagnostics) == [("Y007", line, column)]
    with pytest.raises(RecipeError):
        load(path)


def test_invalid_utf8_message_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_bytes(b"modifiers: []\nlr: 0.1\nname: caf\xe9\n")
    (d,) = check(path)[1]
    assert "line 3" in d.message and "0xe9" in d.message


def test_utf8_bom_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + PLAIN.encode())
    assert load(path) == loads(PLAIN)


# --------------------------------------------------------------------------------------------
# Safe loading: tags, alias bombs, recursion, depth
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        "!!python/object/apply:os.system ['touch {marker}']",
        "!!python/object/apply:subprocess.check_call [['touch', '{marker}']]",
        "!!python/object/new:os.system ['touch {marker}']",
        "!!python/object/apply:builtins.exec [\"open('{marker}', 'w').close()\"]",
    ],
    ids=["os.system", "subprocess", "object-new", "exec"],
)
@pytest.mark.parametrize("place", ["variable", "argument"])
def test_python_tags_are_refused_and_never_executed(tmp_path: Path, payload: str,
                                                    place: str) -> None:
    marker = tmp_path / "executed"
    value = payload.format(marker=marker)
    if place == "variable":
        text = f"x: {value}\nmodifiers: []\n"
        expected = [("Y005", 1, 4)]
    else:
        text = f"modifiers:\n  - !EpochRangeModifier\n    end_epoch: {value}\n"
        expected = [("Y005", 3, 16)]
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    assert where(check(path)[1]) == expected
    assert where(check_text(text)[1]) == expected
    assert not marker.exists()


def alias_bomb(levels: int = 10, width: int = 10) -> str:
    """Billion laughs: each level is a list of ``width`` aliases of the level below."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\nmodifiers: []\n"


def test_alias_bomb_is_rejected_fast() -> None:
    """10 levels of 10x (10^10 values) is Y004 within a second, before anything expands."""
    start = cpu_time()
    recipe, diagnostics = check_text(alias_bomb())
    elapsed = cpu_time() - start
    assert recipe is None
    assert [d.code for d in diagnostics] == ["Y004"]
    assert "expands to" in diagnostics[0].message
    assert elapsed < 1.0


def test_alias_bomb_inside_a_modifier_is_rejected_fast() -> None:
    text = alias_bomb(levels=9).replace(
        "modifiers: []\n", "modifiers:\n  - !GMPruningModifier\n    params: *a8\n")
    start = cpu_time()
    assert [code for code, _, _ in diagnose(text)] == ["Y004"]
    assert cpu_time() - start < 1.0


def test_ordinary_aliases_are_not_a_bomb() -> None:
    """A recipe reusing an anchored list many times (as BERT recipes do) loads."""
    params = "[" + ", ".join(f"'layer.{i}.weight'" for i in range(12)) + "]"
    items = "".join(f"  - !GMPruningModifier {{params: *p, end_epoch: {i}}}\n" for i in range(73))
    r = loads(f"p: &p {params}\nmodifiers:\n{items}")
    assert len(r.modifiers) == 73
    assert all(len(m.args["params"]) == 12 for m in r.modifiers)


DEEP = {
    "flow-lists": "modifiers: []\nx: " + "[" * 1000 + "]" * 1000 + "\n",
    "flow-lists-100k": "modifiers: []\nx: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "flow-mappings": "modifiers: []\nx: " + "{a: " * 1000 + "1" + "}" * 1000 + "\n",
    "block-lists": "modifiers: []\nx:\n" + "- " * 1000 + "1\n",
    "block-mappings": "modifiers: []\n" + "".join("  " * i + "a:\n" for i in range(1000))
    + "  " * 1000 + "1\n",
    "in-a-modifier": "modifiers:\n  - !GMPruningModifier\n    params: " + "[" * 1000 + "]" * 1000
    + "\n",
}


@pytest.mark.parametrize("text", list(DEEP.values()), ids=list(DEEP))
def test_deep_nesting_is_y004_never_recursion_error(text: str) -> None:
    recipe, diagnostics = check_text(text)
    assert recipe is None
    assert [d.code for d in diagnostics] == ["Y004"]
    with pytest.raises(RecipeError):
        loads(text)


def test_nesting_within_the_limit_loads() -> None:
    """64 levels: the root mapping, 62 lists and the number."""
    r = loads("modifiers: []\nx: " + "[" * 62 + "1" + "]" * 62 + "\n")
    value = r.variables["x"]
    for _ in range(62):
        (value,) = value
    assert value == 1


# --------------------------------------------------------------------------------------------
# Anchors, aliases and merge keys
# --------------------------------------------------------------------------------------------

ANCHORED = """\
num_epochs: &num_epochs 90
init_lr: &init_lr 0.0028
lr_step_epochs: &lr_step_epochs [43, 60]
pruning_mask_type: &pruning_mask_type unstructured
modifiers:
  - !EpochRangeModifier
    end_epoch: *num_epochs
    start_epoch: 0.0
  - !LearningRateModifier
    lr_class: MultiStepLR
    lr_kwargs:
      milestones: *lr_step_epochs
      gamma: 0.1
    init_lr: *init_lr
  - !GMPruningModifier
    mask_type: *pruning_mask_type
"""


def test_anchors_and_aliases_work_as_variables() -> None:
    """The pre-eval variable mechanism of 46 real recipes: `&name value` / `*name`."""
    r = loads(ANCHORED)
    assert r.variables == {"num_epochs": 90, "init_lr": 0.0028, "lr_step_epochs": (43, 60),
                           "pruning_mask_type": "unstructured"}
    erm, lr, gmp = r.modifiers
    assert erm.args["end_epoch"] == erm.raw_args["end_epoch"] == 90
    assert lr.args["lr_kwargs"] == {"milestones": (43, 60), "gamma": 0.1}
    assert lr.args["init_lr"] == 0.0028
    assert gmp.args["mask_type"] == "unstructured"
    span = erm.value_span("end_epoch")  # the alias, where it is written
    assert (span.line, span.column, span.end_column) == (7, 16, 27)
    assert lr.value_span("lr_kwargs", "milestones").line == 12


MERGES = [
    # (arguments block, expected arguments)
    ("    <<: *defaults\n    learning_rate: 0.5\n",
     {"learning_rate": 0.5, "start_epoch": 0.0, "end_epoch": 10.0}),
    ("    <<: *defaults\n    end_epoch: 20.0\n", {"end_epoch": 20.0, "start_epoch": 0.0}),
    ("    <<: [*late, *defaults]\n", {"start_epoch": 5.0, "end_epoch": 10.0}),
    ("    <<: [*defaults, *late]\n", {"start_epoch": 0.0, "end_epoch": 10.0}),
]


@pytest.mark.parametrize("block,expected", MERGES, ids=["merge", "override", "list-first-wins",
                                                        "list-order"])
def test_merge_keys(block: str, expected: dict[str, float]) -> None:
    """`<<` merges a mapping (or a list of them, the first one winning); keys written in
    the mapping itself win over merged ones."""
    text = ("defaults: &defaults {start_epoch: 0.0, end_epoch: 10.0}\n"
            "late: &late {start_epoch: 5.0}\n"
            "modifiers:\n  - !SetLearningRateModifier\n" + block)
    assert dict(loads(text).modifiers[0].args) == expected


# --------------------------------------------------------------------------------------------
# YAML 1.2 scalars
# --------------------------------------------------------------------------------------------

SCALARS = [
    # (as written, value, type)
    ("8e-5", 8e-5, float),
    ("2e-06", 2e-06, float),
    ("1.e-6", 1e-6, float),
    (".5", 0.5, float),
    ("1E3", 1000.0, float),
    ("-1.5", -1.5, float),
    ("1.0e+05", 100000.0, float),
    ("0", 0, int),
    ("+1", 1, int),
    ("010", 10, int),  # YAML 1.1: 8
    ("0o10", 8, int),
    ("0x1F", 31, int),
    ("yes", "yes", str),  # YAML 1.1: True
    ("no", "no", str),
    ("on", "on", str),
    ("off", "off", str),
    ("y", "y", str),
    ("2:4", "2:4", str),  # YAML 1.1: 124 (sexagesimal)
    ("1:30", "1:30", str),  # YAML 1.1: 90
    ("1_000", "1_000", str),
    ("0b101", "0b101", str),
    ("2001-12-14", "2001-12-14", str),  # YAML 1.1: a date
    ("'8e-5'", "8e-5", str),
    ("true", True, bool),
    ("True", True, bool),
    ("FALSE", False, bool),
    ("null", None, type(None)),
    ("~", None, type(None)),
    ("", None, type(None)),
    ("__ALL_PRUNABLE__", "__ALL_PRUNABLE__", str),
]


@pytest.mark.parametrize("written,value,kind", SCALARS, ids=[s[0] or "empty" for s in SCALARS])
def test_yaml12_scalars(written: str, value: Any, kind: type) -> None:
    r = loads(f"v: {written}\nmodifiers:\n  - !GMPruningModifier {{x: {written or 'null'}}}\n")
    for loaded in (r.variables["v"], r.modifiers[0].args["x"]):
        assert loaded == value
        assert type(loaded) is kind


# --------------------------------------------------------------------------------------------
# Expressions
# --------------------------------------------------------------------------------------------

EXPR_TEMPLATE = 'n: 5\nx: [1, 2]\nt: text\nres: "eval({expr})"\nmodifiers: []\n'
EXPR_LINE, EXPR_COLUMN = 4, 12  # where the expression text starts

ALLOWED = [
    ("1 + 2", 3),
    ("7 - 10", -3),
    ("n * 0.2", 1.0),
    ("n / 4", 1.25),
    ("7 // 2", 3),
    ("7 % 4", 3),
    ("2 ** 10", 1024),
    ("2 ** 0.5", 2 ** 0.5),
    ("-n", -5),
    ("+n", 5),
    ("- -n", 5),
    ("(n + 1) * 2", 12),
    ("abs(-3)", 3),
    ("min(1, n)", 1),
    ("max(n, 2, 3)", 5),
    ("round(2.567, 2)", 2.57),
    ("round(2.567, ndigits=1)", 2.6),
    ("round(2.5)", 2),
    ("int(3.9)", 3),
    ("float(2)", 2.0),
    ("x", (1, 2)),  # a non-numeric variable alone is substituted
    ("t", "text"),
    (" n ", 5),
    ("0.1 + 0.2", 0.30000000000000004),
]


@pytest.mark.parametrize("expr,expected", ALLOWED, ids=[a[0] for a in ALLOWED])
def test_allowed_expressions(expr: str, expected: Any) -> None:
    value = loads(EXPR_TEMPLATE.format(expr=expr)).variables["res"]
    assert value == expected
    assert type(value) is type(expected)


REFUSED = [
    # (expression, code, offset of the reported column inside the expression)
    ("n.real", "V003", 0),  # attribute
    ("x[0]", "V003", 0),  # subscript
    ("'a'", "V003", 0),  # string
    ("b'a'", "V003", 0),  # bytes
    ("f'{n}'", "V003", 0),  # f-string
    ("lambda: 1", "V003", 0),
    ("[i for i in x]", "V003", 0),  # comprehension
    ("sum(i for i in x)", "V003", 0),
    ("{i: i for i in x}", "V003", 0),
    ("__import__('os')", "V003", 0),
    ("__import__('os').system('true')", "V003", 0),
    ("open('x')", "V003", 0),
    ("().__class__", "V003", 0),
    ("n > 1", "V003", 0),  # comparison
    ("n and 1", "V003", 0),
    ("not n", "V003", 0),
    ("~n", "V003", 0),
    ("n << 2", "V003", 0),
    ("n @ n", "V003", 0),
    ("n if n else 1", "V003", 0),
    ("(y := 1)", "V003", 1),
    ("[1, 2]", "V003", 0),
    ("(1, 2)", "V003", 0),
    ("min(*x)", "V003", 4),
    ("abs(n, key=1)", "V003", 0),
    ("True", "V003", 0),
    ("None", "V003", 0),
    ("1j", "V003", 0),
    ("...", "V003", 0),
    ("float('inf')", "V003", 6),
    ("1 +", "V003", 0),
    ("9**9**9", "V004", 0),  # refused before it is computed
    ("10 ** 10 ** 10", "V004", 0),
    ("10 ** 5000", "V004", 0),
    ("2.0 ** 100000", "V004", 0),
    ("1 / 0", "V004", 0),
    ("5 // 0", "V004", 0),
    ("5 % 0", "V004", 0),
    ("0 ** -1", "V004", 0),
    ("(-8) ** 0.5", "V004", 0),  # complex
    ("1e308 * 10", "V004", 0),  # infinite
    ("x + 1", "V004", 0),  # a list in arithmetic
    ("t * 2", "V004", 0),  # text in arithmetic
    ("nn + 1", "V001", 0),
    ("n + nn", "V001", 4),
]


@pytest.mark.parametrize("expr,code,offset", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_expressions(expr: str, code: str, offset: int) -> None:
    """Everything outside the grammar is V003; arithmetic without a finite value is V004; an
    unknown name is V001. Each is reported at the construct, and quickly."""
    start = cpu_time()
    found = diagnose(EXPR_TEMPLATE.format(expr=expr))
    assert cpu_time() - start < 1.0
    assert found == [(code, EXPR_LINE, EXPR_COLUMN + offset)]


@pytest.mark.parametrize(
    "expr",
    ["(" * 1000 + "1" + ")" * 1000, "-" * 1000 + "1", "abs(" * 300 + "1" + ")" * 300,
     "1" + " + 1" * 3000],
    ids=["parentheses", "unary", "calls", "long"],
)
def test_huge_expressions_are_refused_not_recursed(expr: str) -> None:
    found = diagnose(f"res: eval({expr})\nmodifiers: []\n")
    assert [code for code, _, _ in found] == ["V003"]


@pytest.mark.parametrize(
    "value",
    ["eval(n)+1", " eval(n)", "eval(n) ", "Eval(n)", "eval(a)+eval(b)", "evaluate(n)"],
)
def test_only_whole_eval_values_are_evaluated(value: str) -> None:
    """A value is an expression only when it is exactly `eval(...)`; anything else is text."""
    r = loads(f"n: 5\nres: '{value}'\nmodifiers:\n  - !EpochRangeModifier {{x: '{value}'}}\n")
    assert r.variables["res"] == value
    assert r.modifiers[0].args["x"] == value


# --------------------------------------------------------------------------------------------
# Immutability
# --------------------------------------------------------------------------------------------

IMMUTABLE_RECIPE = """\
lr: 0.1
stage:
  n: 3
  stage_modifiers:
    - !GMPruningModifier
      params: [a, b]
      final_sparsity: {a: 0.5, b: [0.8, 0.9]}
      end_epoch: eval(n)
"""


def test_args_are_frozen() -> None:
    r = loads(IMMUTABLE_RECIPE)
    m = r.modifiers[0]
    args = m.args
    assert isinstance(args, FrozenDict) and isinstance(m.raw_args, FrozenDict)
    assert isinstance(args["params"], tuple)
    assert isinstance(args["final_sparsity"], FrozenDict)
    assert isinstance(args["final_sparsity"]["b"], tuple)
    assert args == {"params": ("a", "b"), "final_sparsity": {"a": 0.5, "b": (0.8, 0.9)},
                    "end_epoch": 3}
    with pytest.raises(TypeError):
        args["end_epoch"] = 5  # type: ignore[index]
    with pytest.raises(TypeError):
        del args["params"]  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        args["params"].append("c")
    with pytest.raises(TypeError):
        args["final_sparsity"]["a"] = 0.1  # type: ignore[index]
    with pytest.raises(TypeError):
        r.variables["lr"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        r.stage("stage").variables["n"] = 1  # type: ignore[index]
    assert hash(args) == hash(loads(IMMUTABLE_RECIPE).modifiers[0].args)


@pytest.mark.parametrize(
    "obj,attribute",
    [("modifier", "type"), ("modifier", "args"), ("recipe", "stages"), ("stage", "name"),
     ("diagnostic", "line")],
)
def test_objects_are_frozen(obj: str, attribute: str) -> None:
    r = loads(IMMUTABLE_RECIPE)
    target = {
        "modifier": r.modifiers[0],
        "recipe": r,
        "stage": r.stages[0],
        "diagnostic": check_text("epochs: 1\n")[1][0],
    }[obj]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(target, attribute, None)
    assert isinstance(r.modifiers, tuple) and isinstance(r.stages, tuple)


def test_thaw_gives_plain_mutable_values() -> None:
    args = thaw(loads(IMMUTABLE_RECIPE).modifiers[0].args)
    assert type(args) is dict and type(args["params"]) is list
    args["params"].append("c")
    assert json.loads(json.dumps(args))["params"] == ["a", "b", "c"]


# --------------------------------------------------------------------------------------------
# SparseML's stage/group dialect: one diagnostic, not a cascade
# --------------------------------------------------------------------------------------------

CORE_DIALECT = {
    # examples/llama7b_sparse_quantized/2:4_w4a16_recipe.yaml (shortened)
    "stages": ("""\
sparsity_stage:
  run_type: oneshot
  sparsity_modifiers:
    SparseGPTModifier:
      sparsity: 0.5
      mask_structure: "2:4"
      sequential_update: false
finetuning_stage:
  run_type: train
  finetuning_modifiers:
    ConstantPruningModifier:
      targets: [
        're:.*q_proj.weight',
        're:.*k_proj.weight',
      ]
      start: 0
quantization_stage:
  run_type: oneshot
  quantization_modifiers:
    GPTQModifier:
      sequential_update: false
      ignore: ["lm_head"]
""", (3, 3)),
    # src/sparseml/transformers/sparsification/obcq/example.yaml (shortened)
    "obcq": ("""\
metadata:
  target_model:
    layer_prefix: "model.decoder.layers"

test_stage:
  obcq_modifiers:
    SmoothQuantModifier:
      smoothing_strength: 0.5
      mappings: [
        [["re:.*q_proj", "re:.*k_proj", "re:.*v_proj"], "re:.*self_attn_layer_norm"],
      ]
    SparseGPTModifier:
      sparsity: 0.5
      targets: ["re:model.layers.\\\\d+$"]
""", (6, 3)),
    "stages-key": ("stages:\n  a:\n    run_type: oneshot\n    a_modifiers:\n"
                   "      GPTQModifier: {}\n", (4, 5)),
    "top-level-dict": "modifiers:\n  SparseGPTModifier: {sparsity: 0.5}\n",
}


@pytest.mark.parametrize("name", list(CORE_DIALECT))
def test_core_dialect_loads_into_the_object_model(tmp_path: Path, name: str) -> None:
    """A stage/group recipe loads (``dialect == "stage"``) with its modifiers where the text
    writes their names."""
    case = CORE_DIALECT[name]
    text = case[0] if isinstance(case, tuple) else case
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    recipe, diagnostics = check(path)
    assert recipe is not None and recipe.dialect == "stage", diagnostics
    assert [d for d in diagnostics if d.severity.value == "error"] == []
    lines = text.splitlines()
    for m in recipe.modifiers:
        line = lines[m.span.line - 1]
        assert line[m.span.column - 1:].startswith(m.type + ":"), (m.type, line)
    assert [m.type for m in recipe.modifiers] == re.findall(r"^\s*(\w+Modifier):", text, re.M)
