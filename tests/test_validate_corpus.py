"""`validate` over the whole corpus: valid tagged recipes have zero errors, broken ones get
precise errors, stage/group (stage/group) files read and checked with their own catalogue.

Beyond the six files that cannot load (see test_corpus.py), validation finds real mistakes in
seven branch-only files, checked by eye:
- five dbolya-yolact recipes from pull-request branches list the same twelve to seventeen
  parameters in two GMPruningModifiers over the same epochs (E005, a copy-paste slip);
- two obcq examples tag SparseOPTModifier / SparseLlamaModifier, one-shot modifiers of the
  LLM dialect (S007, once per file).

In 37 stage/group files a `re:` target has an unescaped `.` between two name parts
(`re:model.layers.\\d+$`, `re:.*self_attn.q_proj`, `re:.*q_proj.weight`): P009, an info, since
the dot is meant literally but the looser pattern catches no other name of a Llama/OPT model.
"""

from __future__ import annotations

from collections import Counter

from conftest import corpus_rows

from recipe_spec.diagnostics import Severity
from recipe_spec.validation import validate

ROWS = corpus_rows()
LOAD_BROKEN = 6
RULE_BROKEN = {
    "sparseml@pr445__integrations__dbolya-yolact__recipes__yolact.pruned.perf.md": "E005",
    "sparseml@pr451__integrations__dbolya-yolact__recipes__yolact.pruned.md": "E005",
    "sparseml@pr451__integrations__dbolya-yolact__recipes__yolact.pruned_quant.md": "E005",
    "sparseml@pr468__integrations__dbolya-yolact__recipes__yolact.pruned.md": "E005",
    "sparseml@pr470__integrations__dbolya-yolact__recipes__yolact.pruned.md": "E005",
    "sparseml@pr1714__src__sparseml__transformers__sparsification__obcq__example.yaml": "S007",
    "sparseml@pr1714__src__sparseml__transformers__sparsification__obcq__example_llama.yaml": "S007",
}


def test_whole_corpus() -> None:
    clean, with_errors, warnings, core = 0, {}, Counter(), Counter()
    for row in ROWS:
        diags = validate(row["path"])
        errors = [d for d in diags if d.severity is Severity.ERROR]
        name = row["path"].rsplit("/", 1)[1]
        if not row["format"].startswith("core-dict"):
            warnings.update(d.code for d in diags if d.severity is Severity.WARNING)
        else:
            assert "S003" not in {d.code for d in diags}, name  # read, not refused
            core.update(d.code for d in errors)
            assert {d.code for d in diags} <= {"C001", "C002", "M002", "M003", "M007", "V001", "P009"}, name
            continue
        if errors:
            with_errors[name] = errors
        else:
            clean += 1
    legacy = sum(1 for r in ROWS if r["format"].startswith("legacy"))
    print(
        f"\nvalidate corpus: {len(ROWS)} files; {legacy} tagged: {clean} without errors, "
        f"{len(with_errors)} with errors ({LOAD_BROKEN} unloadable, {len(RULE_BROKEN)} rule "
        f"findings); {len(ROWS) - legacy} stage/group (errors by code {dict(core)}); warnings {dict(warnings)}"
    )
    rule_found = {n: {d.code for d in ds} for n, ds in with_errors.items() if n in RULE_BROKEN}
    assert rule_found == {n: {c} for n, c in RULE_BROKEN.items()}
    assert len(with_errors) == LOAD_BROKEN + len(RULE_BROKEN)
    assert clean == legacy - LOAD_BROKEN - len(RULE_BROKEN)
    # E006: three copies of a YOLOv3 recipe whose EpochRangeModifier ends at 52 while its
    # learning-rate modifier runs to 160
    assert set(warnings) <= {"M007", "E004", "V006", "E006"}


def test_core_pattern_findings_are_loose_dots_at_the_pattern() -> None:
    """The corpus's only pattern findings are P009 infos, each at a `re:` string whose
    flagged dot stands between two name parts."""
    files = set()
    for row in ROWS:
        if not row["format"].startswith("core-dict"):
            continue
        lines = open(row["path"]).read().splitlines()
        for d in validate(row["path"]):
            if d.code[0] == "P":
                assert (d.code, d.severity) == ("P009", Severity.INFO), d.format()
                pattern = d.message.split("'")[1]
                written = lines[d.line - 1][d.column - 1:].lstrip("'\"").replace("\\\\", "\\")
                assert written.startswith(pattern), d.format()
                files.add(row["path"])
    assert len(files) == 37


def test_e005_points_at_the_repeated_parameter() -> None:
    row = next(r for r in ROWS if r["path"].endswith(next(iter(RULE_BROKEN))))
    lines = open(row["path"]).read().splitlines()
    for d in validate(row["path"]):
        if d.code == "E005":
            name = d.message.split("'")[1]
            assert lines[d.line - 1][d.column - 1:].strip() == name
            first_line = int(d.message.split("on line ")[1].split()[0])
            assert lines[first_line - 1].strip() == "- !GMPruningModifier"
