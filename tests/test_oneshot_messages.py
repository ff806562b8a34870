"""What a new user of one-shot compression reads: the command's checks from the checkpoint's
headers before any framework import, ``--model`` given a file or a hub id, lint's estimate of
a smoothing modifier, progress counts and lines, the summary's columns, and a missing
optional package named with the command that installs it, before any weight changes.

Checkpoints are a ``LlamaConfig``'s (tests/test_oneshot_lint.py's header checkpoints: zeros,
only their headers read; or a tiny random model for the runs); nothing is downloaded."""

from __future__ import annotations

import io
import json
import logging
import random
import subprocess
import sys
from pathlib import Path

import pytest
from test_oneshot_lint import header_checkpoint

from recipe_spec.cli import main
from recipe_spec.diagnostics.packages import EXTRAS, MissingPackageError, install_command
from recipe_spec.oneshot import LayerReport, OneShotReport
from recipe_spec.oneshot.progress import OneShotProgress
from recipe_spec.oneshot.summary import summary

GPTQ_48 = """\
quant_stage:
  quant_modifiers:
    GPTQModifier:
      ignore: [lm_head]
      config_groups:
        group_0:
          targets: [Linear]
          weights: {num_bits: 4, type: int, symmetric: true, strategy: group, group_size: 48}
"""
SQ_GPTQ = """\
quant_stage:
  quant_modifiers:
    SmoothQuantModifier: {smoothing_strength: 0.8}
    GPTQModifier: {scheme: W8A8, targets: [Linear], ignore: [lm_head]}
"""
SGPT = """\
sparsity_stage:
  sparsity_modifiers:
    SparseGPTModifier: {sparsity: 0.5, mask_structure: "2:4", ignore: ["re:.*lm_head"]}
"""


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _samples(n: int = 4, vocab: int = 128) -> list[list[int]]:
    r = random.Random(0)
    return [[r.randrange(4, vocab) for _ in range(24)] for _ in range(n)]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "calib.json").write_text(json.dumps({"samples": _samples()}))
    for name, text in {"gptq48.yaml": GPTQ_48, "sq.yaml": SQ_GPTQ, "sgpt.yaml": SGPT}.items():
        (tmp_path / name).write_text(text)
    return {p.stem: p for p in tmp_path.iterdir()}


# -- the command's checks before any framework import ------------------------------------------

