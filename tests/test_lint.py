"""`recipe-spec lint` against a parameter manifest: every P rule on a fixture with the
expected (code, line, column) written in it; manifest and records give identical results."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from recipe_spec.cli import main
from recipe_spec.diagnostics import Severity
from recipe_spec.lint import as_target, lint
from recipe_spec.params import ParamRecord, read_manifest

FIXTURES = Path(__file__).parent / "fixtures" / "lint"
MANIFEST = FIXTURES / "net.params.json"
EXPECT = re.compile(r"^# expect: ([A-Z]\d{3}) (\d+) (\d+)$", re.M)
FRAMEWORK, RECORDS = read_manifest(MANIFEST)


def _expected(path: Path) -> list[tuple[str, int, int]]:
    return sorted((c, int(a), int(b)) for c, a, b in EXPECT.findall(path.read_text()))


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.yaml")), ids=lambda p: p.stem)
def test_fixture(path: Path) -> None:
    got = sorted((d.code, d.line, d.column) for d in lint(path, RECORDS, FRAMEWORK))
    assert got == _expected(path)


def test_every_p_code_has_a_fixture() -> None:
    from recipe_spec.diagnostics.codes import CODES

    covered = {c for p in FIXTURES.glob("*.yaml") for c, _, _ in _expected(p)}
    # P007 (an ignore that removes every target) is a stage/group recipe's finding against a
    # checkpoint: tests/test_stage_lint_model.py::test_ignore_everything. P008/P009 (regex
    # pitfalls in stage/group targets) are validate's: tests/test_stage_patterns.py and
    # tests/fixtures/rules/P008_core_patterns.yaml. P010 (a removed layer that changes the
    # shape) needs the layers' sizes, which only the PyTorch runtime knows at modify():
    # tests/test_fuzz_training.py. P012 (a quantization group size against a checkpoint's
    # in_features) is lint --model's: tests/test_oneshot_quant_lint.py; so are P014 (a rotation)
    # and P015 (expert pruning): tests/test_oneshot_reap.py.
    assert {c for c in CODES if c.startswith("P")} - {"P007", "P008", "P009", "P010", "P012", "P014",
                                                       "P015"} == covered


def test_no_match_names_the_closest_parameters() -> None:
    diags = lint(FIXTURES / "P001_no_match.yaml", RECORDS, FRAMEWORK)
    by_line = {d.line: d for d in diags}
    assert "'fc1.wieght'" in by_line[5].message and by_line[5].hint.startswith("Closest: fc1.weight")
    assert "conv" in by_line[6].hint


def test_block4_padding_is_a_warning_and_nm_an_error() -> None:
    text = (FIXTURES / "P004_mask_shape.yaml").read_text().replace('"2:4"', "block4")
    (d,) = [d for d in lint(text, RECORDS, FRAMEWORK) if d.line == 9]
    assert d.code == "P004" and d.severity is Severity.WARNING and "30 entries" in d.message


def test_params_strict_false_makes_no_match_a_warning() -> None:
    text = (
        "modifiers:\n  - !TrainableParamsModifier\n    params: [fc9.weight]\n"
        "    trainable: false\n    params_strict: false\n    start_epoch: 0\n"
    )
    (d,) = lint(text, RECORDS, FRAMEWORK)
    assert (d.code, d.severity) == ("P001", Severity.WARNING)


def test_manifest_and_records_give_identical_results(tmp_path: Path) -> None:
    from recipe_spec.params import write_manifest

    copy = tmp_path / "params.json"
    write_manifest(copy, RECORDS, "torch")
    framework, again = read_manifest(copy)
    assert again == RECORDS and framework == "torch"
    for path in FIXTURES.glob("*.yaml"):
        assert lint(path, again, framework) == lint(path, RECORDS, "torch")


def test_target_keras_lints_with_keras_paths() -> None:
    keras_names = as_target(RECORDS, "torch", "keras")
    assert [(r.name, r.alias) for r in keras_names[:4]] == [
        ("conv1/kernel", "conv1.weight"), ("conv1/bias", "conv1.bias"),
        ("bn1/gamma", "bn1.weight"), ("bn1/beta", "bn1.bias"),
    ]
    text = (
        "modifiers:\n  - !GMPruningModifier\n    params: ['re:.*/kernel', fc1.weight]\n"
        "    init_sparsity: 0.05\n    final_sparsity: 0.5\n    start_epoch: 0\n    end_epoch: 5\n"
        "    update_frequency: 1\n"
    )
    assert [d.code for d in lint(text, RECORDS, "torch")] == ["P001"]  # no '/' in torch names
    assert lint(text, RECORDS, "torch", target="keras") == []  # portable alias still matches
    back = as_target(keras_names, "keras", "torch")
    assert [r.name for r in back] == [r.name for r in RECORDS]


def test_lint_cli_with_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(FIXTURES / "clean.yaml"), "--params", str(MANIFEST)]) == 0
    assert main(["lint", str(FIXTURES / "P001_no_match.yaml"), "--params", str(MANIFEST), "--format", "json"]) == 1
    out = capsys.readouterr().out
    doc = json.loads(out[out.index("{"):])
    assert [d["code"] for d in doc["files"][0]["diagnostics"]] == ["P001", "P001"]


@pytest.mark.parametrize(
    "argv",
    [
        ["lint", "examples"],  # neither --model nor --params
        ["lint", "examples", "--params", "nope.json"],
        ["lint", "examples", "--params", str(MANIFEST), "--model", "x:y"],
    ],
)
def test_lint_cli_usage_errors_exit_2(argv: list[str]) -> None:
    assert main(argv) == 2


def test_records_have_bias_and_norm_flags() -> None:
    flags = {r.name: r.is_bias_or_norm for r in RECORDS}
    assert flags["fc1.bias"] and flags["bn1.weight"] and not flags["fc1.weight"] and not flags["conv1.weight"]
    assert ParamRecord("emb/embeddings", (10, 4), "Embedding", True, "emb.weight").is_bias_or_norm is False


def test_a_pattern_python_may_read_differently_later_gives_no_raw_warning(tmp_path: Path) -> None:
    """``[[`` in a ``re:`` pattern makes Python's ``re`` warn "Possible nested set" (a
    FutureWarning from library code, printed by lint); the pattern matches as today, silently:
    the same findings as the same set written ``[\\[1]``."""
    import warnings

    name = RECORDS[0].name
    head, last = name[:-1], name[-1]
    found = {}
    for cls in (f"[[{last}]", f"[\\[{last}]"):
        path = tmp_path / "r.yaml"
        path.write_text(
            f"modifiers:\n  - !GMPruningModifier\n    params: ['re:{re.escape(head)}{cls}']\n"
            "    init_sparsity: 0.05\n    final_sparsity: 0.8\n    start_epoch: 0\n    end_epoch: 2\n"
            "    update_frequency: 1\n"
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            found[cls] = [(f.code, f.line) for f in lint(str(path), RECORDS, FRAMEWORK)]
    first, second = found.values()
    assert first == second and all(code != "P001" for code, _ in first)
