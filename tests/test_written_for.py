"""Which tool a stage/group recipe was written for, when --compat does not say: a recipe only
llm-compressor reads is checked against llm-compressor's releases, with no SparseML notes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from recipe_spec import loads
from recipe_spec.stage_dialect.versions import scope, summarize, versions_where
from recipe_spec.stage_dialect.written_for import checked_against, written_for
from recipe_spec.validation import validate

LLMC = sorted((Path(__file__).parent / "fixtures" / "llmcompressor_recipes").glob("*.yaml"))
BOTH = ("sparseml", "llmcompressor")


def _stage(body: str) -> str:
    return "s_stage:\n  g_modifiers:\n" + "".join(f"    {line}\n" for line in body.splitlines())


def test_llm_compressor_recipes_have_no_sparseml_notes() -> None:
    assert len(LLMC) == 34
    for path in LLMC:
        assert written_for(loads(path.read_text())) == ("llmcompressor",), path.name
        found = validate(path)
        assert found.checked_against.startswith("llm-compressor 0.1–0.14 only"), path.name
        assert not [d for d in found if "SparseML" in d.message + d.hint], path.name


@pytest.mark.parametrize("body, tools", [
    ("GPTQModifier: {scheme: W4A16, targets: Linear}", ("llmcompressor",)),
    ("QuantizationModifier:\n  config_groups: {g: {targets: [Linear], weights: {num_bits: 8}}}", ("llmcompressor",)),
    ("SparseGPTModifier: {sparsity: 0.5, targets: ['re:.*layers.0$']}", ("llmcompressor",)),
    ("AWQModifier: {scheme: W4A16_ASYM}", ("llmcompressor",)),
    # needs SparseML (quantize left llm-compressor): every release of both, as before
    ("SparseGPTModifier: {sparsity: 0.5, quantize: false, targets: ['re:.*layers.0$']}", BOTH),
    # read by both, nothing only llm-compressor knows: every release
    ("SparseGPTModifier: {sparsity: 0.5, block_size: 128}", BOTH),
    # targets on a training-time modifier: SparseML 1.6/1.7 had it
    ("ConstantPruningModifier: {targets: ['re:.*q_proj'], start: 0}", BOTH),
    ("NoSuchModifier: {targets: Linear}", BOTH),
])
def test_written_for(body: str, tools: tuple[str, ...]) -> None:
    assert written_for(loads(_stage(body))) == tools


def test_scope_names_only_the_tool_in_scope() -> None:
    text = _stage("SparseGPTModifier: {sparsity: 0.5, mask_structure: '2:4', ignore: [lm_head]}")
    before = [d.message for d in validate(text, compat=None) if d.code == "C001"]
    assert before == ["SparseGPTModifier has no argument ignore in llm-compressor ≤0.4"]
    assert summarize(versions_where({"sparseml": "", "llmcompressor": "<=0.4"})) == "SparseML, llm-compressor ≤0.4"
    with scope(["llmcompressor"]):
        assert summarize(versions_where({"sparseml": "", "llmcompressor": "<=0.4"})) == "llm-compressor ≤0.4"
        assert summarize(versions_where({"llmcompressor": ""})) == "every version"
    # a chosen release still says everything about it
    chosen = validate(text, compat="sparseml==1.9")
    assert chosen.checked_against == ""
    assert any("SparseML 1.9" in d.message for d in chosen)


def test_a_recipe_for_both_tools_keeps_its_sparseml_notes() -> None:
    found = validate(_stage("SparseGPTModifier: {sparsity: 0.5}"))
    assert found.checked_against == ""
    assert [d.message for d in found] == ["SparseGPTModifier requires block_size in SparseML 1.6",
                                          "SparseGPTModifier requires quantize in SparseML 1.6"]


def test_checked_against_words() -> None:
    assert checked_against(("llmcompressor",)) == "llm-compressor 0.1–0.14"


def test_cli_says_which_releases(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_stage("GPTQModifier: {scheme: W4A16, targets: Linear}"))
    (tmp_path / "b.yaml").write_text(_stage("SparseGPTModifier: {sparsity: 0.5, block_size: 8, quantize: false}"))
    out = subprocess.run([sys.executable, "-m", "recipe_spec", "validate", str(tmp_path)],
                         capture_output=True, text=True, check=False).stdout
    assert "1 of 2 file(s) checked against llm-compressor 0.1–0.14 only" in out
    out = subprocess.run([sys.executable, "-m", "recipe_spec", "validate", "--compat", "llmcompressor",
                          str(tmp_path)], capture_output=True, text=True, check=False).stdout
    assert "checked against" not in out
