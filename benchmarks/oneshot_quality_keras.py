"""One-shot pruning and quantization quality on a keras-hub Llama against llm-compressor 0.14 on
its own quality anchor.

The anchor (``shared/conformance/llmcompressor/quality/``, see its README) is a small trained
Llama (5.5M parameters, 4 decoder layers), 256 calibration windows of 512 tokens, 403 public
evaluation windows, the recipe of each setting and llm-compressor's own results. For each
pruning setting this loads ``model/`` fresh (fp32) as a keras-hub ``LlamaCausalLM``
(:func:`recipe_spec_keras.hub.load_causal_lm`: ``from_preset`` on the folder, with the
checkpoint's ``rms_norm_eps``) in a process of its own on the chosen Keras backend, runs
``recipe_spec.oneshot`` with the setting's recipe unchanged and the 256 calibration samples in
order (``shuffle_calibration_samples=False``, batch 1), and scores the model as the anchor's
``perplexity.py`` does: each 512-token window on its own (padding mask all ones), logits from
the backbone and its output projection, the NLL of tokens 2..512 summed in float64,
``exp(sum / targets)``. It prints, per setting: our perplexity, llm-compressor's
(``results.json``), their ratio, the oneshot wall time (ours, llm-compressor's), the peak
resident memory of the process after oneshot (model load + compression, evaluation excluded,
as in ``results.json``) and the sparsity of the 28 decoder Linear weights (quantized: the share
of the weights the Keras layers compute with that are 0).

The quantization settings (``gptq_w4a16_g128``, ``rtn_w4a16_g128``, ``rtn_w8a8``) score the
model as ``oneshot`` leaves it: Keras's own quantized layers (``int4`` group 128 holding the
run's integers for W4A16; ``int8`` for W8A8). **W8A8's input activations are quantized on
Keras's own int8 grid**, not compressed-tensors': Keras's ``int8`` layer quantizes each token's
inputs with its ``AbsMaxQuantizer`` (scale ``127 / absmax``, range ±127), where
compressed-tensors (llm-compressor's forward pass) uses ``absmax / 127.5`` and -128..127; the
weights are on the same grid in both.

    python benchmarks/oneshot_quality_keras.py [--keras-backend tensorflow|jax|torch]
        [--settings dense,sparsegpt_2of4] [--threads 2] [--blas-threads 1] [--limit-windows N]
        [--samples N] [--torch-dense] [--torch-baseline] [--check]

``--threads`` is the Keras backend's thread count; ``--blas-threads`` NumPy's BLAS threads (the
solvers and the calibration statistics run on NumPy; ``0`` leaves BLAS at its default). On a
CPU shared with other work, a multi-threaded BLAS beside the backend's own threads waits on
descheduled threads: one BLAS thread is much sooner there (its float rounding differs slightly).

``--limit-windows N`` scores the first N evaluation windows only and ``--samples N`` calibrates
on the first N samples only (a quick run: llm-compressor's perplexity is then not comparable and
the ratio is left out). ``--torch-dense`` also scores the dense checkpoint with the anchor's own
``perplexity.py`` on PyTorch (the same windows) and prints the ratio of the Keras dense
perplexity to it. ``--torch-baseline`` also runs recipe-spec on the PyTorch model of the same
checkpoint (the same recipe, samples and windows; scored by ``perplexity.py``) and prints, per
setting, the Keras/PyTorch perplexity ratio and the lowest agreement, over the 28 layers, of the
two runs' zero patterns (with its layer). ``--check`` exits non-zero when a setting's perplexity is more than 2% above
llm-compressor's, SparseGPT is not better than Wanda at the same sparsity, or GPTQ W4A16 not
better than round to nearest W4A16 (full run only).

The magnitude recipe is llm-compressor's ``MagnitudePruningModifier`` form; llm-compressor 0.14
prunes nothing with it in oneshot, so its row compares with the anchor's own per-layer magnitude
prune (``results.json``'s magnitude entry).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oneshot_quality import ALL_SETTINGS, QUANT_SETTINGS, missing_anchor, peak_rss_mb  # noqa: E402  (the PyTorch benchmark's settings and rules)
from oneshot_quality import failures as torch_failures  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ANCHOR = REPO.parent / "shared" / "conformance" / "llmcompressor" / "quality"
BACKENDS = ("tensorflow", "jax", "torch")
#: Evaluation windows per forward pass (the anchor's results use 8).
EVAL_BATCH = 8


def load_windows(anchor: Path, limit: int | None) -> np.ndarray:
    """The public evaluation windows ``[windows, 512]`` (the first ``limit`` of them)."""
    windows = np.asarray(json.loads((anchor / "eval_public.json").read_text())["windows"], dtype=np.int64)
    return windows[:limit] if limit else windows


def keras_perplexity(model: Any, windows: np.ndarray, batch_size: int = EVAL_BATCH) -> float:
    """``perplexity.py``'s figure for a keras-hub causal LM: each window scored on its own
    (padding mask all ones), logits of the backbone's output projection in float32, the NLL of
    tokens 2..N of each window summed in float64, ``exp(total / targets)``."""
    import keras

    backbone = model.backbone
    total, count = 0.0, 0
    for start in range(0, len(windows), batch_size):
        ids = windows[start:start + batch_size]
        hidden = backbone({"token_ids": ids.astype("int32"), "padding_mask": np.ones(ids.shape, "int32")},
                          training=False)
        logits = np.asarray(keras.ops.convert_to_numpy(backbone.token_embedding(hidden, reverse=True)),
                            dtype=np.float32)[:, :-1]
        top = logits.max(axis=-1, keepdims=True)
        log_z = np.log(np.exp(logits - top).sum(axis=-1, keepdims=True)) + top
        picked = np.take_along_axis(logits, ids[:, 1:, None], axis=-1)[..., 0]
        nll = (log_z[..., 0] - picked).astype(np.float64)
        total += float(nll.sum())
        count += nll.size
    return math.exp(total / count)


def torch_dense_perplexity(anchor: Path, windows: np.ndarray) -> float:
    """The dense checkpoint scored by the anchor's own ``perplexity.py`` (PyTorch)."""
    import torch

    spec = importlib.util.spec_from_file_location("anchor_perplexity", anchor / "perplexity.py")
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return float(module.perplexity(str(anchor / "model"), torch.tensor(windows), batch_size=EVAL_BATCH))


