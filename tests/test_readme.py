"""The README's two set-up commands exist, and CI runs the README's test command verbatim."""

from __future__ import annotations

import re

from conftest import REPO


def _bash_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def test_readme_has_the_two_setup_commands() -> None:
    blocks = [b.strip() for b in _bash_blocks()[:2]]
    main_job, test_suite = blocks
    assert main_job.startswith("python3 -m venv .venv") and "pip install ." in main_job
    assert main_job.endswith("recipe-spec validate examples/")
    assert "-c constraints.txt" in test_suite and '".[all,dev]"' in test_suite
    assert test_suite.endswith("python -m pytest")


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    test_suite = _bash_blocks()[1].strip()
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert test_suite in ci


def test_constraints_pin_the_frameworks() -> None:
    pins = dict(
        line.split("==")
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert pins["torch"] == "2.13.0"
    assert "tensorflow-cpu" in pins and "keras" in pins and "tensorflow" not in pins
