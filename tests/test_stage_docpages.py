"""docs/modifiers/stage/: one generated page per stage/group modifier name, each example
validates without errors, and where an argument exists is written as ``summarize`` says."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

import recipe_spec
from recipe_spec import docgen
from recipe_spec.diagnostics import Severity
from recipe_spec.docgen.stage_pages import STAGE_DIR, example_text, runs_as, stage_pages
from recipe_spec.stage_dialect import (
    Compat,
    all_stage_names,
    stage_spec,
    stage_variants,
    summarize,
    versions_where,
)
from recipe_spec.validation import validate

CORE = REPO / STAGE_DIR
REGENERATE = "run `python -m recipe_spec.docgen` and commit the result"
_YAML = re.compile(r"^```yaml\n(.*?)^```$", re.S | re.M)


def _read(name: str) -> str:
    path = CORE / name
    assert path.is_file(), f"{path} is missing: {REGENERATE}"
    return path.read_text(encoding="utf-8")


def _errors(text: str, compat: str | None = None) -> list[str]:
    return [d.format() for d in validate(text, compat=compat) if d.severity is Severity.ERROR]


def test_every_core_name_has_a_page_and_an_index_row() -> None:
    index = _read("index.md")
    for name in all_stage_names():
        assert _read(f"{name}.md").startswith(f"# {name}\n"), name
        assert f"[{name}]({name}.md)" in index, f"{name} missing from {STAGE_DIR}/index.md"
    assert set(stage_pages()) == {f"{STAGE_DIR}/{n}.md" for n in all_stage_names()} | {
        f"{STAGE_DIR}/index.md", f"{STAGE_DIR}/quantization-arguments.md"}


@pytest.mark.parametrize("name", all_stage_names())
def test_every_example_on_the_page_validates_without_errors(name: str) -> None:
    page = _read(f"{name}.md")
    blocks = _YAML.findall(page)
    variants = stage_variants(name)
    assert len(blocks) == len(variants), f"{name}: one example per variant"
    for variant in variants:
        text = example_text(variant)
        assert text in blocks, f"{name}: the page's example differs from the catalogue's"
        written = variant.renamed_to or name
        assert [m.type for m in recipe_spec.load(text).modifiers][0] == written
        assert not _errors(text), f"docs/modifiers/stage/{name}.md: invalid example"
        for tool, version in variant.versions()[-1:]:  # and in the newest release that has it
            compat = str(Compat(tool, version))
            assert not _errors(text, compat), f"{name}: invalid example under --compat {compat}"


def test_quantization_page_example_validates() -> None:
    blocks = _YAML.findall(_read("quantization-arguments.md"))
    assert blocks
    for text in blocks:
        assert not _errors(text), text
        assert not _errors(text, "llmcompressor"), text


def test_argument_releases_are_written_as_summarize_renders_them() -> None:
    page = _read("GPTQModifier.md")
    removed = summarize(versions_where({"llmcompressor": ">=0.8"}))
    assert removed == "llm-compressor ≥0.8"
    assert re.search(rf"^\| `sequential_update` \| removed \| {removed} \| Delete it", page, re.M)
    exists = summarize(versions_where({"sparseml": ">=1.8", "llmcompressor": "<0.8"}))
    assert f"| `sequential_update` | boolean or null | — | — | no | {exists} |" in page
    assert "| `offload_hessians` | boolean | — | — | no | llm-compressor ≥0.4 |" in page
    sparsegpt = _read("SparseGPTModifier.md")
    assert "| `sparsity` | number or list of number or null | [0, 1), each [0, 1) | — | SparseML 1.6, llm-compressor ≥0.5 |" \
        in sparsegpt
    assert "| `sequential_update` | deprecated | llm-compressor ≥0.5 |" in sparsegpt


def test_variants_renames_and_quantization_links() -> None:
    quant = _read("QuantizationModifier.md")
    assert "## In SparseML ≤1.7" in quant and "## In SparseML ≥1.8, llm-compressor" in quant
    assert "[QuantizationScheme](quantization-arguments.md#quantizationscheme)" in quant
    smooth = _read("SmoothQuantModifier.md")
    assert "| `alpha` | renamed to `smoothing_strength` | SparseML ≥1.8, llm-compressor |" in smooth
    assert "| `smoothing_strength` | renamed to `alpha` | SparseML ≤1.7 |" in smooth
    assert "write `QuantizationModifier`" in _read("vLLMQuantizationModifier.md")
    args = _read("quantization-arguments.md")
    assert "| `MXFP4` | llm-compressor ≥0.9 |" in args
    assert "| `actorder` |" in args and "| `weights` |" in args


def test_index_says_what_recipe_spec_does() -> None:
    index = _read("index.md")
    (constant,) = stage_variants("ConstantPruningModifier")
    assert "on the `keras` and `torch` backends; in `recipe_spec.oneshot` on the `keras` and `torch` backends" in runs_as(constant)
    (sparsegpt,) = [v for v in stage_variants("SparseGPTModifier") if stage_spec(v.name) is v]
    assert runs_as(sparsegpt) == "validated and linted; runs in `recipe_spec.oneshot` on the `keras` and `torch` backends"
    assert runs_as(constant) in index
    (gptq,) = stage_variants("GPTQModifier")
    assert runs_as(gptq) == "validated and linted; runs in `recipe_spec.oneshot` on the `keras` and `torch` backends"
    (autoround,) = stage_variants("AutoRoundModifier")
    assert runs_as(autoround) == "validated and linted; runs in `recipe_spec.oneshot` on the `torch` backend"
    (distil,) = stage_variants("OutputDistillationModifier")
    assert "not run" in runs_as(distil)


def test_core_pages_are_linked_and_checked_by_docgen(tmp_path) -> None:
    assert "(modifiers/stage/index.md)" in (REPO / "docs/stage-dialect.md").read_text(encoding="utf-8")
    assert "(stage/index.md)" in (REPO / "docs/modifiers/index.md").read_text(encoding="utf-8")
    pages = docgen.generate()
    assert set(stage_pages()) <= set(pages)
    docgen.write(tmp_path)
    (tmp_path / STAGE_DIR / "GPTQModifier.md").write_text("old\n")
    (tmp_path / STAGE_DIR / "GoneModifier.md").write_text("a modifier no longer declared\n")
    assert sorted(docgen.check(tmp_path, pages)) == [
        f"extra: {STAGE_DIR}/GoneModifier.md", f"stale: {STAGE_DIR}/GPTQModifier.md"]
    assert docgen.main(["--check", "--root", str(tmp_path)]) == 1
