"""``recipe-spec oneshot RECIPE --model DIR --calibration FILE``: a tiny Llama written here from
a ``LlamaConfig`` (nothing downloaded), calibration files in each accepted form, the compressed
folder written atomically, the progress hook of the pipeline, and one-line errors for bad input
(never a traceback)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

from testdata import QUALITY  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec.cli import main  # noqa: E402
from recipe_spec.commands import InputError  # noqa: E402
from recipe_spec.commands_oneshot import read_calibration  # noqa: E402

SGPT = """\
sparsity_stage:
  sparsity_modifiers:
    SparseGPTModifier:
      sparsity: 0.5
      mask_structure: "2:4"
      ignore: ["re:.*lm_head"]
"""


def _config() -> transformers.LlamaConfig:
    return transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                                    tie_word_embeddings=False)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("ckpt") / "model"
    transformers.LlamaForCausalLM(_config()).float().save_pretrained(folder)
    return folder


def _samples(n: int = 8) -> list[list[int]]:
    r = random.Random(0)
    return [[r.randrange(4, 128) for _ in range(r.randrange(16, 40))] for _ in range(n)]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    recipe = tmp_path / "sgpt.yaml"
    recipe.write_text(SGPT)
    calib = tmp_path / "calib.json"
    calib.write_text(json.dumps({"samples": _samples()}))
    return {"recipe": recipe, "calib": calib, "out": tmp_path / "out"}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


# -- calibration files -----------------------------------------------------------------------------

def test_calibration_file_forms(tmp_path: Path) -> None:
    samples = _samples(3)
    forms = {
        "list.json": json.dumps(samples),
        "samples.json": json.dumps({"samples": samples, "seq_len": 40}),
        "dicts.json": json.dumps([{"input_ids": s} for s in samples]),
        "lines.jsonl": "\n".join(json.dumps({"input_ids": s}) for s in samples) + "\n",
    }
    for name, text in forms.items():
        (tmp_path / name).write_text(text)
        assert read_calibration(str(tmp_path / name), 128) == samples, name


def test_the_quality_anchors_calibration_file_reads() -> None:
    """llm-compressor's quality anchor's own calibration file (its first samples: tests/data)."""
    samples = read_calibration(str(QUALITY / "calibration.json"), 4096)
    assert samples == json.loads((QUALITY / "calibration.json").read_text())["samples"]
    assert len(samples) == 8 and {len(s) for s in samples} == {512}


@pytest.mark.parametrize(("text", "where"), [
    ('{"samples": [[1, 2], [3, 999]]}', "sample 1, token 1: id 999 is outside the model's vocabulary"),
    ('[[1, 2], [3, -1]]', "sample 1, token 1: -1 is not a token id"),
    ('{"input_ids": [1]}\n{"input_ids": [1, 2\n', ":2:"),
    ('{"input_ids": [1]}\n{"tokens": [1]}\n', "line 2: an object without 'input_ids'"),
    ("[[1, 2], ", ":1:10: not valid JSON"),
    ("[]", "expected a non-empty list"),
    ('{"data": []}', "without 'samples'"),
])
def test_bad_calibration_is_located(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(InputError, match=None) as info:
        read_calibration(str(path), 128)
    assert str(info.value).startswith(str(path)) and where in str(info.value), str(info.value)


# -- the command ----------------------------------------------------------------------------------

def test_oneshot_writes_a_pruned_folder(checkpoint: Path, files: dict[str, Path],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["oneshot", str(files["recipe"]), "--model", str(checkpoint), "--calibration",
                          str(files["calib"]), "--num-samples", "8", "--output", str(files["out"])], capsys)
    assert code == 0, err
    assert {"config.json", "model.safetensors", "recipe.yaml"} <= {p.name for p in files["out"].iterdir()}
    assert [p.name for p in files["out"].parent.iterdir() if p.name.startswith(".")] == []
    weights = safetensors_numpy.load_file(str(files["out"] / "model.safetensors"))
    q = weights["model.layers.1.self_attn.q_proj.weight"]
    assert ((q.reshape(q.shape[0], -1, 4) == 0).sum(-1) >= 2).all()
    assert (weights["lm_head.weight"] != 0).all()
    # progress: plain lines when stderr is not a terminal; the per-layer summary on stdout
    assert "SparseGPTModifier (sequential): 2 layer(s)" in err and "[2/2] model.layers.1" in err
    assert "model.layers.0.mlp.down_proj" in out and "SparseGPTModifier: 14 layer(s), mean sparsity 0.5000" in out
    assert "one-shot estimate for" in out and "8 calibration sample(s) fed" in out
    assert "Traceback" not in err


@pytest.mark.parametrize("precision, dtype", [(None, "bfloat16"), ("float32", "float32")])
def test_a_bfloat16_checkpoint_is_compressed_in_its_own_dtype(tmp_path: Path, files: dict[str, Path],
                                                              capsys: pytest.CaptureFixture[str], precision: str | None,
                                                              dtype: str) -> None:
    """As llm-compressor loads it (``dtype="auto"``): a bfloat16 checkpoint stays bfloat16 (half
    the memory of float32), unless ``--precision`` says otherwise."""
    from safetensors import safe_open

    torch.manual_seed(0)
    folder = tmp_path / "bf16"
    transformers.LlamaForCausalLM(_config()).to(torch.bfloat16).save_pretrained(folder)
    argv = ["oneshot", str(files["recipe"]), "--model", str(folder), "--calibration", str(files["calib"]),
            "--num-samples", "4", "--output", str(files["out"])]
    code, _, err = run(argv + (["--precision", precision] if precision else []), capsys)
    assert code == 0, err
    with safe_open(str(files["out"] / "model.safetensors"), "pt") as f:
        q = f.get_tensor("model.layers.1.self_attn.q_proj.weight")
    assert str(q.dtype) == f"torch.{dtype}"
    assert ((q.reshape(q.shape[0], -1, 4) == 0).sum(-1) >= 2).all()


def test_output_is_not_overwritten_without_force(checkpoint: Path, files: dict[str, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    files["out"].mkdir()
    (files["out"] / "keep.txt").write_text("mine")
    argv = ["oneshot", str(files["recipe"]), "--model", str(checkpoint), "--calibration", str(files["calib"]),
            "--num-samples", "2", "--output", str(files["out"])]
    code, _, err = run(argv, capsys)
    assert code == 2 and "not empty" in err and "--force" in err and len(err.strip().splitlines()) == 1
    assert (files["out"] / "keep.txt").read_text() == "mine"
    code, _, err = run([*argv, "--force", "--pipeline", "sequential"], capsys)
    assert code == 0, err
    assert not (files["out"] / "keep.txt").exists() and (files["out"] / "recipe.yaml").read_text() == SGPT


@pytest.mark.parametrize(("recipe", "code", "needle"), [
    ("sparsity_stage:\n  sparsity_modifiers:\n    SparseGPTModifier:\n      sparsity: 1.5\n", 1, ":4:"),
    ("SparseGPTModifier:\n  sparsity: 0.5\n", 1, "S001"),
    ("sparsity_stage:\n  sparsity_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.3\n"
     "      mask_structure: '2:4'\n", 1, "M006"),
    ("sparsity_stage:\n  sparsity_modifiers:\n    AutoRoundModifier: {scheme: FP8_BLOCK, iters: 10}\n", 1, "B001"),
    ("q_stage:\n  q_modifiers:\n    GPTQModifier: {scheme: W4A16, kv_cache_scheme: {num_bits: 8}}\n", 1, "B001"),
])
def test_recipe_errors_stop_before_the_model_is_loaded(checkpoint: Path, files: dict[str, Path], recipe: str,
                                                       code: int, needle: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    files["recipe"].write_text(recipe)
    got, out, err = run(["oneshot", str(files["recipe"]), "--model", str(checkpoint), "--calibration",
                         str(files["calib"]), "--output", str(files["out"])], capsys)
    assert got == code and needle in err and str(files["recipe"]) in err, err
    assert "Traceback" not in err and not files["out"].exists() and "estimate" not in out


@pytest.mark.parametrize(("change", "code", "needle"), [
    ({"model": "missing"}, 2, "no such folder"),
    ({"calib": "missing.json"}, 2, "no such file"),
    ({"calib_text": "[[1, 2], "}, 1, "not valid JSON"),
    ({"calib_text": "[[1, 500]]"}, 1, "outside the model's vocabulary"),
    ({"targets": "LlamaLayer"}, 2, "LlamaDecoderLayer"),
])
def test_bad_input_is_one_line(checkpoint: Path, files: dict[str, Path], change: dict[str, str], code: int,
                               needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    model = str(checkpoint if "model" not in change else files["out"].parent / change["model"])
    calib = str(files["calib"] if "calib" not in change else files["out"].parent / change["calib"])
    if "calib_text" in change:
        files["calib"].write_text(change["calib_text"])
    extra = ["--sequential-targets", change["targets"]] if "targets" in change else []
    got, _, err = run(["oneshot", str(files["recipe"]), "--model", model, "--calibration", calib, *extra], capsys)
    assert got == code and needle in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_nm_that_does_not_divide_is_refused_from_the_headers(tmp_path: Path, files: dict[str, Path],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from test_oneshot_lint import header_checkpoint

    folder = header_checkpoint(tmp_path / "odd", intermediate=130)  # zeros: never loaded
    code, out, err = run(["oneshot", str(files["recipe"]), "--model", str(folder), "--calibration",
                          str(files["calib"])], capsys)
    assert code == 1 and "P004" in err and "model.layers.0.mlp.down_proj (in 130)" in err


def test_command_imports_no_framework_until_it_runs() -> None:
    code = ("import sys; from recipe_spec.cli import build_parser; import recipe_spec.commands_oneshot; "
            "build_parser().parse_args(['oneshot', 'r.yaml', '--model', 'm', '--calibration', 'c']); "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


# -- the progress hook ------------------------------------------------------------------------------

def test_progress_hook_of_the_pipeline(checkpoint: Path) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    seen: list[tuple[str, int, int]] = []
    recipe_spec.oneshot(model=model, recipe=SGPT, dataset=[{"input_ids": s} for s in _samples(4)],
                        num_calibration_samples=4, shuffle_calibration_samples=False,
                        progress=lambda what, done, total: seen.append((what, done, total)))
    assert seen == [("SparseGPTModifier (sequential)", 0, 2), ("model.layers.0", 1, 2), ("model.layers.1", 2, 2)]
    seen.clear()
    magnitude = ("s_stage:\n  s_modifiers:\n    MagnitudePruningModifier:\n      targets: ['re:.*q_proj$']\n"
                 "      init_sparsity: 0.5\n      final_sparsity: 0.5\n")
    recipe_spec.oneshot(model=model, recipe=magnitude, progress=lambda *a: seen.append(a))
    assert seen == [("MagnitudePruningModifier (datafree)", 0, 2), ("model.layers.0.self_attn.q_proj", 1, 2),
                    ("model.layers.1.self_attn.q_proj", 2, 2)]
    assert np.isclose((model.model.layers[0].self_attn.q_proj.weight == 0).float().mean().item(), 0.5)


def test_summary_reports_a_cholesky_retry() -> None:
    from recipe_spec.commands_oneshot import _summary
    from recipe_spec.oneshot import LayerReport, OneShotReport

    report = OneShotReport(order=[0, 1], layers=[
        LayerReport("model.layers.0.mlp.down_proj", "SparseGPTModifier", 0.5, 0.25, 2,
                    "cholesky failed at dampening_frac 0.01; used 0.1"),
        LayerReport("model.layers.0.mlp.up_proj", "SparseGPTModifier", 0.5, 0.5, 2)])
    text = _summary(report, "out")
    assert "cholesky failed at dampening_frac 0.01; used 0.1" in text.splitlines()[1]
    assert "1 layer(s) needed more dampening than asked" in text and text.endswith("wrote out")


# -- quantization --------------------------------------------------------------------------------

AWQ_W4 = """\
quant_stage:
  quant_modifiers:
    AWQModifier: {duo_scaling: true, n_grid: 6}
    QuantizationModifier:
      ignore: [lm_head]
      config_groups:
        group_0:
          targets: [Linear]
          weights: {num_bits: 4, type: int, symmetric: true, strategy: group, group_size: 32}
