"""What the Trainer and Lightning integration tests share: the examples of
docs/integrations.md, the learning rate a plan sets, and the import check."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parent.parent / "docs" / "integrations.md"


def doc_blocks(heading: str) -> list[str]:
    """The ```python blocks of the ``## heading`` section of docs/integrations.md."""
    page = PAGE.read_text(encoding="utf-8")
    section = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", page, re.S | re.M)
    assert section, heading
    blocks = re.findall(r"^```python\n(.*?)^```$", section.group(1), re.S | re.M)
    assert blocks, heading
    return blocks


def run_doc_blocks(heading: str, label: str) -> None:
    """Run the examples of the ``## heading`` section as written, one after the other."""
    namespace: dict[str, Any] = {"__name__": "integrations_doc"}
    for i, block in enumerate(doc_blocks(heading)):
        exec(compile(block, f"docs/integrations.md ({label} block {i})", "exec"), namespace)


def recipe_lr(plan: Any, step: int) -> float:
    """The learning rate the recipe has set when optimizer step ``step`` runs: the value of the
    last 'lr' event at or before it."""
    value = None
    for k in range(step + 1):
        for event in plan.events_at(k):
            if event.target == "lr":
                value = float(event.value)
    assert value is not None
    return value


def imported_by_recipe_spec(module: str) -> bool:
    """Whether ``import recipe_spec, recipe_spec.integrations`` imports ``module`` (in a fresh
    interpreter)."""
    code = f"import sys, recipe_spec, recipe_spec.integrations; print({module!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"
