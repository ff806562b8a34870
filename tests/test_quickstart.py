"""docs/quickstart-oneshot.md runs as written: its ```python and ```bash blocks, in order, in an
empty folder with no network (step 0 builds the model and tokenizer), each Python block in a
fresh namespace (one interpreter per section, so that torch is imported once); a block under a ``<!-- not run ... -->`` comment is
left out (installs, vLLM, the datasets variant, which runs here when datasets is installed).
The PyTorch part ends with a reloaded compressed-tensors model, the Keras part with a reloaded
``model.keras`` whose layers are Keras's int4 ones."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

PAGE = REPO / "docs" / "quickstart-oneshot.md"
_BLOCK = re.compile(r"(?P<skip><!-- not run[^>]*-->\n)?```(?P<lang>python|bash)\n(?P<body>.*?)^```$", re.S | re.M)

pytestmark = pytest.mark.slow


def blocks(section: str) -> list[tuple[str, str, bool]]:
    """``(language, code, run)`` of each block of the ``## section`` part of the page."""
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"{PAGE.name} has no section {section!r}"
    return [(m["lang"], m["body"], m["skip"] is None) for m in _BLOCK.finditer(match.group(1))]


def _env(folder: Path) -> dict[str, str]:
    """The reader's shell: ``python`` and ``recipe-spec`` are this interpreter's, recipe-spec
    this checkout's, no network."""
    bin_dir = folder / ".bin"
    bin_dir.mkdir(exist_ok=True)
    for name, command in {"python": f'exec "{sys.executable}" "$@"',
                          "recipe-spec": f'exec "{sys.executable}" -m recipe_spec "$@"'}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{command}\n")
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / ".shim")] if (REPO / ".shim").is_dir() else [str(REPO)]
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", PYTHONPATH=os.pathsep.join(paths + [env.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", KERAS_BACKEND=env.get("KERAS_BACKEND", "tensorflow"))
    return env


#: Runs the blocks given as JSON on stdin in order, in the current folder: each Python block
#: in a fresh namespace (imports paid once per section), each bash block in bash; the output
#: of each between markers.
_DRIVER = """
import contextlib, io, json, subprocess, sys, traceback
for i, (lang, code) in enumerate(json.load(sys.stdin)):
    print(f"@@block {i}", flush=True)
    if lang == "python":
        try:
            exec(compile(code, f"block {i}", "exec"), {"__name__": "__main__"})
        except BaseException:
            traceback.print_exc()
            print(f"@@failed {i}", flush=True)
            sys.exit(1)
    else:
        sys.stdout.flush()
        if subprocess.run(["bash", "-euo", "pipefail", "-c", code]).returncode:
            print(f"@@failed {i}", flush=True)
            sys.exit(1)
    sys.stdout.flush()
"""


def run_blocks(chosen: list[tuple[str, str]], folder: Path, label: str) -> list[str]:
    """Run ``chosen`` (language, code) blocks in order in ``folder``; each block's output."""
    done = subprocess.run([sys.executable, "-c", _DRIVER], input=json.dumps(chosen), cwd=folder,
                          env=_env(folder), capture_output=True, text=True, timeout=900)
    failed = re.search(r"@@failed (\d+)", done.stdout)
    if done.returncode or failed:
        which = int(failed.group(1)) if failed else -1
        code = chosen[which][1] if failed else ""
        raise AssertionError(f"{label} block {which} failed:\n{code}\n--- stdout:\n{done.stdout[-2000:]}"
                             f"\n--- stderr:\n{done.stderr[-3000:]}")
    return re.split(r"^@@block \d+\n", done.stdout, flags=re.M)[1:]


def run_block(lang: str, code: str, folder: Path, label: str) -> str:
    return run_blocks([(lang, code)], folder, label)[0]


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The PyTorch part of the page, run once: the folder and each block's output."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("compressed_tensors")
    pytest.importorskip("tokenizers")
    folder = tmp_path_factory.mktemp("quickstart")
    return folder, run_blocks([(lang, code) for lang, code, run in blocks("PyTorch") if run], folder, "PyTorch")


def test_the_install_commands_keep_torch_on_its_cpu_build() -> None:
    install = [code for lang, code, run in blocks("Install") if lang == "bash" and not run]
    assert len(install) == 1
    lines = [line for line in install[0].splitlines() if line.startswith("pip ")]
    assert lines == ["pip install -c constraints.txt torch --index-url https://download.pytorch.org/whl/cpu",
                     'pip install -c constraints.txt -e ".[oneshot]"']
    assert "recipe-spec[" not in PAGE.read_text()  # not on the registry: installed from a clone


def test_the_pytorch_quick_start_ends_with_a_reloaded_compressed_model(
        torch_run: tuple[Path, list[str]]) -> None:
    folder, outputs = torch_run
    import torch
    import transformers

    for out in ("tiny-llama-W4A16", "tiny-llama-W4A16-py"):
        config = json.loads((folder / out / "config.json").read_text())
        quant = config["quantization_config"]
        assert quant["quant_method"] == "compressed-tensors" and quant["format"] == "pack-quantized"
        assert quant["config_groups"]["group_0"]["weights"]["group_size"] == 128 and quant["ignore"] == ["lm_head"]
        assert (folder / out / "tokenizer.json").is_file() and (folder / out / "recipe.yaml").is_file()
        model = transformers.AutoModelForCausalLM.from_pretrained(str(folder / out), dtype=torch.float32)
        assert getattr(model.config, "quantization_config", None) is not None
        scale = model.model.layers[0].self_attn.q_proj.weight_scale
        assert tuple(scale.shape) == (128, 1)  # 128 rows, in_features 128 / group 128
    # step 1 wrote one sample per line of text; step 5 printed the reloaded config; step 6 two perplexities
    samples = json.loads((folder / "calibration.json").read_text())["samples"]
    assert len(samples) == 64 and all(0 < len(s) <= 512 for s in samples)
    assert "compressed-tensors" in "\n".join(outputs) or "CompressedTensorsConfig" in "\n".join(outputs)
    ppl = [float(x) for x in re.findall(r"perplexity ([0-9.]+)", "\n".join(outputs))]
    assert len(ppl) == 2 and all(10 < p < 3000 for p in ppl), ppl  # a random model: about its vocabulary (300)


def test_the_datasets_variant_runs_when_datasets_is_installed(torch_run: tuple[Path, list[str]]) -> None:
    pytest.importorskip("datasets")
    folder, _ = torch_run
    code = next(code for lang, code, run in blocks("PyTorch") if not run and "datasets" in code)
    out = run_block("python", code, folder, "the datasets block")
    assert "input_ids" in out and "num_rows: 64" in out


def test_the_keras_quick_start_ends_with_a_reloaded_int4_model(torch_run: tuple[Path, list[str]]) -> None:
    pytest.importorskip("keras")
    pytest.importorskip("keras_hub")
    folder, _ = torch_run
    outputs = run_blocks([(lang, code) for lang, code, run in blocks("Keras 3") if run], folder, "Keras")
    assert (folder / "tiny-llama-keras-W4A16" / "model.keras").is_file()
    text = "\n".join(outputs)
    assert "int4" in text
    ppl = [float(x) for x in re.findall(r"perplexity ([0-9.]+)", text)]
    assert len(ppl) == 1 and 10 < ppl[0] < 3000, text
