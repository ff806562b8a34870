"""Figures in the docs come from the benchmarks (``benchmarks/docfigures.py``): every figure block
names a benchmark that writes that block of that page, and holds what it wrote."""

from __future__ import annotations

import re
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from docfigures import BLOCK, blocks  # noqa: E402


def test_every_figure_block_is_written_by_its_benchmark() -> None:
    seen = 0
    for page in sorted((REPO / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for name in blocks(text):
            seen += 1
            bench = REPO / "benchmarks" / f"{name}.py"
            assert bench.is_file(), f"{page.name}: the figures of {name} come from no benchmark"
            source = bench.read_text(encoding="utf-8")
            rel = page.relative_to(REPO / "docs").as_posix()
            assert re.search(rf'replace_block\(\s*"{re.escape(rel)}",\s*"{re.escape(name)}"', source), (
                f"benchmarks/{name}.py does not write the {name} block of docs/{rel}"
            )
            body = next(m.group("body") for m in BLOCK.finditer(text) if m.group("name") == name)
            assert f"`python benchmarks/{name}.py`" in body, f"docs/{rel}: the {name} block was not written by it"
    assert seen >= 2


def test_replace_block_rewrites_only_its_block(tmp_path, monkeypatch) -> None:
    import docfigures

    page = tmp_path / "page.md"
    page.write_text("a\n<!-- figures: bench_x -->\nold\n<!-- /figures -->\nb\n<!-- figures: bench_y -->\nkeep\n<!-- /figures -->\n")
    monkeypatch.setattr(docfigures, "DOCS", tmp_path)
    monkeypatch.setattr(docfigures, "REPO", tmp_path)
    docfigures.replace_block("page.md", "bench_x", ["- 1.5x"])
    text = page.read_text()
    assert "old" not in text and "- 1.5x" in text and "keep" in text and text.startswith("a\n")
    assert blocks(text) == ["bench_x", "bench_y"]
