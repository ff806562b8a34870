"""The modifier declarations: the shipped schema files are their output, and they hang together."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import REPO
from jsonschema import Draft202012Validator

from recipe_spec import docgen
from recipe_spec.checks.schemas import modifier_schema
from recipe_spec.modifiers import CAPABILITIES, EVENT_TARGETS, ModifierSpec, all_specs, names
from recipe_spec.modifiers.schema import json_schema, schema_path, schema_text

SCHEMA_DIR = REPO / "schemas" / "modifiers"
REGENERATE = "run `python -m recipe_spec.docgen` and commit the result"
SPECS = list(all_specs().values())


def _ids(spec: ModifierSpec) -> str:
    return spec.name


def _differs(spec: ModifierSpec, path: Path) -> bool:
    return path.read_bytes() != schema_text(spec).encode("utf-8")


# -- the schema files are generated from the declarations ------------------------------------
@pytest.mark.parametrize("spec", SPECS, ids=_ids)
def test_schema_file_is_the_declarations_output(spec: ModifierSpec) -> None:
    path = REPO / schema_path(spec)
    assert path.is_file(), f"{path} is missing: {REGENERATE}"
    assert not _differs(spec, path), f"{path} differs from its declaration: {REGENERATE}"


def test_catalogue_names_are_the_schema_file_names() -> None:
    files = sorted(p.name.removesuffix(".schema.json") for p in SCHEMA_DIR.glob("*.schema.json"))
    assert files == names()


def test_a_changed_declaration_no_longer_matches_its_file() -> None:
    spec = all_specs()["EpochRangeModifier"]
    path = REPO / schema_path(spec)
    assert not _differs(spec, path)
    assert _differs(dataclasses.replace(spec, description=spec.description + " "), path)
    assert _differs(dataclasses.replace(spec, args=spec.args[::-1]), path)


def test_docgen_writes_and_checks_the_schema_files(tmp_path: Path) -> None:
    files = docgen.generate()
    from recipe_spec.stage_dialect.schema import stage_names

    stage = {f"schemas/stage/{n}.schema.json" for n in stage_names()}
    assert "GPTQModifier" in stage_names() and "vLLMQuantizationModifier" not in stage_names()  # a rename only
    assert {rel for rel in files if rel.startswith("schemas/")} == {
        schema_path(s) for s in SPECS
    } | stage | {"schemas/backends.json", "schemas/recipe-modifier.schema.json", "schemas/recipe-stage.schema.json"}
    docgen.write(tmp_path)
    assert docgen.check(tmp_path, files) == []
    folder = tmp_path / "schemas" / "modifiers"
    (folder / "GMPruningModifier.schema.json").write_text("{}\n", encoding="utf-8")
    (folder / "EpochRangeModifier.schema.json").unlink()
    (folder / "OldModifier.schema.json").write_text("{}\n", encoding="utf-8")
    (folder / "notes.txt").write_text("not a schema file\n", encoding="utf-8")
    assert sorted(docgen.check(tmp_path, files)) == [
        "extra: schemas/modifiers/OldModifier.schema.json",
        "missing: schemas/modifiers/EpochRangeModifier.schema.json",
        "stale: schemas/modifiers/GMPruningModifier.schema.json",
    ]
    docgen.write(tmp_path)
    assert docgen.check(tmp_path, files) == []
    assert not (folder / "OldModifier.schema.json").exists()
    assert (folder / "notes.txt").exists()


def test_schema_store_serves_the_generated_schemas() -> None:
    for spec in SPECS:
        assert modifier_schema(spec.name) == json.loads(schema_text(spec))


def test_generated_schemas_do_not_share_state_with_the_declarations() -> None:
    spec = all_specs()["GMPruningModifier"]
    first = json_schema(spec)
    first["properties"]["params"]["description"] = "changed"
    first["$defs"]["param_name"]["minLength"] = 99
    first["x-recipe-spec"]["example"]["params"].append("changed")
    assert json_schema(spec) == json.loads(schema_text(spec))
    assert json.loads(schema_text(spec)) == json.loads(
        (REPO / schema_path(spec)).read_text(encoding="utf-8")
    )


# -- the declarations hang together ----------------------------------------------------------
@pytest.mark.parametrize("spec", SPECS, ids=_ids)
def test_events_and_capabilities_are_known(spec: ModifierSpec) -> None:
    assert spec.emits <= EVENT_TARGETS, f"unknown targets: {sorted(spec.emits - EVENT_TARGETS)}"
    assert spec.needs <= CAPABILITIES, f"unknown capabilities: {sorted(spec.needs - CAPABILITIES)}"
    for arg in spec.args:
        assert arg.needs <= CAPABILITIES, f"{arg.name}: unknown {sorted(arg.needs - CAPABILITIES)}"


@pytest.mark.parametrize("spec", SPECS, ids=_ids)
def test_argument_names_are_unique(spec: ModifierSpec) -> None:
    seen = [a.name for a in spec.args]
    assert len(seen) == len(set(seen)), sorted({n for n in seen if seen.count(n) > 1})


@pytest.mark.parametrize("spec", SPECS, ids=_ids)
def test_example_is_valid(spec: ModifierSpec) -> None:
    schema = json_schema(spec)
    Draft202012Validator.check_schema(schema)
    errors = [e.message for e in Draft202012Validator(schema).iter_errors(dict(spec.example))]
    assert spec.example, f"{spec.name} has no example"
    assert not errors, errors


@pytest.mark.parametrize("spec", SPECS, ids=_ids)
def test_example_uses_declared_arguments(spec: ModifierSpec) -> None:
    assert set(spec.example) <= set(spec.arg_names)
