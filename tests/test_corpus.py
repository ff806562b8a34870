"""Every real recipe of tests/data/corpus: the valid ones load, the broken ones fail precisely.

The INDEX marks five legacy files as unparseable (an undefined alias in three versions of one
card, a mis-indented list item, a duplicate anchor). One more, ``97sparsity10epochblock.yaml``,
parses with PyYAML but gives ``mask_type`` twice in each of its 72 GMP modifiers (first
``unstructured``, then ``[1, 4]``; PyYAML silently kept the second). SPEC makes a duplicate key
an error, so that file is rejected too, with one Y002 per duplicate at the second key.
Stage/group (stage/group) files load into the same object model, as the INDEX describes them.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from conftest import corpus_rows

import recipe_spec
from recipe_spec import RecipeError
from recipe_spec.validation import validate

ROWS = corpus_rows()
LEGACY_OK = [r for r in ROWS if r["format"] == "legacy-tagged" and r["parse_ok"] == "yes"]
CORE = [r for r in ROWS if r["format"].startswith("core-dict")]

DUPLICATE_KEY_FILE = "sparseml__integrations__huggingface-transformers__recipes__97sparsity10epochblock.yaml"

# file name -> (code, line, column) of the first diagnostic, checked against the files by eye:
BROKEN = {
    "sparseml__integrations__old-examples__pytorch__recipes__mobilenet-pruned_quant.md": ("Y003", 62, 15),
    "sparseml@v0.6.0__integrations__pytorch__recipes__mobilenet-pruned_quant.md": ("Y003", 62, 15),
    "sparseml@v0.8.0__integrations__pytorch__recipes__mobilenet-pruned_quant.md": ("Y003", 62, 15),
    "sparseml@pr326__research__GPT__recipes__90sparse.yaml": ("Y001", 8, 9),
    "sparseml@pr739__research__information_retrieval__bi_encoder__recipes__12layer_prune_downstreamGM90_distill.yaml": (
        "Y001", 12, 13,
    ),
    DUPLICATE_KEY_FILE: ("Y002", 19, 9),
}


def _name(row: dict[str, str]) -> str:
    return row["path"].rsplit("/", 1)[1]


def test_corpus_index_is_as_expected() -> None:
    assert len(ROWS) == 314
    assert len([r for r in ROWS if r["parse_ok"] != "yes"]) == 5
    assert {_name(r) for r in ROWS if r["parse_ok"] != "yes"} | {DUPLICATE_KEY_FILE} == set(BROKEN)


def test_every_valid_legacy_recipe_loads() -> None:
    loaded, modifiers = 0, Counter()
    failures = []
    for row in LEGACY_OK:
        if _name(row) == DUPLICATE_KEY_FILE:
            continue
        try:
            recipe = recipe_spec.load(row["path"])
        except RecipeError as exc:
            failures.append(f"{row['path']}: {exc}")
            continue
        loaded += 1
        assert recipe.modifiers, row["path"]
        assert int(row["modifier_count"]) == len(recipe.modifiers), row["path"]
        modifiers.update(m.type for m in recipe.modifiers)
    print(
        f"\ncorpus: loaded {loaded} of {len(LEGACY_OK)} parseable legacy-tagged recipes "
        f"({sum(modifiers.values())} modifiers); the other one has duplicate keys (see module doc)"
    )
    assert not failures, "\n".join(failures)
    assert loaded == len(LEGACY_OK) - 1
    assert modifiers["GMPruningModifier"] > 2000


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_recipe_fails_at_the_offending_line(name: str) -> None:
    row = next(r for r in ROWS if _name(r) == name)
    with pytest.raises(RecipeError) as info:
        recipe_spec.load(row["path"])
    first = info.value.diagnostics[0]
    assert (first.code, first.line, first.column) == BROKEN[name]
    assert first.file == row["path"]
    assert first.message and first.hint


def test_duplicate_key_file_reports_every_duplicate() -> None:
    row = next(r for r in ROWS if _name(r) == DUPLICATE_KEY_FILE)
    with pytest.raises(RecipeError) as info:
        recipe_spec.load(row["path"])
    diags = info.value.diagnostics
    assert len(diags) == 72
    lines = open(row["path"]).read().splitlines()
    for d in diags:
        assert d.code == "Y002"
        assert lines[d.line - 1].strip().startswith("mask_type: [1, 4]")
        first_line = int(d.message.split("first on line ")[1].rstrip(")"))
        assert lines[first_line - 1].strip() == "mask_type: unstructured"


def test_core_dialect_files_load_as_the_index_describes_them() -> None:
    """Each stage/group file loads into stages, groups and modifiers exactly as the corpus
    INDEX lists them (stage names, ``stage.group`` paths, modifier types), with no S003."""
    errors: Counter[str] = Counter()
    for row in CORE:
        recipe, diags = recipe_spec.check(row["path"])
        assert "S003" not in {d.code for d in diags}, row["path"]
        if recipe is None:  # only eval() of variables the file does not define (given by the caller)
            assert {d.code for d in diags if d.severity.value == "error"} == {"V001"}, (row["path"], diags)
            continue
        assert recipe.dialect == "stage"
        assert [s.name for s in recipe.stages] == row["stage_names"].split(","), row["path"]
        groups = [f"{s.name}.{g.name}" for s in recipe.stages for g in s.groups]
        assert groups == row["modifier_groups"].split(","), row["path"]
        text = open(row["path"]).read()
        types = {m.type for m in recipe.modifiers}
        assert set(row["modifiers_used"].split(",")) <= types, row["path"]  # INDEX misses vLLM...
        assert all(re.search(rf"^\s*{t}:", text, re.M) for t in types), row["path"]
        for d in validate(row["path"]):
            if d.severity.value == "error":
                errors[d.code] += 1
    assert set(errors) <= {"C001", "M001", "M002", "M003", "M004", "M006", "V001"}, errors
    print(f"\ncorpus: {len(CORE)} stage/group files; errors by code: {dict(errors)}")

