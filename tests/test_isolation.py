"""The core never imports a framework: `import recipe_spec`, loading every corpus file and
`recipe-spec validate` leave torch, tensorflow and keras unimported (each takes seconds)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO, corpus_rows

FRAMEWORKS = ("torch", "tensorflow", "keras")


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    return out.stdout.strip()


def test_import_recipe_spec_imports_no_framework() -> None:
    leaked = _run(
        "import sys, recipe_spec; "
        f"print(','.join(m for m in {FRAMEWORKS!r} if m in sys.modules))"
    )
    assert leaked == ""


def test_loading_every_corpus_file_imports_no_framework() -> None:
    paths = [r["path"] for r in corpus_rows()]
    code = (
        "import sys, recipe_spec\n"
        f"paths = {paths!r}\n"
        "for p in paths: recipe_spec.check(p)\n"
        "print(len(paths), ','.join(m for m in %r if m in sys.modules))" % (FRAMEWORKS,)
    )
    count, _, leaked = _run(code).partition(" ")
    assert int(count) == 314
    assert leaked == ""


def test_validate_command_imports_no_framework() -> None:
    code = (
        "import sys\n"
        "from recipe_spec.cli import main\n"
        f"rc = main(['validate', {str(REPO / 'examples')!r}])\n"
        "print(f'{rc}|' + ','.join(m for m in %r if m in sys.modules))" % (FRAMEWORKS,)
    )
    assert _run(code).splitlines()[-1] == "0|"


def test_asking_for_a_backend_does_not_import_its_framework() -> None:
    leaked = _run(
        "import sys, recipe_spec; b = recipe_spec.get_backend('torch'); "
        "k = recipe_spec.get_backend('keras'); "
        f"print(b.name + '|' + k.name + '|' + ','.join(m for m in {FRAMEWORKS!r} if m in sys.modules))"
    )
    assert leaked == "torch|keras|"
