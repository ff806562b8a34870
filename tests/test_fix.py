"""``recipe-spec fix``: the safe fixes over every real recipe, byte-for-byte preservation of
what no fix touches, the unsafe fixes, ``--compat`` and the command line."""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO, corpus_rows
from testdata import SEEDS

from recipe_spec.cli import main
from recipe_spec.diagnostics.fixes import FIXES
from recipe_spec.fix import fix_file, fix_text
from recipe_spec.fix.engine import finding_key
from recipe_spec.stage_dialect import Compat

FILES = [Path(r["path"]) for r in corpus_rows()] + sorted(
    (REPO / "tests" / "fixtures" / "llmcompressor_recipes").glob("*.yaml"))
CORE = {Path(r["path"]) for r in corpus_rows() if r["format"].startswith("core-dict")}


def _touched_lines(fixes: list) -> set[int]:
    """Lines of the original text that the edits of one pass cover."""
    lines: set[int] = set()
    for f in fixes:
        for e in f.edits:
            last = e.end[0] - 1 if e.end[1] == 1 and e.end[0] > e.start[0] else e.end[0]
            lines.update(range(e.start[0], last + 1))
    return lines


def _untouched_survive(original: str, fixed: str, touched: set[int]) -> bool:
    """Every line no edit covers is in the fixed text, byte for byte and in order."""
    old, new = original.splitlines(keepends=True), fixed.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    kept = {i + 1 for tag, i1, i2, _, _ in matcher.get_opcodes() if tag == "equal"
            for i in range(i1, i2)}
    return set(range(1, len(old) + 1)) - touched <= kept


@pytest.mark.parametrize("compat", [None, "llmcompressor"])
def test_fix_over_every_real_recipe(compat: str | None) -> None:
    chosen = Compat.parse(compat) if compat else None
    changed, titles, problems = 0, Counter(), []
    for path in FILES:
        result = fix_file(path, chosen)
        if not result.changed:
            continue
        changed += 1
        titles.update((f.code, f.title) for f in result.applied)
        before = Counter(finding_key(d) for d in result.before)
        after = Counter(finding_key(d) for d in result.after)
        if after - before:
            problems.append(f"{path.name}: new findings {sorted(after - before)}")
        if not len(result.after) < len(result.before):
            problems.append(f"{path.name}: {len(result.before)} -> {len(result.after)} findings")
        if fix_text(result.fixed, str(path), chosen).changed:
            problems.append(f"{path.name}: a second run changes it again")
        if len(result.passes) == 1 and not _untouched_survive(
                result.original, result.fixed, _touched_lines(result.passes[0])):
            problems.append(f"{path.name}: a line no fix touches changed")
        assert {f.code for f in result.applied} <= set(FIXES)
    assert problems == []
    assert changed > 100
    if compat is None:
        # the issue counts 68 `percdamp` errors among the 115 of the stage/group corpus
        assert titles[("C001", "rename percdamp to dampening_frac")] == 68


def test_stage_group_corpus_loses_its_renamed_argument_errors() -> None:
    errors = lambda ds: sum(d.severity.value == "error" and d.code == "C001" for d in ds)  # noqa: E731
    before = after = 0
    for path in sorted(CORE):
        result = fix_file(path)
        before, after = before + errors(result.before), after + errors(result.after)
    assert before == 115  # the count of C001 errors in the 95 stage/group files
    # percdamp, 18 prunen+prunem pairs, compress_layers, 5 vLLMQuantizationModifier renamed in
    # recipes only llm-compressor reads (config_groups: no SparseML note follows the rename);
    # 4 are withheld (their recipes are checked against SparseML too, whose 1.6/1.7
    # QuantizationModifier takes no config_groups)
    assert after == before - 68 - 2 * 18 - 2 - 5 == 4


def test_woodfisher_tutorial_mfac_options_becomes_the_flat_arguments() -> None:
    seed = (SEEDS / "003_8a1cd8bdcd8a2c33.txt").read_text()
    block = re.search(r"```yaml\n(pruning_modifiers:.*?)```", seed, re.S).group(1)
    result = fix_text(block, "tutorial.yaml")
    assert [f.title for f in result.applied] == ["write mfac_options as the flat arguments it groups"]
    assert result.fixed == block.replace(
        "    mfac_options:\n", "").replace("      num_grads", "    num_grads").replace(
        "      fisher_block_size", "    fisher_block_size").replace(
        "      available_gpus", "    available_devices")
    assert len(result.before) == 1 and result.after == []


STAGE = """\
# a comment at the top
quant_stage:
  quant_modifiers:   # trailing comment
    GPTQModifier:
      scheme: W4A16
      percdamp: 0.01  # as in the paper

      sequential_update: false   # removed in 0.8
      ignore: ["lm_head"]
"""


def test_compat_decides_what_a_release_requires() -> None:
    every = fix_text(STAGE, "r.yaml")
    assert [f.title for f in every.applied] == ["rename percdamp to dampening_frac"]
    assert every.fixed == STAGE.replace("percdamp", "dampening_frac")
    new = fix_text(STAGE, "r.yaml", Compat.parse("llmcompressor==0.8"))
    assert new.fixed == STAGE.replace("percdamp", "dampening_frac").replace(
        "      sequential_update: false   # removed in 0.8\n", "")
    old = fix_text(STAGE, "r.yaml", Compat.parse("llmcompressor==0.7"))
    assert old.fixed == every.fixed  # 0.7 still takes sequential_update