def decoder_linears(model: Any) -> dict[str, Any]:
    """The anchor's 28 targets (the decoder Linear layers), by checkpoint name: read before
    the run, since a quantized layer is no longer a module the host compresses."""
    from recipe_spec_keras.oneshot import KerasCalibrationHost

    host = KerasCalibrationHost(model)
    return {m.name: host._linear[m.name] for m in host.modules() if m.prunable and m.name.startswith("model.layers.")}


def decoder_weights(linears: dict[str, Any]) -> dict[str, np.ndarray]:
    """Each target's ``(out, in)`` weight as its layer computes with it (a quantized layer:
    read back from its integers and scales)."""
    from recipe_spec_keras.quantized import keras_weight

    return {name: keras_weight(lin.layer) if lin.layer.quantization_mode is not None else lin.weight()
            for name, lin in linears.items()}


def target_sparsity(weights: dict[str, np.ndarray]) -> float:
    """The share of exact zeros in the decoder Linear weights (the anchor's 28 targets)."""
    return sum(int((w == 0).sum()) for w in weights.values()) / sum(w.size for w in weights.values())


def quantized_modes(linears: dict[str, Any]) -> str:
    """The Keras quantization modes of the targets (``int4`` x28), empty when none is."""
    modes = [str(lin.layer.quantization_mode) for lin in linears.values() if lin.layer.quantization_mode]
    return ", ".join(f"{m} x{modes.count(m)}" for m in sorted(set(modes)))


