"""JSON Schemas of the stage/group dialect (``recipe-spec schema --dialect stage``,
``schemas/stage/``): every modifier has one, each argument's releases are in its description,
and the whole-recipe schema accepts every recipe ``recipe-spec validate`` accepts: llm-compressor's
own 34 recipes (tests/fixtures/llmcompressor_recipes/, copied from its repository: SOURCE.txt) and the 95
stage/group files of the shared corpus."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from conftest import REPO, corpus_rows
from jsonschema import Draft202012Validator

from recipe_spec.cli import main
from recipe_spec.diagnostics.base import Severity
from recipe_spec.stage_dialect.schema import stage_modifier_schema, stage_names, stage_recipe_schema
from recipe_spec.text.frozen import thaw
from recipe_spec.text.reader import read_yaml
from recipe_spec.validation import validate

LLMC = sorted((REPO / "tests" / "fixtures" / "llmcompressor_recipes").glob("*.yaml"))
CORE = [Path(r["path"]) for r in corpus_rows() if r["format"].startswith("core-dict")]


def _schema_of(*argv: str) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["schema", *argv]) == 0
    return json.loads(out.getvalue())


def test_the_recipe_sets_are_complete() -> None:
    # llm-compressor at ab1ba3e holds 34 YAML recipes (16 e2e, 11 compression, 7 sparsegpt)
    assert len(LLMC) == 34
    assert sum("__e2e__" in p.name for p in LLMC) == 16
    assert sum("__sparsegpt__" in p.name for p in LLMC) == 7
    assert len(CORE) == 95


@pytest.mark.parametrize("name", stage_names())
def test_every_stage_modifier_prints_a_valid_schema(name: str) -> None:
    schema = _schema_of(name) if name not in ("QuantizationModifier", "ConstantPruningModifier",
                                              "MagnitudePruningModifier") else \
        _schema_of(name, "--dialect", "stage")
    Draft202012Validator.check_schema(schema)
    assert schema["title"] == name and schema["$id"].endswith(f"stage/{name}")
    assert all("Releases: " in p["description"] for p in schema["properties"].values())


def test_names_in_both_dialects_default_to_the_modifier_dialect() -> None:
    assert "start_epoch" in _schema_of("QuantizationModifier")["properties"]  # the !Modifier (QAT) one
    stage = _schema_of("QuantizationModifier", "--dialect", "stage")
    assert {"config_groups", "scheme", "freeze_bn_stats_epoch"} <= set(stage["properties"])


def test_release_history_is_in_each_description() -> None:
    # llm-compressor: GPTQModifier.sequential_update removed in 0.8.0, actorder added in 0.6.0,
    # SparseGPT's sparsity required from 0.5.0 (SparseML 1.6 declares it without a default)
    gptq = stage_modifier_schema("GPTQModifier")["properties"]
    assert "Releases: SparseML ≥1.8, llm-compressor ≤0.7." in gptq["sequential_update"]["description"]
    assert "Releases: llm-compressor ≥0.6." in gptq["actorder"]["description"]
    sparsity = stage_modifier_schema("SparseGPTModifier")["properties"]["sparsity"]["description"]
    assert "Required in SparseML 1.6, llm-compressor ≥0.5." in sparsity
    assert "percdamp → dampening_frac" in stage_modifier_schema("GPTQModifier")["description"]


def test_dialect_names() -> None:
    assert _schema_of("--dialect", "stage") == _schema_of("--dialect", "core") == stage_recipe_schema()
    assert _schema_of() == _schema_of("--dialect", "modifier")
    assert main(["schema", "GPTQModifer"]) == 2


def test_committed_stage_schema_files_are_fresh() -> None:
    for name in stage_names():
        path = REPO / "schemas" / "stage" / f"{name}.schema.json"
        assert json.loads(path.read_text(encoding="utf-8")) == stage_modifier_schema(name), name
    whole = json.loads((REPO / "schemas" / "recipe-stage.schema.json").read_text(encoding="utf-8"))
    assert whole == stage_recipe_schema()


def _verdicts(paths: list[Path]) -> tuple[list[str], int, int]:
    """(files validate accepts that the schema rejects, files both reject, files validate
    rejects)."""
    checker = Draft202012Validator(stage_recipe_schema())
    false, both, rejected = [], 0, 0
    for path in paths:
        errors = [d for d in validate(path) if d.severity is Severity.ERROR]
        data = thaw(read_yaml(path.read_text(encoding="utf-8")).value)
        flagged = [f"{e.json_path}: {e.message}" for e in checker.iter_errors(data)]
        rejected += bool(errors)
        if flagged and not errors:
            false.append(f"{path.name}: {flagged[0]}")
        both += bool(flagged and errors)
    return false, both, rejected


def test_whole_recipe_schema_accepts_llm_compressors_recipes() -> None:
    false, both, rejected = _verdicts(LLMC)
    assert false == []
    assert both == rejected  # what validate rejects, the schema flags too


def test_whole_recipe_schema_has_no_false_error_on_the_corpus() -> None:
    false, both, rejected = _verdicts(CORE)
    assert false == []
    assert rejected > 0 and both == rejected
