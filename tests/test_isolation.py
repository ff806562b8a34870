"""The core never imports a framework: `import recipe_spec`, loading every corpus file and
`recipe-spec validate` leave torch, tensorflow and keras unimported (each takes seconds)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO, corpus_rows

FRAMEWORKS = ("torch", "tensorflow", "keras", "compressed_tensors")


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


_GMP = (
    "'modifiers:\\n  - !GMPruningModifier {params: [NAME], init_sparsity: 0.5, final_sparsity: 0.5,"
    " start_epoch: 0, end_epoch: 1, update_frequency: 1}\\n'"
)


def test_a_keras_model_never_imports_torch() -> None:
    """ScheduledModifierManager picks the backend from the model and imports only its framework."""
    leaked = _run(
        "import os, sys; os.environ['KERAS_BACKEND'] = 'tensorflow'; import keras; "
        "from recipe_spec import ScheduledModifierManager; "
        "m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name='fc')]); "
        f"man = ScheduledModifierManager.from_yaml({_GMP.replace('NAME', 'fc.weight')}); "
        "man.modify(m, keras.optimizers.SGD(0.1), 2); "
        "print(type(man.runtime).__name__ + '|' + str('torch' in sys.modules))"
    )
    assert leaked == "KerasManager|False"


def test_a_torch_model_never_imports_tensorflow_or_keras() -> None:
    leaked = _run(
        "import sys, torch; from recipe_spec import ScheduledModifierManager; "
        "m = torch.nn.Sequential(torch.nn.Linear(4, 2)); "
        f"man = ScheduledModifierManager.from_yaml({_GMP.replace('NAME', '0.weight')}); "
        "man.modify(m, torch.optim.SGD(m.parameters(), 0.1), 2); "
        "print(type(man.runtime).__name__ + '|' + ','.join(k for k in ('tensorflow', 'keras') if k in sys.modules))"
    )
    assert leaked == "TorchManager|"


_NO_NUMPY = (
    "import sys\n"
    "class _Refuse:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.partition('.')[0] == 'numpy':\n"
    "            raise ImportError('numpy is not installed')\n"
    "sys.meta_path.insert(0, _Refuse())\n"
)


def test_validate_runs_on_a_plain_install_without_numpy() -> None:
    """`pip install recipe-spec` brings no NumPy: the CLI module and `validate` must not need it."""
    code = _NO_NUMPY + (
        "import recipe_spec\n"
        "from recipe_spec.cli import main\n"
        f"rc = main(['validate', {str(REPO / 'examples')!r}])\n"
        "print(f'{rc}|' + ','.join(sorted(m for m in sys.modules if m.startswith('numpy'))))"
    )
    assert _run(code).splitlines()[-1] == "0|"