def run_torch_setting(setting: str, anchor: Path, limit_windows: int | None, samples: int,
                      masks_to: str | None) -> dict[str, Any]:
    """recipe-spec's PyTorch run of ``setting`` on the Hugging Face model, scored by the
    anchor's ``perplexity.py``: the baseline of the Keras run."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(anchor / "model"), dtype=torch.float32)
    elapsed = compress(model, setting, anchor, samples)
    save_masks({n.removesuffix(".weight"): (w == 0).numpy() for n, w in model.state_dict().items()
                if n.startswith("model.layers.") and n.endswith("proj.weight")}, masks_to)
    spec = importlib.util.spec_from_file_location("anchor_perplexity", anchor / "perplexity.py")
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    windows = torch.tensor(load_windows(anchor, limit_windows))
    return {"setting": setting, "ppl": float(module.perplexity(model, windows, batch_size=EVAL_BATCH)),
            "oneshot_s": elapsed}


def calibration(anchor: Path, samples: int) -> list[dict[str, list[int]]]:
    """The first ``samples`` calibration windows, as llm-compressor's samples (mask all ones)."""
    ids = json.loads((anchor / "calibration.json").read_text())["samples"][:samples]
    return [{"input_ids": s, "attention_mask": [1] * len(s)} for s in ids]


def compress(model: Any, setting: str, anchor: Path, samples: int) -> float:
    """``recipe_spec.oneshot`` on ``model`` with ``setting``'s recipe (nothing for ``dense``);
    its wall time in seconds."""
    import recipe_spec

    if setting == "dense":
        return 0.0
    recipe = (anchor / "recipes" / f"{setting}.yaml").read_text()
    dataset = calibration(anchor, samples)
    start = time.perf_counter()
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=dataset, num_calibration_samples=len(dataset),
                        shuffle_calibration_samples=False, batch_size=1)
    return time.perf_counter() - start


def save_masks(zeros: dict[str, np.ndarray], path: str | None) -> None:
    """The zero pattern of each decoder Linear weight ``(out, in)``, bit-packed, to ``path``."""
    if path:
        np.savez(path, **{name: np.packbits(z.reshape(-1)) for name, z in zeros.items()},
                 **{f"{name}@shape": np.asarray(z.shape) for name, z in zeros.items()})


def load_masks(path: str) -> dict[str, np.ndarray]:
    """What :func:`save_masks` wrote."""
    with np.load(path) as data:
        return {k: np.unpackbits(data[k])[: int(np.prod(data[f"{k}@shape"]))].reshape(data[f"{k}@shape"]).astype(bool)
                for k in data.files if "@" not in k}


def run_setting(setting: str, anchor: Path, limit_windows: int | None, samples: int,
                torch_dense: bool, masks_to: str | None = None) -> dict[str, Any]:
    """Load the model, compress it with ``setting``'s recipe, score it: one result dict
    (``masks_to``: where to write its zero patterns, :func:`save_masks`)."""
    from recipe_spec_keras.hub import load_causal_lm

    model = load_causal_lm(anchor / "model", dtype="float32")
    linears = decoder_linears(model)
    elapsed = compress(model, setting, anchor, samples)
    rss = peak_rss_mb()
    weights = decoder_weights(linears)
    save_masks({name: w == 0 for name, w in weights.items()}, masks_to)
    windows = load_windows(anchor, limit_windows)
    start = time.perf_counter()
    ppl = keras_perplexity(model, windows)
    result = {"setting": setting, "ppl": ppl, "oneshot_s": elapsed, "eval_s": time.perf_counter() - start,
              "peak_rss_mb": rss, "sparsity": target_sparsity(weights), "keras_modes": quantized_modes(linears)}
    if torch_dense and setting == "dense":
        result["ppl_torch"] = torch_dense_perplexity(anchor, windows)
    return result