"""


def test_a_quantization_recipe_writes_a_folder_transformers_loads(
        checkpoint: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """AWQ then W4 group 32 on the checkpoint folder: the summary shows each mapping's ratio and
    losses and each layer's grid; the compressed-tensors folder loads back in transformers,
    every quantized weight on its grid (w / scale whole numbers in [-8, 7])."""
    files["recipe"].write_text(AWQ_W4)
    code, out, err = run(["oneshot", str(files["recipe"]), "--model", str(checkpoint), "--calibration",
                          str(files["calib"]), "--num-samples", "8", "--output", str(files["out"])], capsys)
    assert code == 0, err
    assert "model.layers.1.post_attention_layernorm  AWQModifier" in out and "8 mapping(s) smoothed" in out
    assert "ratio " in out and "loss " in out
    assert "model.layers.0.self_attn.q_proj" in out and "W int4 group 32" in out
    assert "QuantizationModifier: 14 layer(s) quantized" in out and "mean sparsity" not in out
    config = json.loads((files["out"] / "config.json").read_text())["quantization_config"]
    assert config["format"] == "pack-quantized" and config["ignore"] == ["lm_head"]
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(files["out"]), dtype=torch.float32)
    with torch.no_grad():
        logits = loaded(input_ids=torch.tensor([_samples(1)[0]])).logits
    assert bool(torch.isfinite(logits).all())
    for name, module in loaded.named_modules():
        if name.endswith("proj"):
            w = module.weight.detach()
            steps = w / module.weight_scale.detach().repeat_interleave(32, dim=1)
            assert float((steps - steps.round()).abs().max()) < 1e-3, name
            assert float(steps.min()) > -8.001 and float(steps.max()) < 7.001, name
    assert loaded.lm_head.weight.dtype == torch.float32 and not hasattr(loaded.lm_head, "weight_scale")


def test_oneshot_compat_reads_the_combined_awq_form(
        checkpoint: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """``--compat llmcompressor==0.10`` runs AWQModifier's combined form (and says so); without
    it the newest release's rules refuse it, located."""
    files["recipe"].write_text(AWQ_W4.replace("    QuantizationModifier:\n", "").replace(
        "AWQModifier: {duo_scaling: true, n_grid: 6}", "AWQModifier:\n      duo_scaling: true"))
    code, out, err = run(["oneshot", str(files["recipe"]), "--model", str(checkpoint), "--calibration",
                          str(files["calib"]), "--num-samples", "4"], capsys)
    assert code == 1 and "C001" in err and ":5:7:" in err
    code, out, err = run(["oneshot", str(files["recipe"]), "--model", str(checkpoint), "--calibration",
                          str(files["calib"]), "--num-samples", "4", "--compat", "llmcompressor==0.10"], capsys)
    assert code == 0, err
    assert "note: AWQModifier" in out and "combined form of llm-compressor 0.10" in out
    assert "AWQModifier: 14 layer(s) quantized" in out
    code, _, err = run(["oneshot", str(files["recipe"]), "--model", str(checkpoint), "--calibration",
                        str(files["calib"]), "--compat", "sparseml==1.8"], capsys)
    assert code == 2 and "--compat" in err


