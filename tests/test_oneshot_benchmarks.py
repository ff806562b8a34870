"""Smoke runs of the one-shot benchmarks against llm-compressor (``benchmarks/oneshot_quality.py``
on a small anchor of the quality anchor's form, ``benchmarks/oneshot_speed.py`` on its random Llama), each cut
to a few samples, and the SparseGPT solver's one-thread column loop: the same bits as with
every thread, and the thread count given back."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from testdata import QUALITY, llmcompressor_python

from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec.oneshot.shared.obs import SolverError, sparsegpt_prune

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> str:
    out = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _small_anchor(folder: Path) -> Path:
    """An anchor folder of the quality benchmark's form: the anchor's own recipes, results,
    perplexity script and first calibration samples (tests/data), with a small random Llama of
    the anchor's vocabulary in place of the trained one and two evaluation windows."""
    import torch
    import transformers

    shutil.copytree(QUALITY, folder)
    config = transformers.LlamaConfig(vocab_size=4096, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(str(folder / "model"))
    windows = torch.randint(0, 4096, (2, 512), generator=torch.Generator().manual_seed(1)).tolist()
    (folder / "eval_public.json").write_text(json.dumps({"seq_len": 512, "windows": windows}))
    return folder


@pytest.mark.slow
def test_quality_benchmark_smoke(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    anchor = _small_anchor(tmp_path / "anchor")
    out = _run("benchmarks/oneshot_quality.py", "--settings", "sparsegpt_2of4", "--samples", "4",
               "--limit-windows", "2", "--anchor", str(anchor))
    row = next(line for line in out.splitlines() if line.startswith("sparsegpt_2of4"))
    assert row.split()[-1] == "0.5000", out  # every decoder Linear exactly 2:4
    assert "quick run: 4 samples, 2 eval windows" in out


@pytest.mark.slow
def test_fp4_quality_benchmark_smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our side alone (no ``$LLMCOMPRESSOR_PYTHON``): a perplexity per setting, no ratio."""
    pytest.importorskip("transformers")
    pytest.importorskip("compressed_tensors")
    monkeypatch.delenv("LLMCOMPRESSOR_PYTHON", raising=False)
    anchor = _small_anchor(tmp_path / "anchor")
    out = _run("benchmarks/oneshot_quality_fp4.py", "--settings", "rtn_nvfp4a16,rtn_nvfp4", "--samples", "2",
               "--limit-windows", "1", "--anchor", str(anchor))
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("rtn_")}
    assert set(rows) == {"rtn_nvfp4a16", "rtn_nvfp4"}, out
    assert all(float(r[1]) > 1.0 and r[2] == "nan" and r[3] == "-" for r in rows.values()), out
    assert "not run, no $LLMCOMPRESSOR_PYTHON" in out and "quick run: 2 samples, 1 eval windows" in out


@pytest.mark.slow
def test_speed_benchmark_smoke() -> None:
    """Each setting in the quick mode, against the speed README's recorded figures: Wanda prunes
    half of every weight, GPTQ W4A16 puts some weights on the grid's 0 (not half), round to
    nearest leaves them as they are (llm-compressor keeps the float weights), and a setting the
    README has no figure for says so."""
    pytest.importorskip("transformers")
    pytest.importorskip("compressed_tensors")
    out = _run("benchmarks/oneshot_speed.py", "--recipes", "wanda50,gptq_w4a16,rtn_w8a8", "--samples", "2",
               "--runs", "1", "--without-llmcompressor", "--keras", "")
    assert "README's recorded ones" in out
    rows = {name: [line.split() for line in out.splitlines() if line.startswith(name + " ")]
            for name in ("wanda50", "gptq_w4a16", "rtn_w8a8")}
    wanda, gptq, rtn = rows["wanda50"], rows["gptq_w4a16"], rows["rtn_w8a8"]
    assert wanda[0][1] == "ours" and wanda[0][-1] == "0.5000" and wanda[-1][1] == "ours/recorded", out
    assert gptq[0][1] == "ours" and 0.0 < float(gptq[0][-1]) < 0.5 and gptq[1][3:5] == ["52.9", "-"], out
    assert gptq[-1][1] == "ours/recorded", out
    assert rtn[0][1] == "ours" and rtn[0][-1] == "0.0000" and rtn[0][3] == "0.00/0.00", out
    assert "(none recorded)" in " ".join(rtn[-1]), out
    # the estimate recipe-spec oneshot prints, beside the measured median, with its ratio
    estimates = {line.split()[2]: line.split() for line in out.splitlines()
                 if line.startswith("estimate of ") and "estimate s" not in line}
    assert set(estimates) == {"wanda50", "gptq_w4a16", "rtn_w8a8"}, out
    assert float(estimates["gptq_w4a16"][3]) > 0 and float(estimates["gptq_w4a16"][-1]) > 0, out


@pytest.mark.slow
def test_speed_benchmark_runs_the_keras_hub_twin_on_jax_and_tensorflow() -> None:
    """The keras-hub twin of the speed anchor, fed keras-hub's own inputs, on each Keras
    backend: the same share of GPTQ's grid zeros as the PyTorch run (the same grid points), its
    ratio to the PyTorch run, and the estimate from NumPy's rates beside its time."""
    pytest.importorskip("transformers")
    pytest.importorskip("compressed_tensors")
    pytest.importorskip("keras_hub")
    pytest.importorskip("jax")
    out = _run("benchmarks/oneshot_speed.py", "--recipes", "gptq_w4a16", "--samples", "2", "--runs", "1",
               "--without-llmcompressor", "--keras", "jax,tensorflow")
    rows = {(r[0], r[1]): r for r in (line.split() for line in out.splitlines()) if len(r) > 2}
    ours = rows[("gptq_w4a16", "ours")]
    for backend in ("jax", "tensorflow"):
        keras_row = rows[("gptq_w4a16", f"keras-{backend}")]
        assert 0.0 < float(keras_row[-1]) < 0.5, out
        assert abs(float(keras_row[-1]) - float(ours[-1])) < 0.01, out  # grid zeros of the same run, ±rounding
        assert float(rows[("gptq_w4a16", "keras/ours")][2]) > 0, out
        estimate = next(line.split() for line in out.splitlines()
                        if line.startswith(f"estimate of  gptq_w4a16:{backend} "))
        assert float(estimate[3]) > 0 and float(estimate[-1]) > 0, out


@pytest.mark.slow
@pytest.mark.skipif(llmcompressor_python() is None, reason="needs $LLMCOMPRESSOR_PYTHON: a Python with llm-compressor 0.14")
def test_speed_benchmark_against_llm_compressor() -> None:
    """The quantization settings with llm-compressor run in the same call: GPTQ leaves the same
    share of zeros on both sides, round to nearest none, and the ratio of the time per layer
    is not given where no layer ran (data-free round to nearest)."""
    pytest.importorskip("transformers")
    pytest.importorskip("compressed_tensors")
    out = _run("benchmarks/oneshot_speed.py", "--recipes", "gptq_w4a16,rtn_w8a8", "--samples", "2",
               "--runs", "1")
    assert "llm-compressor measured in this run" in out
    table = {(r[0], r[1]): r for r in (line.split() for line in out.splitlines()) if len(r) > 2}
    assert table[("gptq_w4a16", "ours")][-1] == table[("gptq_w4a16", "llm-compressor")][-1], out
    assert table[("rtn_w8a8", "ours")][-1] == table[("rtn_w8a8", "llm-compressor")][-1] == "0.0000", out
    ratio = table[("rtn_w8a8", "ours/theirs")]
    assert ratio[3] == "-" and float(ratio[2]) > 0, out
    assert float(table[("gptq_w4a16", "ours/theirs")][3]) > 0, out


def test_the_serial_column_loop_gives_the_same_bits_and_restores_threads() -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec_torch.masks import TORCH_OPS

    rng = np.random.default_rng(3)
    x = rng.standard_normal((600, 160)).astype(np.float32)
    W = torch.from_numpy(rng.standard_normal((160, 160)).astype(np.float32))
    H = torch.from_numpy(x.T @ x / 600)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with TORCH_OPS.serial(W):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        serial = sparsegpt_prune(TORCH_OPS, W, H, sparsity=0.5, block_size=64)
        assert torch.get_num_threads() == 2

        class Threaded(type(TORCH_OPS)):  # type: ignore[misc]
            def serial(self, like: object) -> object:
                import contextlib
                return contextlib.nullcontext()

        threaded = sparsegpt_prune(Threaded(), W, H, sparsity=0.5, block_size=64)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(serial.weight, threaded.weight) and serial.loss == threaded.loss


def test_finite_checks_take_an_overflowing_sum_for_what_it_is() -> None:
    """Finite weights whose sum overflows float32 are not NaN; a real inf is refused."""
    w = np.full((4, 8), 3e38, dtype=np.float32)
    h = np.eye(8, dtype=np.float32)
    with np.errstate(over="ignore"):  # the scores square the weights
        result = sparsegpt_prune(NUMPY_OPS, w, h, sparsity=0.5)
    assert np.isfinite(np.asarray(result.weight)).all()
    w[0, 0] = np.inf
    with pytest.raises(SolverError, match="1 NaN or infinite"):
        sparsegpt_prune(NUMPY_OPS, w, h, sparsity=0.5)


def test_numpy_copies_benchmark_smoke() -> None:
    """``benchmarks/numpy_copies.py`` checks each new form equal to the old before timing it and
    prints one row per case with its ratio."""
    pytest.importorskip("keras")
    out = _run("benchmarks/numpy_copies.py", "--repeat", "1", "--anchor-only")
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    assert len(rows) in (4, 5) and all(float(r[-1]) > 0 for r in rows), out


def test_keras_solves_benchmark_smoke() -> None:
    """``benchmarks/keras_solves.py`` solves one layer on NumPy and on Keras's tensors, checks
    the two agree and prints one row per solve with the ratio of their times."""
    pytest.importorskip("keras")
    out = _run("benchmarks/keras_solves.py", "--quick", "--repeat", "1", "--backends", "tensorflow")
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    assert [r[0] for r in rows] == ["tensorflow", "tensorflow"], out
    assert {r[5] for r in rows} == {"sparsegpt50", "gptq_w4a16"}, out
    assert all(float(r[-2]) > 0 and float(r[-1]) >= 0.99 for r in rows), out