def run_in_process(setting: str, a: argparse.Namespace, torch_run: bool = False,
                   masks_to: str | None = None) -> dict[str, Any]:
    """:func:`run_setting` (``torch_run``: :func:`run_torch_setting`) in a fresh Python process
    on the chosen Keras backend (so that peak memory is the setting's own)."""
    cmd = [sys.executable, __file__, "--one", setting, "--threads", str(a.threads), "--anchor", a.anchor,
           "--samples", str(a.samples)]
    if torch_run:
        cmd += ["--torch-run"]
    if masks_to:
        cmd += ["--masks-to", masks_to]
    if a.limit_windows:
        cmd += ["--limit-windows", str(a.limit_windows)]
    if a.torch_dense:
        cmd += ["--torch-dense"]
    shim = REPO / ".shim"
    path = [str(REPO), *([str(shim)] if shim.is_dir() else []), os.environ.get("PYTHONPATH", "")]
    blas = {k: str(a.blas_threads) for k in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")} if a.blas_threads else {}
    env = dict(os.environ, **blas, KERAS_BACKEND=a.keras_backend, PYTHONPATH=os.pathsep.join(filter(None, path)),
               OMP_NUM_THREADS=str(a.threads), TF_NUM_INTRAOP_THREADS=str(a.threads),
               TF_NUM_INTEROP_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"{setting} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def agreement(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> tuple[float, str]:
    """The lowest share of positions where two runs' zero patterns agree, and its layer."""
    worst = min(((float((ours[n] == theirs[n]).mean()), n) for n in theirs), default=(1.0, "-"))
    return worst


def table(results: dict[str, dict[str, Any]], reference: dict[str, Any], full: bool) -> list[str]:
    """The printed table: one row per setting."""
    lines = [f"{'setting':28} {'ppl ours':>9} {'ppl llmc':>9} {'ratio':>6} {'ours s':>7} {'llmc s':>7} "
             f"{'RSS MB':>7} {'sparsity':>8} {'eval s':>7}"]
    for setting, r in results.items():
        ref = reference.get(setting, {})
        theirs = ref.get("ppl_public")
        ratio = f"{r['ppl'] / theirs:6.3f}" if full and theirs else f"{'-':>6}"
        lines.append(f"{setting:28} {r['ppl']:9.3f} {theirs if theirs is not None else float('nan'):9.3f} {ratio} "
                     f"{r['oneshot_s']:7.1f} {ref.get('oneshot_wall_s', float('nan')):7.1f} "
                     f"{r['peak_rss_mb']:7.0f} {r['sparsity']:8.4f} {r['eval_s']:7.1f}")
    return lines


def torch_table(results: dict[str, dict[str, Any]], torch_results: dict[str, dict[str, Any]]) -> list[str]:
    """The baseline table: recipe-spec's PyTorch run per setting, the Keras/PyTorch perplexity
    ratio and the lowest per-layer agreement of the two runs' zero patterns."""
    lines = [f"{'setting':28} {'ppl keras':>9} {'ppl torch':>9} {'ratio':>9} {'torch s':>7} "
             f"{'mask agreement (worst layer)':>40}"]
    for setting, t in torch_results.items():
        k = results[setting]
        lines.append(f"{setting:28} {k['ppl']:9.3f} {t['ppl']:9.3f} {k['ppl'] / t['ppl']:9.6f} {t['oneshot_s']:7.1f} "
                     f"{t['agreement']:>10.6f} {t['worst_layer']:>29}")
    return lines


def failures(results: dict[str, dict[str, Any]], reference: dict[str, Any]) -> list[str]:
    """What misses the acceptance (:func:`oneshot_quality.failures`, one run per setting)."""
    return torch_failures({setting: [r] for setting, r in results.items()}, reference)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keras-backend", choices=BACKENDS, default="tensorflow")
    p.add_argument("--settings", default=",".join(ALL_SETTINGS), help="comma-separated settings")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--blas-threads", type=int, default=1, help="NumPy BLAS threads (0: BLAS default)")
    p.add_argument("--limit-windows", type=int, default=None, help="score the first N eval windows only")
    p.add_argument("--samples", type=int, default=256, help="calibrate on the first N samples only")
    p.add_argument("--torch-dense", action="store_true",
                   help="also score the dense checkpoint on PyTorch with the anchor's perplexity.py")
    p.add_argument("--anchor", default=str(ANCHOR), help="the quality anchor folder")
    p.add_argument("--check", action="store_true", help="exit 1 when the acceptance is missed")
    p.add_argument("--torch-baseline", action="store_true",
                   help="also run recipe-spec on the PyTorch model: perplexity ratio and mask agreement")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    p.add_argument("--torch-run", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--masks-to", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    anchor = Path(a.anchor)
    if (why := missing_anchor(anchor)) is not None:
        print(f"oneshot_quality_keras: {why}", file=sys.stderr)
        return 2
    if a.one:
        if a.torch_run:
            import torch

            torch.set_num_threads(a.threads)
            print(json.dumps(run_torch_setting(a.one, anchor, a.limit_windows, a.samples, a.masks_to)))
        else:
            print(json.dumps(run_setting(a.one, anchor, a.limit_windows, a.samples, a.torch_dense, a.masks_to)))
        return 0
    settings = [s.strip() for s in a.settings.split(",") if s.strip()]
    unknown = [s for s in settings if s not in ALL_SETTINGS]
    if unknown:
        p.error(f"unknown setting(s) {', '.join(unknown)}; choose from {', '.join(ALL_SETTINGS)}")
    reference = json.loads((anchor / "results.json").read_text())["settings"]
    results: dict[str, dict[str, Any]] = {}
    torch_results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for s in settings:
            results[s] = run_in_process(s, a, masks_to=os.path.join(tmp, f"keras-{s}.npz"))
            if a.torch_baseline:
                torch_results[s] = run_in_process(s, a, torch_run=True, masks_to=os.path.join(tmp, f"torch-{s}.npz"))
                worst, layer = agreement(load_masks(os.path.join(tmp, f"keras-{s}.npz")),
                                         load_masks(os.path.join(tmp, f"torch-{s}.npz")))
                torch_results[s].update(agreement=worst, worst_layer=layer)
    full = not a.limit_windows and a.samples == 256
    print(f"one-shot quality on a keras-hub Llama from {anchor.name}/model (Keras backend {a.keras_backend}, "
          f"{a.threads} threads, {a.blas_threads or 'default'} BLAS{'' if full else f'; a quick run: {a.samples} samples, {a.limit_windows or 403} eval windows'}"
          "); llm-compressor: results.json")
    print("\n".join(table(results, reference, full)))
    if torch_results:
        print("recipe-spec on PyTorch (the Hugging Face model, perplexity.py), same samples and windows:")
        print("\n".join(torch_table(results, torch_results)))
    quantized = {s: r["keras_modes"] for s, r in results.items() if s in QUANT_SETTINGS and r.get("keras_modes")}
    for s, modes in quantized.items():
        print(f"{s}: Keras quantized layers {modes}"
              + ("; input activations on Keras's own int8 grid (AbsMaxQuantizer per token: 127/absmax, "
                 "range ±127; compressed-tensors: absmax/127.5, -128..127)" if s == "rtn_w8a8" else ""))
    dense = results.get("dense", {})
    if "ppl_torch" in dense:
        print(f"dense: keras-hub {dense['ppl']:.6f}, PyTorch (perplexity.py, same windows) {dense['ppl_torch']:.6f}; "
              f"keras-hub / PyTorch = {dense['ppl'] / dense['ppl_torch']:.7f}")
    if full:
        bad = failures(results, reference)
        print("acceptance: " + ("met" if not bad else "MISSED: " + "; ".join(bad)))
        if a.check and bad:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
