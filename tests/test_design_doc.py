"""docs/design.md: its Python examples run and its claims about the layout hold."""

from __future__ import annotations

import doctest
import re

from conftest import REPO

from recipe_spec.modifiers import CAPABILITIES, all_specs, declared_in
from recipe_spec.schedule.tracks import TRACKS

PAGE = (REPO / "docs" / "design.md").read_text(encoding="utf-8")


def test_python_examples_run() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```$", PAGE, re.S | re.M)
    assert blocks
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for i, block in enumerate(blocks):
        test = parser.get_doctest(block, {}, f"design.md block {i}", "docs/design.md", 0)
        assert test.examples
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 3


def test_page_lists_every_capability_and_family_module() -> None:
    for word in CAPABILITIES:
        assert f"`{word}`" in PAGE, word
    for name in all_specs():
        assert f"`{declared_in(name)}`" in PAGE, declared_in(name)


def test_every_declared_schedule_is_a_track_kind() -> None:
    for name, s in all_specs().items():
        assert s.schedule is None or s.schedule in TRACKS, name