def test_flow_mappings_json_and_markdown() -> None:
    flow = "s_stage:\n  m_modifiers:\n    GPTQModifier: {scheme: W4A16, sequential_update: true, block_size: 64}\n"
    out = fix_text(flow, "r.yaml", Compat.parse("llmcompressor")).fixed
    assert out == flow.replace(" sequential_update: true,", "")
    last = "s_stage:\n  m_modifiers:\n    GPTQModifier: {scheme: W4A16, sequential_update: true}\n"
    assert fix_text(last, "r.yaml", Compat.parse("llmcompressor")).fixed == last.replace(
        ", sequential_update: true", "")
    as_json = '{\n  "s_stage": {"m_modifiers": {"GPTQModifier": {\n    "scheme": "W4A16",\n    "percdamp": 0.1\n  }}}\n}\n'
    assert fix_text(as_json, "r.json").fixed == as_json.replace('"percdamp"', '"dampening_frac"')
    card = "---\nmodifiers:\n  - !GMPruningModifier\n    params: __ALL_PRUNABLE__\n    init_sparsity: 0.05\n" \
           "    final_sparsty: 0.8\n    start_epoch: 0\n    end_epoch: 10\n    update_frequency: 1\n" \
           "    log_types: __ALL__\n---\n\n# A card\n\nfinal_sparsty: the text is left alone\n"
    fixed = fix_text(card, "card.md").fixed
    assert fixed == card.replace("    final_sparsty: 0.8", "    final_sparsity: 0.8").replace(
        "    log_types: __ALL__\n", "")


def test_unsafe_fixes_only_when_asked() -> None:
    text = "s_stage:\n  m_modifiers:\n    WandaPruningModifier:\n      init_sparsity: 0.5\n"
    safe = fix_text(text, "r.yaml")
    assert not safe.changed and [f.title for f in safe.unsafe] == ["rename init_sparsity to sparsity"]
    unsafe = fix_text(text, "r.yaml", unsafe=True)
    assert unsafe.fixed == text.replace("init_sparsity", "sparsity") and unsafe.after == []


def test_a_fix_that_would_bring_a_new_finding_is_withheld() -> None:
    # SparseML 1.6/1.7's QuantizationModifier is the QAT one: it takes no config_groups
    text = ("s_stage:\n  q_modifiers:\n    vLLMQuantizationModifier:\n      config_groups:\n"
            "        group_0: {targets: [Linear], weights: {num_bits: 8}}\n")
    old = fix_text(text, "r.yaml", Compat.parse("sparseml==1.7"))
    assert not old.changed and [f.title for f in old.withheld] == [
        "rename vLLMQuantizationModifier to QuantizationModifier"]
    new = fix_text(text, "r.yaml", Compat.parse("llmcompressor"))
    assert new.fixed == text.replace("vLLMQuantizationModifier", "QuantizationModifier")
    # without --compat, config_groups says the recipe is llm-compressor's: the rename is made
    assert fix_text(text, "r.yaml").fixed == new.fixed


def test_command_writes_in_place_and_diff_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(STAGE.replace("\n", "\r\n").encode())
    recipe.chmod(0o640)
    assert main(["fix", "--diff", str(recipe)]) == 1
    out, err = capsys.readouterr()
    assert "-      percdamp: 0.01  # as in the paper" in out and "+      dampening_frac: 0.01" in out
    assert "Would make 1 fix(es) in 1 of 1 file(s)" in err
    assert recipe.read_bytes() == STAGE.replace("\n", "\r\n").encode()
    assert main(["fix", str(recipe)]) == 0
    assert recipe.read_bytes() == STAGE.replace("percdamp", "dampening_frac").replace("\n", "\r\n").encode()
    assert stat.S_IMODE(os.stat(recipe).st_mode) == 0o640
    assert main(["fix", "--diff", str(recipe)]) == 0
    assert main(["fix", str(tmp_path / "missing.yaml")]) == 2
    assert main(["fix", "--compat", "llmcompressor==9", str(recipe)]) == 2


def test_docs_example_is_what_the_command_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = (REPO / "docs" / "fix.md").read_text()
    shown = re.search(r"```text\n\$ recipe-spec fix --diff gptq.yaml\n(.*?)```", page, re.S).group(1)
    old = [line[1:] for line in shown.splitlines() if line[:1] in " -" and not line.startswith("---")]
    (tmp_path / "gptq.yaml").write_text("quant_stage:\n  quant_modifiers:\n" + "\n".join(old) + "\n")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["fix", "--diff", "gptq.yaml"]) == 1
    finally:
        os.chdir(cwd)
    out, err = capsys.readouterr()
    assert (out + err).splitlines()[2:] == shown.splitlines()[2:]


def test_fix_page_documents_every_flag_and_every_fixable_code_is_real() -> None:
    from recipe_spec.cli import build_parser
    from recipe_spec.diagnostics.codes import CODES

    page = (REPO / "docs" / "fix.md").read_text()
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["fix"]
    for action in sub._actions:
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                assert f"`{option}" in page or f" {option}" in page, option
    assert set(FIXES) <= set(CODES)
    for code in FIXES:
        assert f"rules/{code}.md" in page


def test_numbered_stage_keys_are_renamed_so_that_every_release_reads_them_in_order() -> None:
    text = ("quant_stage_1:\n  quant_modifiers:\n    SmoothQuantModifier: {smoothing_strength: 0.8}\n"
            "'quant_stage_2':\n  quant_modifiers:\n    GPTQModifier: {scheme: W8A8, targets: [Linear]}\n")
    result = fix_text(text, "r.yaml")
    assert [f.title for f in result.applied] == ["rename stage quant_stage_1 to quant_1_stage",
                                                 "rename stage quant_stage_2 to quant_2_stage"]
    assert result.fixed == text.replace("quant_stage_1", "quant_1_stage").replace("quant_stage_2", "quant_2_stage")