def test_a_group_size_that_does_not_divide_stops_the_command_before_torch(tmp_path: Path,
                                                                          files: dict[str, Path]) -> None:
    """group_size 48 on a model whose layers have 64 and 128 input columns: P012 located at the
    group's group_size, exit 1, and neither torch nor transformers imported (a subprocess)."""
    folder = header_checkpoint(tmp_path / "model", layers=4)
    code = ("import sys; from recipe_spec.cli import main; "
            f"rc = main(['oneshot', {str(files['gptq48'])!r}, '--model', {str(folder)!r}, "
            f"'--calibration', {str(files['calib'])!r}, '--output', {str(tmp_path / 'out')!r}]); "
            "print('imported:', sorted({'torch', 'transformers', 'compressed_tensors'} & set(sys.modules))); "
            "sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"{files['gptq48']}:8:91: P012" in done.stderr and "groups of 48 input columns" in done.stderr
    assert "Use group_size 32" in done.stderr  # 32 divides 64 and 128; 48 neither
    assert "imported: []" in done.stdout and "estimate" not in done.stdout
    assert not (tmp_path / "out").exists() and "Traceback" not in done.stderr


def test_model_given_as_a_file_names_its_folder(tmp_path: Path, files: dict[str, Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    folder = header_checkpoint(tmp_path / "model")
    weights = folder / "model.safetensors"
    code, _, err = run(["oneshot", str(files["sgpt"]), "--model", str(weights), "--calibration",
                        str(files["calib"])], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--model {weights}: this is a file; give the Hugging Face checkpoint folder" in err
    assert f"(--model {folder})" in err and "no such folder" not in err


@pytest.mark.parametrize("command", ["oneshot", "lint"])
def test_a_hub_id_says_to_download_it_first(files: dict[str, Path], command: str,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(files["calib"].parent)
    extra = ["--calibration", str(files["calib"])] if command == "oneshot" else []
    code, _, err = run([command, str(files["sgpt"]), "--model", "meta-llama/Llama-3.2-1B", *extra], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "meta-llama/Llama-3.2-1B" in err and "Hugging Face checkpoint folder" in err
    assert "huggingface-cli download meta-llama/Llama-3.2-1B --local-dir Llama-3.2-1B" in err
    assert "--model Llama-3.2-1B" in err


def test_lint_unknown_model_names_the_checkpoint_folder_form(files: dict[str, Path],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["lint", str(files["sgpt"]), "--model", "no_such_model"], capsys)
    assert code == 2 and "'no_such_model' is not a model spec" in err
    assert "or a Hugging Face checkpoint folder (config.json beside *.safetensors)" in err
    assert "huggingface-cli" not in err  # not a hub id: no download hint


def test_lint_says_what_smoothquant_does(tmp_path: Path, files: dict[str, Path],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """llm-compressor's default Llama SmoothQuant mappings: input_layernorm -> q, k, v and
    post_attention_layernorm -> gate, up: 2 mappings and 5 balance layers per decoder layer."""
    folder = header_checkpoint(tmp_path / "model", layers=4)
    code, out, err = run(["lint", str(files["sq"]), "--model", str(folder)], capsys)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("  SmoothQuantModifier"))
    assert "smoothing" in line and "8 mapping(s) over 20 balance layers" in line, line
    assert "0 target layers" not in out and "time: 0 FLOP" not in out


# -- the summary ------------------------------------------------------------------------------------

def test_summary_column_reads_zeros_for_quantized_layers() -> None:
    quantized = OneShotReport(order=[0], layers=[
        LayerReport("model.layers.0.mlp.up_proj", "GPTQModifier", 0.125, 0.3, 1, grid="W int4 group 32")])
    text = summary(quantized, "out")
    header = text.splitlines()[0].split()
    assert header[:3] == ["module", "modifier", "zeros"] and "sparsity" not in header
    assert "weights its grid rounds to 0" in text and "mean sparsity" not in text
    pruned = OneShotReport(order=[0], layers=[LayerReport("model.layers.0.mlp.up_proj", "SparseGPTModifier", 0.5)])
    text = summary(pruned, "out")
    assert text.splitlines()[0].split()[:3] == ["module", "modifier", "sparsity"]
    assert "zeros" not in text and "SparseGPTModifier: 1 layer(s), mean sparsity 0.5000" in text


# -- the progress reporter -----------------------------------------------------------------------

def _feed(p: OneShotProgress) -> None:
    p("GPTQModifier (sequential)", 0, 2)
    p("model.layers.0", 1, 2)
    p("model.layers.1", 2, 2)


def test_progress_lines_without_logging_configured() -> None:
    out = io.StringIO()
    _feed(OneShotProgress(out, bar=False))
    lines = out.getvalue().splitlines()
    assert lines[0] == "GPTQModifier (sequential): 2 layer(s)"
    assert lines[1].startswith("  [1/2] model.layers.0 (") and lines[2].startswith("  [2/2] model.layers.1 (")


def test_progress_goes_through_logging_when_configured(caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    with caplog.at_level(logging.INFO, logger="recipe_spec.oneshot"):
        _feed(OneShotProgress(out, bar=False))
    assert out.getvalue() == ""
    records = [r for r in caplog.records if r.name == "recipe_spec.oneshot"]
    assert [r.levelno for r in records] == [logging.INFO] * 3
    assert records[0].getMessage() == "GPTQModifier (sequential): 2 layer(s)"
    assert records[2].getMessage().startswith("[2/2] model.layers.1 (")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tqdm")
    out = _Terminal()
    _feed(OneShotProgress(out))
    assert "GPTQModifier (sequential)" in out.getvalue() and "2/2" in out.getvalue()
    monkeypatch.setitem(sys.modules, "tqdm", None)  # without tqdm: one line rewritten with \r
    out = _Terminal()
    _feed(OneShotProgress(out))
    text = out.getvalue()
    assert text.count("\r") == 3 and "[####################] 2/2 model.layers.1" in text and text.endswith("\n")


# -- a run on a tiny model -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny") / "model"
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                                   tie_word_embeddings=False)
    transformers.LlamaForCausalLM(cfg).float().save_pretrained(folder)
    return folder


def _model(folder: Path) -> object:
    import torch
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)


def test_smoothquant_progress_counts_the_four_layers(tiny: Path) -> None:
    import recipe_spec

    seen: list[tuple[str, int, int]] = []
    recipe = SQ_GPTQ.replace("    GPTQModifier: {scheme: W8A8, targets: [Linear], ignore: [lm_head]}\n", "")
    recipe_spec.oneshot(model=_model(tiny), recipe=recipe, dataset=[{"input_ids": s} for s in _samples()],
                        num_calibration_samples=4, progress=lambda *a: seen.append(a))
    assert seen == [("SmoothQuantModifier (sequential)", 0, 4)] + [
        (f"model.layers.{k}", k + 1, 4) for k in range(4)]


def test_python_oneshot_reports_progress_by_default(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import recipe_spec

    data = [{"input_ids": s} for s in _samples()]
    recipe_spec.oneshot(model=_model(tiny), recipe=SGPT, dataset=data, num_calibration_samples=4)
    err = capsys.readouterr().err
    assert "SparseGPTModifier (sequential): 4 layer(s)" in err and "[4/4] model.layers.3" in err
    recipe_spec.oneshot(model=_model(tiny), recipe=SGPT, dataset=data, num_calibration_samples=4, progress=False)
    assert "layer(s)" not in capsys.readouterr().err
    with pytest.raises(TypeError, match="progress must be a function"):
        recipe_spec.oneshot(model=_model(tiny), recipe=SGPT, dataset=data, progress="yes")


# -- missing optional packages --------------------------------------------------------------------

def test_install_commands_follow_pyproject() -> None:
    """Each extra's requirements in pyproject.toml, with the extras it includes written out
    (keras-hub's aside: it is installed with --no-deps beside Keras), are the ones its message
    installs; a missing module's message installs its own requirement."""
    import tomllib
    from conftest import REPO

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def flat(name: str) -> tuple[str, ...]:
        out: list[str] = []
        for r in extras[name]:
            if r.startswith("recipe-spec["):
                if name != "keras-hub":
                    out += [x for inner in r[len("recipe-spec["):-1].split(",") for x in flat(inner)]
            else:
                out.append(r)
        return tuple(dict.fromkeys(out))

    for name, (requirements, _) in EXTRAS.items():
        assert flat(name) == requirements, name
        assert all(f'"{r}"' in install_command(name) for r in requirements)
        assert f'".[{name}]"' in install_command(name) or "--no-deps" in install_command(name)
    assert "--index-url https://download.pytorch.org/whl/cpu" in install_command("oneshot")
    assert str(MissingPackageError("transformers", "X")).startswith(
        'X needs transformers, which is not installed: pip install "transformers>=4.40" (from a clone')


def test_cli_without_compressed_tensors_stops_before_loading(tiny: Path, tmp_path: Path, files: dict[str, Path],
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "compressed_tensors", None)
    code, out, err = run(["oneshot", str(files["sq"]), "--model", str(tiny), "--calibration", str(files["calib"]),
                          "--output", str(tmp_path / "out")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "quantization on PyTorch (compressed-tensors holds and saves the quantized layers) needs " \
           'compressed-tensors, which is not installed: pip install "compressed-tensors>=0.19,<0.20"' in err
    assert "internal error" not in err and "estimate" not in out and not (tmp_path / "out").exists()
    monkeypatch.setitem(sys.modules, "transformers", None)
    code, _, err = run(["oneshot", str(files["sgpt"]), "--model", str(tiny), "--calibration", str(files["calib"])],
                       capsys)
    assert code == 2 and 'needs transformers, which is not installed: pip install "transformers>=4.40"' in err


def test_python_oneshot_without_compressed_tensors_changes_no_weight(tiny: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """SmoothQuant then GPTQ: the smoothing would change the layer norms first; the missing
    package stops the run before either runs."""
    import torch

    import recipe_spec

    model = _model(tiny)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    monkeypatch.setitem(sys.modules, "compressed_tensors", None)
    with pytest.raises(MissingPackageError, match=r"needs compressed-tensors, which is not installed: "
                                                  r'pip install "compressed-tensors>=0\.19,<0\.20"') as info:
        recipe_spec.oneshot(model=model, recipe=SQ_GPTQ, dataset=[{"input_ids": s} for s in _samples()],
                            num_calibration_samples=4, progress=False)
    assert isinstance(info.value, ImportError) and info.value.package == "compressed_tensors"
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_keras_hub_loader_names_its_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from recipe_spec_keras.hub import load_causal_lm

    monkeypatch.setitem(sys.modules, "keras_hub", None)
    with pytest.raises(MissingPackageError, match=r'needs keras-hub, which is not installed: pip install '
                                                  r'--no-deps "keras-hub>=0\.32" "sentencepiece>=0\.2"'):
        load_causal_lm(tmp_path)


def test_a_dataset_name_the_machine_cannot_load_says_what_to_do(tiny: Path) -> None:
    pytest.importorskip("datasets")
    import dropin_common

    import recipe_spec

    with pytest.raises(ValueError, match=r"dataset='garage-bAInd/Open-Platypus' cannot be loaded here.*datasets cache.*"
                                         r"datasets.load_dataset"):
        recipe_spec.oneshot(model=_model(tiny), recipe=SGPT, dataset="open_platypus", progress=False,
                            tokenizer=dropin_common.tokenizer())


def test_the_missing_package_error_is_an_import_error() -> None:
    exc = MissingPackageError("datasets", "loading a hub dataset")
    assert isinstance(exc, ImportError) and exc.name == "datasets"
    assert str(exc).startswith('loading a hub dataset needs datasets, which is not installed: pip install "datasets>=2.19"')
