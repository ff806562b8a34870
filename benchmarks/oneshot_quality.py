"""One-shot pruning and quantization quality against llm-compressor 0.14 on its own quality anchor.

The anchor (``shared/conformance/llmcompressor/quality/``, see its README) is a small trained
Llama (5.5M parameters, 4 decoder layers), 256 calibration windows of 512 tokens, 403 public
evaluation windows, the recipe of each setting and llm-compressor's own results. For each
pruning setting this loads ``model/`` fresh (fp32) in a process of its own, runs
``recipe_spec.oneshot`` with the setting's recipe and the 256 calibration samples in order
(``shuffle_calibration_samples=False``, batch 1), and scores the model with the anchor's
``perplexity.py`` on ``eval_public.json``. It prints, per setting: our perplexity,
llm-compressor's (``results.json``), their ratio, our oneshot wall time (min and median of
``--runs``), theirs, and the peak resident memory of the process after oneshot (model load +
compression, evaluation excluded, as in ``results.json``).

    python benchmarks/oneshot_quality.py [--settings dense,sparsegpt_2of4] [--threads 2]
        [--runs 1] [--limit-windows N] [--samples N] [--check]

``--limit-windows N`` scores the first N evaluation windows only and ``--samples N`` calibrates
on the first N samples only (a quick run; llm-compressor's perplexity is then not comparable
and the ratio is left out). ``--check`` exits non-zero when
a setting's perplexity is more than 2% above llm-compressor's, or SparseGPT is not better than
Wanda at the same sparsity (full evaluation only).

The quantization settings (``gptq_w4a16_g128``, ``rtn_w4a16_g128``, ``rtn_w8a8``) score the
model as llm-compressor leaves it in memory: quantization on, so each forward pass
fake-quantizes the weights (round to nearest keeps float weights) and W8A8's activations per
token. ``--check`` also asks GPTQ W4A16 to beat round-to-nearest W4A16.
The magnitude recipe is llm-compressor's ``MagnitudePruningModifier`` form; llm-compressor
0.14 prunes nothing with it in oneshot, so its row compares with the anchor's own per-layer
magnitude prune (``results.json``'s magnitude entry).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ANCHOR = REPO.parent / "shared" / "conformance" / "llmcompressor" / "quality"
SETTINGS = ("dense", "sparsegpt_unstructured_0.5", "sparsegpt_2of4", "wanda_unstructured_0.5",
            "wanda_2of4", "magnitude_unstructured_0.5")
#: The quantization settings (PyTorch; Keras: benchmarks/oneshot_quality_keras.py).
QUANT_SETTINGS = ("gptq_w4a16_g128", "rtn_w4a16_g128", "rtn_w8a8")
ALL_SETTINGS = SETTINGS + QUANT_SETTINGS
#: SparseGPT must beat Wanda at the same sparsity pattern, GPTQ round to nearest at W4A16.
PAIRS = (("sparsegpt_unstructured_0.5", "wanda_unstructured_0.5"), ("sparsegpt_2of4", "wanda_2of4"),
         ("gptq_w4a16_g128", "rtn_w4a16_g128"))
TOLERANCE = 1.02


def missing_anchor(anchor: Path) -> str | None:
    """What is missing of the anchor folder (None when it is whole): it is not in the
    repository (the trained checkpoint and its evaluation windows are 23 MB), only in the
    project's shared reference folder beside it, or wherever ``--anchor`` points."""
    need = ("model/config.json", "model/model.safetensors", "calibration.json", "eval_public.json", "perplexity.py",
            "results.json", "recipes")
    absent = [n for n in need if not (anchor / n).exists()]
    if not absent:
        return None
    return (f"the quality anchor is not at {anchor} (missing: {', '.join(absent)}). It is llm-compressor's "
            "quality anchor folder (conformance/llmcompressor/quality of the project's shared reference "
            "material, ../shared beside the repository); point --anchor at a copy of it.")


def perplexity_module(anchor: Path = ANCHOR) -> ModuleType:
    """The anchor's own ``perplexity.py``, imported from the shared folder."""
    spec = importlib.util.spec_from_file_location("anchor_perplexity", anchor / "perplexity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_setting(setting: str, anchor: Path, limit_windows: int | None, samples: int = 256,
                recipe: str | None = None) -> dict[str, Any]:
    """Load the model, compress it with ``setting``'s recipe (``recipe``: this text instead of
    the anchor's file), score it: one result dict."""
    import torch
    from transformers import AutoModelForCausalLM

    import recipe_spec

    model = AutoModelForCausalLM.from_pretrained(str(anchor / "model"), dtype=torch.float32)
    elapsed = 0.0
    if setting != "dense":
        recipe = recipe if recipe is not None else (anchor / "recipes" / f"{setting}.yaml").read_text()
        ids = json.loads((anchor / "calibration.json").read_text())["samples"][:samples]
        dataset = [{"input_ids": s, "attention_mask": [1] * len(s)} for s in ids]
        start = time.perf_counter()
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=dataset, num_calibration_samples=len(ids),
                            shuffle_calibration_samples=False, batch_size=1)
        elapsed = time.perf_counter() - start
    rss = peak_rss_mb()
    targets = [m.weight for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and n.startswith("model.layers.")]
    zeros = sum(int((w == 0).sum()) for w in targets) / sum(w.numel() for w in targets)
    ppl_mod = perplexity_module(anchor)
    windows = ppl_mod.load_windows(str(anchor / "eval_public.json"))
    if limit_windows:
        windows = windows[:limit_windows]
    ppl = ppl_mod.perplexity(model, windows, batch_size=8)
    return {"setting": setting, "ppl": ppl, "oneshot_s": elapsed, "peak_rss_mb": rss, "sparsity": zeros}