def test_nested_repetition_and_refused_patterns(checkpoint: Path, files: dict[str, Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Patterns with nested repetition (tests/test_oneshot_patterns.py) in targets and ignore:
    the estimate and the run finish at once; a pattern the matcher cannot run stops the
    command before the estimate, located, even under ``# noqa: P005``; in
    ``--sequential-targets``, a usage error."""
    from test_oneshot_patterns import HOSTILE, deadline
    from test_oneshot_patterns import SGPT as HOSTILE_SGPT

    files["recipe"].write_text(HOSTILE_SGPT)
    argv = ["oneshot", str(files["recipe"]), "--model", str(checkpoint), "--calibration", str(files["calib"]),
            "--num-samples", "4", "--output", str(files["out"]), "--force"]
    with deadline(300):
        code, out, err = run(argv, capsys)
    assert code == 0, err
    assert "one-shot estimate for" in out and "14 target layers" in out
    refused = HOSTILE_SGPT.replace(f"'{HOSTILE[1]}'", "'re:(?!model).*'").splitlines()
    for text in (refused, [*refused[:6], refused[6] + "  # noqa: P005"]):
        files["recipe"].write_text("\n".join(text) + "\n")
        code, out, err = run(argv, capsys)
        assert code == 1 and ":7:45: P005" in err and "estimate" not in out, err
        assert "Traceback" not in err
    files["recipe"].write_text(HOSTILE_SGPT)
    with deadline(60):
        code, _, err = run([*argv, "--sequential-targets", r"re:(model)\.\1"], capsys)
    assert code == 2 and "backreference" in err and len(err.strip().splitlines()) == 1, err
