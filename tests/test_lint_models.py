"""Linting against real models: the corpus BERT recipes against a Hugging Face BERT built from
a config (no download), a misspelled pattern, a portable-names recipe on a PyTorch model and
its Keras twin, and manifest-vs-model equality through the CLI."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import corpus_rows

from recipe_spec import get_backend
from recipe_spec.cli import main
from recipe_spec.diagnostics import Severity
from recipe_spec.lint import lint

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

BERT_FILES = sorted(
    r["path"] for r in corpus_rows()
    if "huggingface-transformers__recipes__" in r["path"] and r["kind"] == "latest"
    and "bert.encoder" in Path(r["path"]).read_text()
)
DUPLICATE_KEYS = "97sparsity10epochblock.yaml"  # rejected by the loader (see test_corpus.py)


def _bert(layers: int, head: str) -> list:
    import transformers
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=layers, num_attention_heads=2, intermediate_size=64, vocab_size=100
    )
    return get_backend("torch").param_records(getattr(transformers, head)(config))


@pytest.fixture(scope="module")
def berts() -> dict[tuple[int, str], list]:
    return {
        (n, head): _bert(n, head)
        for n in (6, 12)
        for head in ("BertForMaskedLM", "BertForQuestionAnswering")
    }


def _model_for(path: str, berts: dict) -> list:
    # a "6layers" recipe that removes layers itself (LayerPruningModifier) starts from BERT-base's 12
    layers = 6 if "6layer" in path and "LayerPruningModifier" not in Path(path).read_text() else 12
    head = "BertForQuestionAnswering" if "quant" in Path(path).name and path.endswith(".md") else "BertForMaskedLM"
    return berts[(layers, head)]


def test_bert_recipes_lint_clean(berts: dict) -> None:
    checked = 0
    for path in BERT_FILES:
        if path.endswith(DUPLICATE_KEYS):
            continue
        errors = [d for d in lint(path, _model_for(path, berts), "torch") if d.severity is Severity.ERROR]
        assert errors == [], f"{path}: {[d.format() for d in errors[:3]]}"
        checked += 1
    print(f"\nlint: {checked} BERT recipes clean against a config-built Hugging Face BERT")
    assert checked >= 40


def test_misspelled_pattern_points_at_its_line(tmp_path: Path, berts: dict) -> None:
    source = next(p for p in BERT_FILES if p.endswith("90sparsity10epochs.yaml"))
    text = Path(source).read_text()
    lines = text.splitlines()
    target = next(i for i, line in enumerate(lines) if "attention.self.query.weight" in line)
    lines[target] = lines[target].replace("attention.self.query", "attention.self.qeury")
    copy = tmp_path / "misspelled.yaml"
    copy.write_text("\n".join(lines) + "\n")
    (d,) = [d for d in lint(copy, _model_for(source, berts), "torch") if d.severity is Severity.ERROR]
    assert (d.code, d.line) == ("P001", target + 1)
    assert lines[target][d.column - 1:].lstrip("'\"[ ").startswith(d.message.split("'")[1])
    assert "attention.self.query.weight" in d.hint


PORTABLE = textwrap.dedent(
    """\
    modifiers:
      - !GMPruningModifier
        params: [conv1.weight, 're:fc\\d\\.weight']
        init_sparsity: 0.05
        final_sparsity: 0.8
        start_epoch: 0
        end_epoch: 3
        update_frequency: 1
      - !TrainableParamsModifier
        params: [bn1.weight, bn1.bias]
        trainable: false
        start_epoch: 1
        end_epoch: 2
      - !GMPruningModifier
        params: __ALL_PRUNABLE__
        init_sparsity: 0.5
        final_sparsity: 0.5
        start_epoch: 3
        end_epoch: 3
        update_frequency: -1
    """
)


def _torch_net():
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3)
            self.bn1 = nn.BatchNorm2d(8)
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 4)

    return Net()


def _keras_net():
    import keras

    inputs = keras.Input((12, 12, 3))
    x = keras.layers.Conv2D(8, 3, name="conv1")(inputs)
    x = keras.layers.BatchNormalization(name="bn1")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(16, name="fc1")(x)
    return keras.Model(inputs, keras.layers.Dense(4, name="fc2")(x))


def test_portable_recipe_lints_clean_on_torch_and_keras_twins() -> None:
    torch_records = get_backend("torch").param_records(_torch_net())
    keras_records = get_backend("keras").param_records(_keras_net())
    assert lint(PORTABLE, torch_records, "torch") == []
    assert lint(PORTABLE, keras_records, "keras") == []
    assert {r.alias for r in keras_records} >= {r.name for r in torch_records}
    broken = PORTABLE.replace("bn1.bias", "bn2.bias")
    for records, framework in ((torch_records, "torch"), (keras_records, "keras")):
        (d,) = lint(broken, records, framework)
        assert (d.code, d.line) == ("P001", 10) and "bn1.bias" in d.hint


def test_manifest_and_model_give_identical_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "twin_models.py").write_text(
        "import torch.nn as nn\n\n"
        "def build():\n"
        "    class Net(nn.Module):\n"
        "        def __init__(self):\n"
        "            super().__init__()\n"
        "            self.conv1 = nn.Conv2d(3, 8, 3)\n"
        "            self.bn1 = nn.BatchNorm2d(8)\n"
        "            self.fc1 = nn.Linear(8, 16)\n"
        "            self.fc2 = nn.Linear(16, 4)\n"
        "    return Net()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(PORTABLE.replace("bn1.bias", "bn2.bias").replace("__ALL_PRUNABLE__", "__ALL__"))
    manifest = tmp_path / "params.json"
    assert main(["params", "--model", "twin_models:build", "-o", str(manifest)]) == 0
    capsys.readouterr()
    rc_model = main(["lint", str(recipe), "--model", "twin_models:build", "--format", "json"])
    by_model = capsys.readouterr().out
    rc_manifest = main(["lint", str(recipe), "--params", str(manifest), "--format", "json"])
    by_manifest = capsys.readouterr().out
    assert rc_model == rc_manifest == 1
    assert by_model == by_manifest
    assert '"P001"' in by_model and '"P002"' in by_model


def test_lint_and_params_never_import_a_framework_with_a_manifest(tmp_path: Path) -> None:
    import subprocess

    manifest = Path(__file__).parent / "fixtures" / "lint" / "net.params.json"
    code = (
        "import sys\nfrom recipe_spec.cli import main\n"
        f"rc = main(['lint', {str(Path(__file__).parent / 'fixtures' / 'lint' / 'clean.yaml')!r}, '--params', {str(manifest)!r}])\n"
        "print(f'{rc}|' + ','.join(m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "0|"