def run_in_process(setting: str, anchor: Path, threads: int, limit_windows: int | None,
                   samples: int = 256) -> dict[str, Any]:
    """:func:`run_setting` in a fresh Python process (so that peak memory is the setting's own)."""
    cmd = [sys.executable, __file__, "--one", setting, "--threads", str(threads), "--anchor", str(anchor),
           "--samples", str(samples)]
    if limit_windows:
        cmd += ["--limit-windows", str(limit_windows)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(results: dict[str, list[dict[str, Any]]], reference: dict[str, Any], full: bool) -> list[str]:
    """The printed table: one row per setting."""
    lines = [f"{'setting':28} {'ppl ours':>9} {'ppl llmc':>9} {'ratio':>6} {'ours s min/med':>15} "
             f"{'llmc s':>7} {'RSS MB':>7} {'sparsity':>8}"]
    for setting, runs in results.items():
        ref = reference.get(setting, {})
        ppl = runs[0]["ppl"]
        theirs = ref.get("ppl_public")
        ratio = f"{ppl / theirs:6.3f}" if full and theirs else f"{'-':>6}"
        times = [r["oneshot_s"] for r in runs]
        when = f"{min(times):6.1f}/{statistics.median(times):<6.1f}"
        lines.append(f"{setting:28} {ppl:9.3f} {theirs if theirs is not None else float('nan'):9.3f} {ratio} "
                     f"{when:>15} {ref.get('oneshot_wall_s', float('nan')):7.1f} "
                     f"{max(r['peak_rss_mb'] for r in runs):7.0f} {runs[0]['sparsity']:8.4f}")
    return lines


def failures(results: dict[str, list[dict[str, Any]]], reference: dict[str, Any]) -> list[str]:
    """What misses the acceptance: a perplexity over 2% above llm-compressor's, SparseGPT not
    better than Wanda, GPTQ not better than round to nearest."""
    out = []
    for setting, runs in results.items():
        theirs = reference.get(setting, {}).get("ppl_public")
        if theirs and runs[0]["ppl"] > theirs * TOLERANCE:
            out.append(f"{setting}: perplexity {runs[0]['ppl']:.3f} > {TOLERANCE} x {theirs:.3f}")
    for sgpt, wanda in PAIRS:
        if sgpt in results and wanda in results and results[sgpt][0]["ppl"] >= results[wanda][0]["ppl"]:
            out.append(f"{sgpt} ({results[sgpt][0]['ppl']:.3f}) is not better than {wanda} "
                       f"({results[wanda][0]['ppl']:.3f})")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", default=",".join(ALL_SETTINGS), help="comma-separated settings")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=1, help="oneshot runs per setting (each in a fresh process)")
    p.add_argument("--limit-windows", type=int, default=None, help="score the first N eval windows only")
    p.add_argument("--samples", type=int, default=256, help="calibrate on the first N samples only")
    p.add_argument("--anchor", default=str(ANCHOR), help="the quality anchor folder")
    p.add_argument("--check", action="store_true", help="exit 1 when the acceptance is missed")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    anchor = Path(a.anchor)
    if (why := missing_anchor(anchor)) is not None:
        print(f"oneshot_quality: {why}", file=sys.stderr)
        return 2
    if a.one:
        import torch

        torch.set_num_threads(a.threads)
        print(json.dumps(run_setting(a.one, anchor, a.limit_windows, a.samples)))
        return 0
    settings = [s.strip() for s in a.settings.split(",") if s.strip()]
    unknown = [s for s in settings if s not in ALL_SETTINGS]
    if unknown:
        p.error(f"unknown setting(s) {', '.join(unknown)}; choose from {', '.join(ALL_SETTINGS)}")
    reference = json.loads((anchor / "results.json").read_text())["settings"]
    results: dict[str, list[dict[str, Any]]] = {}
    for _ in range(a.runs):
        for setting in settings:
            result = run_in_process(setting, anchor, a.threads, a.limit_windows, a.samples)
            print(json.dumps(result), file=sys.stderr, flush=True)  # each run as it ends
            results.setdefault(setting, []).append(result)
    full = not a.limit_windows and a.samples == 256
    print(f"one-shot quality on {anchor.name}/ ({a.threads} threads, {a.runs} run(s) per setting"
          f"{'' if full else f', a quick run: {a.samples} samples, {a.limit_windows or 403} eval windows'}); "
          "llm-compressor: results.json")
    print("\n".join(table(results, reference, full)))
    if full:
        bad = failures(results, reference)
        print("acceptance: " + ("met" if not bad else "MISSED: " + "; ".join(bad)))
        if a.check and bad:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
