"""The reference docs: generated pages are fresh, complete, and their examples are right."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO

import recipe_spec
from recipe_spec import docgen
from recipe_spec.checks.schemas import combined_schema, modifier_names
from recipe_spec.diagnostics import Severity
from recipe_spec.diagnostics.codes import CODES
from recipe_spec.validation import validate

DOCS = REPO / "docs"
REGENERATE = "run `python -m recipe_spec.docgen` and commit the result"

_FENCE = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```$", re.S | re.M)


def _section(page: str, heading: str) -> str:
    """The text of the ``## heading`` section of a Markdown page ('' when there is none)."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", page, re.S | re.M)
    return match.group(1) if match else ""


def _blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group("lang"), m.group("body")) for m in _FENCE.finditer(text)]


def _read(rel: str) -> str:
    path = DOCS / rel
    assert path.is_file(), f"{path} is missing: {REGENERATE}"
    return path.read_text(encoding="utf-8")


# -- freshness and completeness --------------------------------------------------------------
def test_generated_docs_are_fresh() -> None:
    problems = docgen.check(REPO)
    assert not problems, (
        "the generated docs differ from the schemas / code catalogue:\n  "
        + "\n  ".join(problems)
        + f"\n{REGENERATE}"
    )


def test_every_code_has_a_page_and_an_index_entry() -> None:
    index = _read("rules/index.md")
    for code in CODES:
        page = _read(f"rules/{code}.md")
        assert page.startswith(f"# {code}: {CODES[code].title}\n"), code
        assert f"[{code}]({code}.md)" in index, f"{code} missing from docs/rules/index.md"
        assert CODES[code].why in page and CODES[code].fix in page


def test_every_modifier_has_a_page_and_an_index_entry() -> None:
    index = _read("modifiers/index.md")
    for name in modifier_names():
        page = _read(f"modifiers/{name}.md")
        assert page.startswith(f"# {name}\n"), name
        assert f"[{name}]({name}.md)" in index, f"{name} missing from docs/modifiers/index.md"


def test_rule_index_groups_codes_by_family_in_order() -> None:
    index = _read("rules/index.md")
    headings = re.findall(r"^## (\w): ", index, re.M)
    assert headings == [f[0] for f in docgen.FAMILIES] == list("YSVMECPB")
    for letter in headings:
        section = _section(index, next(f"{f[0]}: {f[1]}" for f in docgen.FAMILIES if f[0] == letter))
        listed = re.findall(r"^\| \[(\w+)\]", section, re.M)
        assert listed == sorted(c for c in CODES if c.startswith(letter))


# -- modifier examples -----------------------------------------------------------------------
@pytest.mark.parametrize("name", modifier_names())
def test_modifier_example_loads_and_validates_cleanly(name: str) -> None:
    blocks = _blocks(_section(_read(f"modifiers/{name}.md"), "Example"))
    assert [lang for lang, _ in blocks] == ["yaml"], f"{name}: one yaml block expected"
    text = blocks[0][1]
    recipe = recipe_spec.load(text)
    assert [m.type for m in recipe.modifiers] == [name]
    errors = [d for d in validate(text) if d.severity is Severity.ERROR]
    assert not errors, f"the example on docs/modifiers/{name}.md is invalid:\n" + "\n".join(
        d.format() for d in errors
    )


# -- rule examples ---------------------------------------------------------------------------
@pytest.mark.parametrize("code", sorted(CODES))
def test_rule_example_is_well_formed(code: str) -> None:
    c = CODES[code]
    blocks = _blocks(_section(_read(f"rules/{code}.md"), "Example"))
    if not c.example:
        assert blocks == [], f"{code} has no example, so its page has no Example section"
        return
    assert len(blocks) == 1, code
    lang, body = blocks[0]
    assert body == c.example + "\n", f"{code}: the page's example differs from codes.py"
    assert all(ch.isprintable() or ch == "\n" for ch in body), f"{code}: control characters"
    assert "\t" not in body, f"{code}: tabs are not YAML indentation"
    if lang == "sh":
        # A command line: recipe-spec must accept it as written.
        from recipe_spec.cli import build_parser

        argv = shlex.split(body, comments=True)
        assert argv[0] == "recipe-spec", code
        build_parser().parse_args(argv[1:])
    elif lang == "yaml" and not code.startswith("Y"):
        # The problem it shows is about the recipe, not its YAML: the text must be one
        # well-formed YAML document that recipe-spec reads without a Y (YAML) diagnostic.
        assert len(list(yaml.compose_all(body, Loader=yaml.SafeLoader))) == 1, code
        _, diagnostics = recipe_spec.check(body)
        yaml_problems = [d.format() for d in diagnostics if d.code.startswith("Y")]
        assert not yaml_problems, f"{code}'s example is not even valid YAML: {yaml_problems}"
    else:
        assert lang in ("yaml", "markdown"), f"{code}: unexpected example language {lang!r}"


