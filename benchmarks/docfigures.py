"""The figures the docs quote, written by the benchmarks that measure them.

A page marks each block of figures::

    <!-- figures: bench_torch_masks -->
    ...lines a benchmark wrote...
    <!-- /figures -->

and ``python benchmarks/bench_torch_masks.py --update-docs`` replaces the block's lines with
what it just measured, with the machine it ran on (:func:`replace_block`). So a figure in the
docs is always one a benchmark printed, never typed in; ``tests/test_doc_figures.py`` checks
that every block names a benchmark that writes it.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
sys.path.insert(0, str(REPO))

BLOCK = re.compile(r"(<!-- figures: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /figures -->)", re.S)


def machine() -> str:
    """One line about where the figures were measured."""
    import datetime

    cores = os.cpu_count() or 0
    return f"{platform.machine()}, {cores} core{'s' if cores != 1 else ''}, Python {platform.python_version()}, {datetime.date.today().isoformat()}"


def replace_block(page: str, name: str, lines: Sequence[str]) -> Path:
    """Put ``lines`` (Markdown) and a line naming the machine into the ``name`` block of
    ``docs/page`` (written atomically); returns the page's path."""
    from recipe_spec.atomic import write_text

    path = DOCS / page
    text = path.read_text(encoding="utf-8")
    body = "\n".join([*lines, f"\n<sub>`python benchmarks/{name}.py`; {machine()}.</sub>"]) + "\n"
    found = [m for m in BLOCK.finditer(text) if m.group("name") == name]
    if len(found) != 1:
        raise SystemExit(f"{path}: expected one '<!-- figures: {name} -->' block, found {len(found)}")
    m = found[0]
    write_text(path, text[: m.start("body")] + body + text[m.end("body"):])
    print(f"updated the {name} figures in {path.relative_to(REPO)}")
    return path


def blocks(text: str) -> list[str]:
    """The benchmark names of the figure blocks in a page's text."""
    return [m.group("name") for m in BLOCK.finditer(text)]
