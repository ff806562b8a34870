"""The output folder of a one-shot run (:mod:`recipe_spec.atomic`) on every surface:
``recipe_spec.oneshot(output_dir=...)`` on PyTorch and on Keras, the manager, and
``recipe-spec oneshot --output``. A folder that cannot be written, or may not be replaced, is
refused before the model changes; a write that fails leaves no temporary folder and the old
folder as it was; replacing a folder leaves nothing of the old checkpoint (a sharded one's
index and shards) beside the new one; SIGTERM, as Ctrl-C, leaves no temporary folder."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import recipe_spec
from recipe_spec import atomic
from recipe_spec.atomic import OutputDirError
from recipe_spec.cli import main

MAGNITUDE = ("s_stage:\n  s_modifiers:\n    MagnitudePruningModifier:\n      targets: [Linear]\n"
             "      init_sparsity: 0.5\n      final_sparsity: 0.5\n")
SGPT = ("sparsity_stage:\n  sparsity_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n"
        "      mask_structure: '2:4'\n      ignore: ['re:.*lm_head']\n")
#: one-shot MagnitudePruningModifier prunes here, unlike in llm-compressor (C006, said once per run)
pytestmark = pytest.mark.filterwarnings("ignore:.*C006:UserWarning")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _siblings(target: Path) -> list[str]:
    """What a run left beside ``target``: temporary (``.name.*.tmp``), old (``.old``) or probe
    folders."""
    return sorted(p.name for p in target.parent.iterdir() if p.name.startswith("."))


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _read_only(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """``folder`` refuses new entries: mode 0o500, or, as root (who ignores modes), the
    writability probe meets what a read-only file system answers."""
    if not IS_ROOT:
        folder.chmod(0o500)
        return
    real = tempfile.mkdtemp

    def mkdtemp(*args: Any, **kwargs: Any) -> str:
        if os.path.realpath(str(kwargs.get("dir", ""))) == os.path.realpath(folder):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*args, **kwargs)

    monkeypatch.setattr(atomic.tempfile, "mkdtemp", mkdtemp)


def _bad_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, str]]:
    """(output_dir, what the error says) for each folder that must be refused up front."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    locked = tmp_path / "locked"
    locked.mkdir()
    _read_only(monkeypatch, locked)
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    return [(a_file, "exists and is not a folder"), (a_file / "out", "is a file, not a folder"),
            (locked / "out", "cannot write in"), (full, "not empty")]


# -- PyTorch ----------------------------------------------------------------------------------------

def _llama() -> Any:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                                      tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(config).float().eval()


def _torch_state(model: Any) -> tuple[dict[str, Any], Any]:
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.arange(4, 20).reshape(1, -1)).logits.clone()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, logits


def _torch_same(model: Any, before: tuple[dict[str, Any], Any]) -> bool:
    import torch

    state, logits = _torch_state(model)
    return state.keys() == before[0].keys() and all(torch.equal(state[k], before[0][k]) for k in state) \
        and torch.equal(logits, before[1])


def test_a_folder_that_cannot_be_written_is_refused_before_the_torch_model_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _llama()
    before = _torch_state(model)
    for folder, needle in _bad_folders(tmp_path, monkeypatch):
        listing = sorted(os.listdir(tmp_path))
        with pytest.raises(OutputDirError) as err:
            recipe_spec.oneshot(model=model, recipe=MAGNITUDE, output_dir=folder)
        assert needle in str(err.value) and str(folder) in str(err.value), str(err.value)
        assert _torch_same(model, before), folder
        assert sorted(os.listdir(tmp_path)) == listing  # no probe, no parent created
    assert "overwrite_output_dir=True" in str(err.value)
    from recipe_spec import ScheduledModifierManager

    manager = ScheduledModifierManager.from_yaml(MAGNITUDE)
    with pytest.raises(OutputDirError, match="exists and is not a folder"):
        manager.apply(model, calibration=[{"input_ids": [1, 2, 3]}], output_dir=tmp_path / "a-file")
    assert _torch_same(model, before)