# -- editors.md ------------------------------------------------------------------------------
def test_editors_page_lists_every_modifier_tag() -> None:
    page = _read("editors.md")
    assert "recipe-spec schema > recipe.schema.json" in page
    assert "# yaml-language-server: $schema=./recipe.schema.json" in page
    assert '"yaml.schemas"' in page and '"yaml.customTags"' in page
    for name in modifier_names():
        assert f'"!{name} mapping"' in page, f"!{name} missing from yaml.customTags"
    settings = [json.loads(body) for lang, body in _blocks(page) if lang == "json"]
    tags = next(s["yaml.customTags"] for s in settings if "yaml.customTags" in s)
    assert tags == [f"!{n} mapping" for n in modifier_names()]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_combined_schema_for_editors_has_no_dangling_refs() -> None:
    schema = combined_schema()
    dangling = []
    for ref in sorted(set(_refs(schema))):
        node: Any = schema
        for part in ref.removeprefix("#/").split("/"):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            dangling.append(ref)
    assert not dangling, f"unresolvable $refs in `recipe-spec schema`: {dangling}"
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(schema)
    example = {"num_epochs": 5, "modifiers": [{"EpochRangeModifier": {"start_epoch": 0, "end_epoch": 5}}]}
    assert Draft202012Validator(schema).is_valid(example)
    bad = {"modifiers": [{"EpochRangeModifier": {"start_epoch": "zero", "end_epoch": 5}}]}
    assert not Draft202012Validator(schema).is_valid(bad)


# -- validate.md -----------------------------------------------------------------------------
def test_validate_page_documents_every_flag_and_format() -> None:
    from recipe_spec.cli import build_parser

    page = _read("validate.md")
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    validate_parser = sub.choices["validate"]  # type: ignore[attr-defined]
    for action in validate_parser._actions:
        for option in action.option_strings:
            if option not in ("-h", "--help"):
                assert f"`{option}" in page, f"docs/validate.md does not document {option}"
        if action.dest == "format":
            for fmt in action.choices:
                assert f"### `--format {fmt}`" in page, f"no section for --format {fmt}"
    for needle in ("`0`", "`1`", "`2`", "# noqa: CODE", "--format github", "recipe-spec-validate"):
        assert needle in page, needle


def _paths(node: Any, prefix: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            out.add(path)
            out |= _paths(value, path)
    elif isinstance(node, list):
        for item in node:
            out |= _paths(item, prefix + "[]")
    return out


def test_validate_page_documents_every_json_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from recipe_spec.cli import main

    recipe = tmp_path / "r.yaml"
    recipe.write_text("modifiers:\n  - !EpochRangeModifier {start_epoch: 5, end_epoch: 2}\n")
    assert main(["validate", str(recipe), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == 1
    page = _read("validate.md")
    assert '"version": 1' in page
    undocumented = sorted(p for p in _paths(doc) if f"| `{p}` |" not in page)
    assert not undocumented, f"JSON fields missing from docs/validate.md: {undocumented}"


# -- docgen itself ---------------------------------------------------------------------------
def test_docgen_check_reports_stale_missing_and_extra(tmp_path: Path) -> None:
    pages = docgen.generate()
    assert docgen.write(tmp_path)  # a fresh tree: everything is written
    assert docgen.check(tmp_path, pages) == []
    assert docgen.main(["--check", "--root", str(tmp_path)]) == 0
    (tmp_path / "docs/rules/Y002.md").write_text("old\n")
    (tmp_path / "docs/modifiers/GMPruningModifier.md").unlink()
    (tmp_path / "docs/rules/Z999.md").write_text("a code that no longer exists\n")
    (tmp_path / "docs/notes.md").write_text("hand-written pages elsewhere are left alone\n")
    assert sorted(docgen.check(tmp_path, pages)) == [
        "extra: docs/rules/Z999.md",
        "missing: docs/modifiers/GMPruningModifier.md",
        "stale: docs/rules/Y002.md",
    ]
    assert docgen.main(["--check", "--root", str(tmp_path)]) == 1
    assert docgen.main(["--root", str(tmp_path)]) == 0
    assert docgen.check(tmp_path, pages) == []
    assert (tmp_path / "docs/notes.md").exists()


def test_docgen_output_is_deterministic() -> None:
    first = docgen.generate()
    assert first == docgen.generate()
    assert list(first) == sorted(first)
    assert not any(re.search(r"\b20\d\d-\d\d-\d\d\b", text) for text in first.values())
