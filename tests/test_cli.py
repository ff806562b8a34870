"""`recipe-spec validate`: exit codes, output formats, directory search."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from recipe_spec.cli import main

GOOD = "modifiers:\n  - !EpochRangeModifier\n    start_epoch: 0\n    end_epoch: 5\n"
BAD = "modifiers:\n  - !EpochRangeModifier\n    start_epoch: 0\n    start_epoch: 5\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bad.yml").write_text(BAD)
    (tmp_path / "notes.txt").write_text("not a recipe")
    return tmp_path


def test_examples_validate_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(REPO / "examples")]) == 0
    assert "0 error(s)" in capsys.readouterr().out


def test_text_output_and_exit_1(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tree)]) == 1
    out = capsys.readouterr().out
    assert f"{tree / 'sub' / 'bad.yml'}:4:5: Y002 [error]" in out
    assert "2 file(s) checked: 1 with errors" in out
    assert main(["validate", str(tree), "--exit-zero"]) == 0


def test_json_output_is_one_document(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tree), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == 1
    assert [f["path"] for f in doc["files"]] == [str(tree / "good.yaml"), str(tree / "sub" / "bad.yml")]
    (diag,) = doc["files"][1]["diagnostics"]
    assert set(diag) == {"code", "severity", "message", "hint", "line", "column", "end_line", "end_column", "url"}
    assert (diag["code"], diag["line"], diag["column"]) == ("Y002", 4, 5)
    assert diag["url"] == "https://recipe-spec.readthedocs.io/en/latest/rules/Y002/"
    assert doc["summary"]["errors"] == 1 and doc["summary"]["files"] == 2


def test_github_annotations(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["validate", str(tree / "sub"), "--format", "github"])
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("::error file=") and ",line=4,col=5," in line and "title=Y002::" in line


def test_var_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "r.yaml"
    p.write_text("n: 5\nmodifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: eval(n)}\n")
    assert main(["validate", str(p), "--var", "n=7"]) == 0
    assert main(["validate", str(p), "--var", "m=7"]) == 1
    assert "V005" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "does/not/exist.yaml"],
        ["validate", "--format", "xml", "examples"],
        ["validate", "examples", "--var", "novalue"],
        ["frobnicate"],
        [],
    ],
)
def test_tool_could_not_run_exits_2(argv: list[str]) -> None:
    assert main(argv) == 2


def test_console_script_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "recipe_spec", "validate", str(REPO / "examples")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "3 file(s) checked" in out.stdout


# The parts of the SARIF 2.1.0 schema (sarif-schema-2.1.0.json) that a run of recipe-spec
# uses: required properties, enums and minimums, transcribed from the OASIS standard.
SARIF_SUBSET = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"enum": ["2.1.0"]},
        "$schema": {"type": "string", "format": "uri"},
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["tool"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "rules": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["id"],
                                            "properties": {
                                                "id": {"type": "string"},
                                                "helpUri": {"type": "string", "format": "uri"},
                                                "shortDescription": {"type": "object", "required": ["text"]},
                                                "fullDescription": {"type": "object", "required": ["text"]},
                                                "defaultConfiguration": {
                                                    "type": "object",
                                                    "properties": {"level": {"enum": ["none", "note", "warning", "error"]}},
                                                },
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    },
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["message"],
                            "properties": {
                                "ruleId": {"type": "string"},
                                "ruleIndex": {"type": "integer", "minimum": -1},
                                "level": {"enum": ["none", "note", "warning", "error"]},
                                "message": {"type": "object", "required": ["text"]},
                                "locations": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "physicalLocation": {
                                                "type": "object",
                                                "properties": {
                                                    "artifactLocation": {"type": "object", "required": ["uri"]},
                                                    "region": {
                                                        "type": "object",
                                                        "properties": {
                                                            "startLine": {"type": "integer", "minimum": 1},
                                                            "startColumn": {"type": "integer", "minimum": 1},
                                                            "endLine": {"type": "integer", "minimum": 1},
                                                            "endColumn": {"type": "integer", "minimum": 1},
                                                        },
                                                    },
                                                },
                                            }
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_sarif_output_is_valid_sarif_2_1_0(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from jsonschema import Draft7Validator

    assert main(["validate", str(tree), "--format", "sarif"]) == 1
    doc = json.loads(capsys.readouterr().out)
    Draft7Validator(SARIF_SUBSET).validate(doc)
    (run,) = doc["runs"]
    (result,) = run["results"]
    assert result["ruleId"] == "Y002" and run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == "Y002"
    region = result["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (4, 5)
    # absolute addresses on the documentation site ([project.urls] Documentation), which a
    # code-scanning dashboard can open; the site builds rules/Y002.md to rules/Y002/
    (rule,) = run["tool"]["driver"]["rules"]
    assert rule["helpUri"] == "https://recipe-spec.readthedocs.io/en/latest/rules/Y002/"
    assert run["tool"]["driver"]["informationUri"] == "https://recipe-spec.readthedocs.io/en/latest/"


def test_select_and_ignore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(
        "modifiers:\n  - !EpochRangeModifier {start_epoch: 5, end_epoch: 2}\n"
        "  - !GMPruningModifier {params: [a], init_sparsity: 0.1, final_sparsity: 0.5,"
        " start_epoch: 0, end_epoch: 3, update_frequency: 1, log_types: __ALL__}\n"
    )
    assert main(["validate", str(p), "--format", "json"]) == 1
    codes = [d["code"] for d in json.loads(capsys.readouterr().out)["files"][0]["diagnostics"]]
    assert codes == ["E001", "M007"]
    assert main(["validate", str(p), "--ignore", "E", "--format", "json"]) == 0
    assert [d["code"] for d in json.loads(capsys.readouterr().out)["files"][0]["diagnostics"]] == ["M007"]
    assert main(["validate", str(p), "--select", "M007", "--format", "json"]) == 0
    assert [d["code"] for d in json.loads(capsys.readouterr().out)["files"][0]["diagnostics"]] == ["M007"]


def test_schema_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "GMPruningModifier"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "GMPruningModifier"
    assert main(["schema"]) == 0
    assert "modifiers" in json.loads(capsys.readouterr().out)["patternProperties"]
    assert main(["schema", "list"]) == 0
    assert "EpochRangeModifier" in capsys.readouterr().out.split()
    assert main(["schema", "GMPrunningModifier"]) == 2
    assert "GMPruningModifier" in capsys.readouterr().err


def _safetensors(path: Path, shapes: dict[str, list[int]]) -> None:
    """A safetensors file by its published layout: an 8-byte little-endian header length, the
    JSON header (dtype, shape, byte offsets per tensor), then the zero-filled data."""
    import math
    import struct

    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def test_params_prints_the_manifest_unless_told_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model.safetensors"
    _safetensors(model, {"fc.weight": [4, 8], "fc.bias": [4]})
    monkeypatch.chdir(tmp_path)
    assert main(["params", "--model", str(model)]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)  # standard output holds the manifest and nothing else
    assert sorted(p["name"] for p in doc["params"]) == ["fc.bias", "fc.weight"]
    assert not (tmp_path / "params.json").exists(), "no file is written unless -o names one"
    assert main(["params", "--model", str(model), "-o", "-"]) == 0
    assert capsys.readouterr().out == out.out
    assert main(["params", "--model", str(model), "-o", "m.json"]) == 0
    assert capsys.readouterr().out.startswith("wrote m.json: 2 parameters")
    assert (tmp_path / "m.json").read_text() == out.out


def test_directories_pass_over_files_that_are_not_recipes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "r.yaml").write_text("modifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 5}\n")
    (tmp_path / "stage.yaml").write_text("quant_stage:\n  quant_modifiers:\n    QuantizationModifier: {}\n")
    (tmp_path / "card.md").write_text("<!-- licence -->\n---\nmodifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 5}\n---\n# Card\n")
    (tmp_path / "ci.yml").write_text("on: [push]\njobs: {}\n")
    (tmp_path / "README.md").write_text("# Recipes\n\n```yaml\nmodifiers: []\n```\n")
    (tmp_path / "package.json").write_text('{"name": "x"}\n')
    assert main(["validate", str(tmp_path), "--format", "json"]) == 0
    checked = [Path(f["path"]).name for f in json.loads(capsys.readouterr().out)["files"]]
    assert checked == ["card.md", "r.yaml", "stage.yaml"]
    # named on the command line, a file is checked whatever it holds
    assert main(["validate", str(tmp_path / "ci.yml")]) == 1
    assert "S001" in capsys.readouterr().out
    # ... unless --recipes-only (the pre-commit hook): then nothing to check is no error
    assert main(["validate", "--recipes-only", str(tmp_path / "ci.yml")]) == 0
    assert "0 file(s) checked" in capsys.readouterr().out
    assert main(["validate", "--all-files-are-recipes", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "6 file(s) checked" in out and "ci.yml:1:1: S001" in out
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "ci.yml").write_text("on: [push]\n")
    assert main(["validate", str(empty)]) == 2
    assert "--all-files-are-recipes" in capsys.readouterr().err