def test_a_torch_save_that_fails_midway_leaves_the_old_folder(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk after config.json (save_pretrained raises ENOSPC): no temporary folder, the
    previous output as it was, an error saying nothing was written."""
    model = _llama()
    out = tmp_path / "out"
    recipe_spec.oneshot(model=model, recipe=MAGNITUDE, output_dir=out)
    previous = _tree(out)
    assert {"config.json", "model.safetensors", "recipe.yaml"} <= set(previous)
    real = model.save_pretrained

    def disk_full(folder: str, **kwargs: Any) -> None:
        model.config.save_pretrained(folder)
        assert Path(folder).parent == tmp_path and Path(folder) != out  # a temporary sibling
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(model, "save_pretrained", disk_full)
    with pytest.raises(OutputDirError) as err:
        recipe_spec.oneshot(model=model, recipe=MAGNITUDE.replace("0.5", "0.75"), output_dir=out,
                            overwrite_output_dir=True)
    assert "No space left on device" in str(err.value) and "nothing was written" in str(err.value)
    assert _tree(out) == previous and _siblings(out) == []
    monkeypatch.setattr(model, "save_pretrained", real)
    # the same into a new folder: nothing of it is left
    with pytest.raises(OutputDirError):
        monkeypatch.setattr(model, "save_pretrained", disk_full)
        recipe_spec.oneshot(model=model, recipe=MAGNITUDE, output_dir=tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def _sharded(folder: Path) -> set[str]:
    """A real sharded Hugging Face checkpoint of another model in ``folder``; its file names."""
    other = _llama()
    other.save_pretrained(folder, max_shard_size="150KB")
    names = {p.name for p in folder.iterdir()}
    assert "model.safetensors.index.json" in names and len([n for n in names if n.startswith("model-0")]) >= 2
    return names


def test_writing_over_a_sharded_torch_checkpoint(tmp_path: Path) -> None:
    """Without overwrite_output_dir the folder is refused before the model changes; with it,
    no index or shard of the old checkpoint is left, and transformers loads the new weights."""
    transformers = pytest.importorskip("transformers")
    import torch

    out = tmp_path / "ckpt"
    old = _sharded(out)
    old_files = _tree(out)
    model = _llama()
    torch.nn.init.normal_(model.model.layers[0].self_attn.q_proj.weight)  # not the old model's weights
    before = _torch_state(model)
    with pytest.raises(OutputDirError, match="not empty.*overwrite_output_dir=True"):
        recipe_spec.oneshot(model=model, recipe=MAGNITUDE, output_dir=out)
    assert _torch_same(model, before) and _tree(out) == old_files
    recipe_spec.oneshot(model=model, recipe=MAGNITUDE, output_dir=out, overwrite_output_dir=True)
    names = {p.name for p in out.iterdir()}
    assert names == {"config.json", "generation_config.json", "model.safetensors", "recipe.yaml"}, names
    assert not names & (old - {"config.json", "generation_config.json"})
    assert _siblings(out) == []
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    assert torch.equal(loaded.model.layers[0].self_attn.q_proj.weight, model.model.layers[0].self_attn.q_proj.weight)
    assert float((loaded.model.layers[0].self_attn.q_proj.weight == 0).float().mean()) == 0.5


def test_a_tokenizer_is_written_with_the_model(tmp_path: Path) -> None:
    class Tokenizer:
        def save_pretrained(self, folder: str) -> None:
            Path(folder, "tokenizer.json").write_text("{}")

    model = _llama()
    recipe_spec.oneshot(model=model, recipe=MAGNITUDE, output_dir=tmp_path / "out", tokenizer=Tokenizer())
    assert {"model.safetensors", "tokenizer.json", "recipe.yaml"} <= {p.name for p in (tmp_path / "out").iterdir()}


# -- Keras --------------------------------------------------------------------------------------------

def _keras_model() -> Any:
    pytest.importorskip("keras")
    from keras_hub_cases import plain_model

    return plain_model()


def _keras_state(model: Any) -> tuple[list[Any], Any]:
    x = np.arange(2 * 10, dtype="int32").reshape(2, 10) % 40
    return [w.copy() for w in model.get_weights()], np.asarray(model.predict(x, verbose=0))


def _keras_same(model: Any, before: tuple[list[Any], Any]) -> bool:
    weights, out = _keras_state(model)
    return len(weights) == len(before[0]) and all(np.array_equal(a, b) for a, b in zip(weights, before[0], strict=True)) \
        and np.array_equal(out, before[1])


def test_a_folder_that_cannot_be_written_is_refused_before_the_keras_model_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _keras_model()
    before = _keras_state(model)
    for folder, needle in _bad_folders(tmp_path, monkeypatch):
        with pytest.raises(OutputDirError) as err:
            recipe_spec.oneshot(model=model, recipe=MAGNITUDE, output_dir=folder)
        assert needle in str(err.value) and str(folder) in str(err.value), str(err.value)
        assert _keras_same(model, before), folder


def test_a_keras_save_that_fails_midway_leaves_the_old_folder(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    model = _keras_model()
    out = tmp_path / "out"
    recipe_spec.oneshot(model=model, recipe=MAGNITUDE, output_dir=out)
    previous = _tree(out)
    assert set(previous) == {"model.keras", "recipe.yaml"}

    def disk_full(path: str, *args: Any, **kwargs: Any) -> None:
        Path(path).write_bytes(b"half a model")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(model, "save", disk_full)
    with pytest.raises(OutputDirError, match="No space left on device"):
        recipe_spec.oneshot(model=model, recipe=MAGNITUDE, output_dir=out, overwrite_output_dir=True)
    assert _tree(out) == previous and _siblings(out) == []


def test_writing_a_keras_model_over_a_sharded_checkpoint(tmp_path: Path) -> None:
    keras = pytest.importorskip("keras")
    out = tmp_path / "ckpt"
    out.mkdir()
    index = {"metadata": {"total_size": 8}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                           "b": "model-00002-of-00002.safetensors"}}
    (out / "model.safetensors.index.json").write_text(json.dumps(index))
    for shard in index["weight_map"].values():
        (out / shard).write_bytes(b"old shard")
    (out / "model.keras").write_bytes(b"an old model")
    old_files = _tree(out)
    model = _keras_model()
    before = _keras_state(model)
    with pytest.raises(OutputDirError, match="not empty"):
        recipe_spec.oneshot(model=model, recipe=MAGNITUDE, output_dir=out)
    assert _keras_same(model, before) and _tree(out) == old_files
    recipe_spec.oneshot(model=model, recipe=MAGNITUDE, output_dir=out, overwrite_output_dir=True)
    assert sorted(p.name for p in out.iterdir()) == ["model.keras", "recipe.yaml"] and _siblings(out) == []
    loaded = keras.saving.load_model(out / "model.keras")
    fc1 = keras.ops.convert_to_numpy(loaded.get_layer("fc1").kernel)
    assert float((fc1 == 0).mean()) == 0.5


# -- the command line ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ckpt") / "model"
    _llama().save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text('{"model_max_length": 256}')
    return folder


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    import random

    r = random.Random(0)
    recipe = tmp_path / "sgpt.yaml"
    recipe.write_text(SGPT)
    calib = tmp_path / "calib.json"
    calib.write_text(json.dumps([[r.randrange(4, 128) for _ in range(24)] for _ in range(4)]))
    return {"recipe": recipe, "calib": calib, "out": tmp_path / "out"}


def _argv(checkpoint: Path, files: dict[str, Path], *extra: str) -> list[str]:
    return ["oneshot", str(files["recipe"]), "--model", str(checkpoint), "--calibration", str(files["calib"]),
            "--num-samples", "4", "--output", str(files["out"]), *extra]


def test_the_command_replaces_a_sharded_checkpoint_only_with_force(
        checkpoint: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    old = _sharded(files["out"])
    old_files = _tree(files["out"])
    capsys.readouterr()
    assert main(_argv(checkpoint, files)) == 2
    err = capsys.readouterr().err
    assert "not empty" in err and "add --force" in err and str(files["out"]) in err
    assert len(err.strip().splitlines()) == 1 and _tree(files["out"]) == old_files
    assert main(_argv(checkpoint, files, "--force")) == 0, capsys.readouterr().err
    names = {p.name for p in files["out"].iterdir()}
    assert "model.safetensors.index.json" not in names and not any(n.startswith("model-0") for n in names)
    assert {"model.safetensors", "recipe.yaml", "tokenizer_config.json"} <= names and old - names
    assert _siblings(files["out"]) == []


def test_the_command_refuses_a_folder_it_cannot_write_before_loading(
        checkpoint: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for folder, needle in _bad_folders(files["out"].parent, monkeypatch):
        files["out"] = folder
        assert main(_argv(checkpoint, files)) == 2
        out = capsys.readouterr()
        assert needle in out.err and "--output" in out.err and "estimate" not in out.out, out.err
        assert len(out.err.strip().splitlines()) == 1


def test_the_checkpoint_read_is_never_the_folder_written(
        checkpoint: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """``--output`` (and ``output_dir=`` with ``model=`` a folder) may neither be the checkpoint
    folder the model is read from nor a folder that holds it, even with ``--force`` /
    ``overwrite_output_dir=True``: replacing it would delete the checkpoint."""
    before = _tree(checkpoint)
    for out, word in ((checkpoint, "is the checkpoint folder"), (checkpoint.parent, "holds the checkpoint folder")):
        files["out"] = out
        assert main(_argv(checkpoint, files, "--force")) == 2
        err = capsys.readouterr().err
        assert word in err and "--output" in err and len(err.strip().splitlines()) == 1, err
        with pytest.raises(OutputDirError, match=f"output_dir .*{word}"):
            recipe_spec.oneshot(model=str(checkpoint), recipe=SGPT, dataset=[{"input_ids": [5, 6, 7, 8]}],
                                output_dir=str(out), overwrite_output_dir=True)
    assert _tree(checkpoint) == before
    files["out"] = checkpoint / "compressed"  # a new folder inside it takes nothing away
    assert main(_argv(checkpoint, files)) == 0
    assert (checkpoint / "compressed" / "recipe.yaml").is_file()
    assert {k: v for k, v in _tree(checkpoint).items() if not k.startswith("compressed")} == before
    shutil.rmtree(checkpoint / "compressed")  # the module's checkpoint as the other tests had it


def _folder_with(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _wait_for(marker: Path, proc: subprocess.Popen[str]) -> Path:
    """The temporary folder a subprocess is writing, once it says so in ``marker``."""
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), proc.communicate(timeout=30)
    temporary = Path(marker.read_text())
    assert temporary.is_dir() and any(temporary.iterdir())  # the signal comes mid-write
    return temporary


_SLOW_SAVE = """
import os, signal, sys, time
from pathlib import Path
import recipe_spec_torch.oneshot as host

signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal (a background job starts ignoring it)

def save(self, folder, text):
    Path(folder, "config.json").write_text("{}")
    Path(sys.argv[1] + ".part").write_text(folder)
    os.replace(sys.argv[1] + ".part", sys.argv[1])  # the test sends the signal now
    time.sleep(60)

host.TorchCalibrationHost.save = save
from recipe_spec.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_the_command_writes_leaves_no_temporary_folder(
        checkpoint: Path, files: dict[str, Path], tmp_path: Path, signum: int, code: int) -> None:
    _folder_with(files["out"], {"recipe.yaml": "the previous run's\n"})
    marker = tmp_path / "writing"
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_SAVE, str(marker), *_argv(checkpoint, files, "--force")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        temporary = _wait_for(marker, proc)
        assert temporary.parent == files["out"].parent
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert not temporary.exists() and _siblings(files["out"]) == []
    assert _tree(files["out"]) == {"recipe.yaml": b"the previous run's\n"}


_SLOW_API_SAVE = """
import os, sys, time
from pathlib import Path
import torch
import recipe_spec
import recipe_spec_torch.oneshot as host

def save(self, folder, text):
    Path(folder, "pytorch_model.bin").write_text("half")
    Path(sys.argv[1] + ".part").write_text(folder)
    os.replace(sys.argv[1] + ".part", sys.argv[1])
    time.sleep(60)

host.TorchCalibrationHost.save = save
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
recipe_spec.oneshot(model=model, recipe=sys.argv[3], output_dir=sys.argv[2], overwrite_output_dir=True)
"""


def test_sigterm_while_oneshot_writes_from_python_leaves_no_temporary_folder(tmp_path: Path) -> None:
    """A script with SIGTERM at its default: the temporary folder is removed, then the process
    ends by SIGTERM as it would have."""
    out = _folder_with(tmp_path / "out", {"recipe.yaml": "the previous run's\n"})
    marker = tmp_path / "writing"
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_API_SAVE, str(marker), str(out), MAGNITUDE],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        temporary = _wait_for(marker, proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGTERM, err
    assert not temporary.exists() and _siblings(out) == [] and _tree(out) == {"recipe.yaml": b"the previous run's\n"}
