"""FP4, MX, rotation and AutoRound one-shot quality on llm-compressor's quality anchor, side by side with
llm-compressor 0.14's own run of the same recipe (measured here: the anchor's ``results.json``
has none of these settings).

Each setting (NVFP4A16, MXFP4A16 and MXFP8A16 by round to nearest and GPTQ, NVFP4 with its
calibrated input global scale, MXFP4 with dynamic inputs; QuIP and SpinQuant rotations (R3
too) before W4A16; AutoRound W4A16, 200 iterations, and NVFP4, MXFP4, FP8 (static inputs), 50 iterations,
eager) runs in a fresh process for each
side: the anchor's ``model/`` loaded in fp32, ``oneshot`` with the setting's recipe and the 256
calibration samples in order (batch 1), then the anchor's ``perplexity.py`` on
``eval_public.json`` with the model as the run leaves it in memory (quantization on: each
forward pass fake-quantizes the weights, and NVFP4's / MXFP4's inputs per group at run time).
It prints both perplexities and their ratio; ``--check`` exits 1 when a ratio is over 1.01.

    LLMCOMPRESSOR_PYTHON=/path/to/python python benchmarks/oneshot_quality_fp4.py
        [--settings rtn_nvfp4a16,...] [--threads 2] [--limit-windows N] [--samples N] [--check]

Without ``$LLMCOMPRESSOR_PYTHON`` (an interpreter with llm-compressor 0.14) only ours is run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from oneshot_quality import ANCHOR, missing_anchor, perplexity_module, run_setting  # noqa: E402


def _recipe(modifier: str, scheme: str) -> str:
    return (f"quant_stage:\n  quant_modifiers:\n    {modifier}:\n      targets: [Linear]\n      scheme: {scheme}\n"
            "      ignore: [lm_head]\n")


#: setting -> its recipe
SETTINGS: dict[str, str] = {
    "rtn_nvfp4a16": _recipe("QuantizationModifier", "NVFP4A16"),
    "gptq_nvfp4a16": _recipe("GPTQModifier", "NVFP4A16"),
    "rtn_mxfp4a16": _recipe("QuantizationModifier", "MXFP4A16"),
    "gptq_mxfp4a16": _recipe("GPTQModifier", "MXFP4A16"),
    "rtn_mxfp8a16": _recipe("QuantizationModifier", "MXFP8A16"),
    "rtn_nvfp4": _recipe("QuantizationModifier", "NVFP4"),
    "rtn_mxfp4": _recipe("QuantizationModifier", "MXFP4"),
    # rotations, then W4A16 (the anchor's widths: 256 hidden, 64 per head, 768 in down_proj)
    "quip_rtn_w4a16": "r_stage:\n  r_modifiers:\n    QuIPModifier: {}\n" + _recipe("QuantizationModifier", "W4A16"),
    "spinquant_rtn_w4a16": "r_stage:\n  r_modifiers:\n    SpinQuantModifier: {}\n" + _recipe(
        "QuantizationModifier", "W4A16"),
    "spinquant_r3_rtn_w4a16": "r_stage:\n  r_modifiers:\n    SpinQuantModifier:\n      rotations: [R1, R2, R3]\n" + _recipe(
        "QuantizationModifier", "W4A16"),
    "spinquant_r4_gptq_w4a16": ("r_stage:\n  r_modifiers:\n    SpinQuantModifier:\n      rotations: [R1, R2, R4]\n"
                                "      transform_block_size: 256\n") + _recipe("GPTQModifier", "W4A16"),
    # AutoRound through auto-round, eager (compiled, the numbers depend on the generated code)
    "autoround_w4a16": _recipe("AutoRoundModifier", "W4A16") + "      iters: 200\n      enable_torch_compile: false\n",
    # AutoRound's float grids (50 iterations: each block's tuning loop quantizes activations too)
    **{f"autoround_{scheme.lower()}": _recipe("AutoRoundModifier", scheme) + "      iters: 50\n"
       "      enable_torch_compile: false\n" for scheme in ("NVFP4", "MXFP4", "FP8")},
}
TOLERANCE = 1.01


def run_llmcompressor(setting: str, anchor: Path, limit_windows: int | None, samples: int) -> dict[str, Any]:
    """llm-compressor's side, in this process (run by ``$LLMCOMPRESSOR_PYTHON``)."""
    import datasets
    import torch
    import transformers
    from llmcompressor import oneshot

    model = transformers.AutoModelForCausalLM.from_pretrained(str(anchor / "model"), dtype=torch.float32)
    tok = transformers.AutoTokenizer.from_pretrained(str(anchor / "model"))
    ids = json.loads((anchor / "calibration.json").read_text())["samples"][:samples]
    data = datasets.Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(s) for s in ids]})
    start = time.perf_counter()
    oneshot(model=model, recipe=SETTINGS[setting], dataset=data, tokenizer=tok, num_calibration_samples=len(ids),
            shuffle_calibration_samples=False, batch_size=1)
    elapsed = time.perf_counter() - start
    ppl_mod = perplexity_module(anchor)
    windows = ppl_mod.load_windows(str(anchor / "eval_public.json"))
    if limit_windows:
        windows = windows[:limit_windows]
    return {"setting": setting, "ppl": ppl_mod.perplexity(model, windows, batch_size=8), "oneshot_s": elapsed}


def _spawn(python: str, side: str, setting: str, a: argparse.Namespace) -> dict[str, Any]:
    cmd = [python, __file__, "--one", side, "--settings", setting, "--threads", str(a.threads), "--anchor", a.anchor,
           "--samples", str(a.samples)]
    if a.limit_windows:
        cmd += ["--limit-windows", str(a.limit_windows)]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"{side} {setting} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated settings")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit-windows", type=int, default=None, help="score the first N eval windows only")
    p.add_argument("--samples", type=int, default=256, help="calibrate on the first N samples only")
    p.add_argument("--anchor", default=str(ANCHOR), help="the quality anchor folder")
    p.add_argument("--check", action="store_true", help="exit 1 when a ratio is over 1.01")
    p.add_argument("--one", default=None, choices=("ours", "llmcompressor"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    anchor = Path(a.anchor)
    if (why := missing_anchor(anchor)) is not None:
        print(f"oneshot_quality_fp4: {why}", file=sys.stderr)
        return 2
    settings = [s.strip() for s in a.settings.split(",") if s.strip()]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        p.error(f"unknown setting(s) {', '.join(unknown)}; choose from {', '.join(SETTINGS)}")
    if a.one:
        import torch

        torch.set_num_threads(a.threads)
        if a.one == "ours":
            out = run_setting(settings[0], anchor, a.limit_windows, a.samples, SETTINGS[settings[0]])
        else:
            out = run_llmcompressor(settings[0], anchor, a.limit_windows, a.samples)
        print(json.dumps(out))
        return 0
    theirs_python = os.environ.get("LLMCOMPRESSOR_PYTHON")
    rows, bad = [], []
    for setting in settings:
        ours = _spawn(sys.executable, "ours", setting, a)
        theirs = _spawn(theirs_python, "llmcompressor", setting, a) if theirs_python else None
        print(json.dumps({"ours": ours, "llmcompressor": theirs}), file=sys.stderr, flush=True)
        ratio = ours["ppl"] / theirs["ppl"] if theirs else None
        if ratio is not None and ratio > TOLERANCE:
            bad.append(f"{setting}: {ours['ppl']:.4f} > {TOLERANCE} x {theirs['ppl']:.4f}")
        rows.append(f"{setting:24} {ours['ppl']:9.4f} {theirs['ppl'] if theirs else float('nan'):9.4f} "
                    f"{'-' if ratio is None else f'{ratio:.4f}':>7} {ours['oneshot_s']:7.1f} "
                    f"{theirs['oneshot_s'] if theirs else float('nan'):7.1f}")
    quick = a.limit_windows or a.samples != 256
    print(f"FP4, MX and rotation quality on {anchor.name}/ ({a.threads} threads; llm-compressor measured here"
          f"{'' if theirs_python else ': not run, no $LLMCOMPRESSOR_PYTHON'}"
          f"{f', a quick run: {a.samples} samples, {a.limit_windows or 403} eval windows' if quick else ''})")
    print(f"{'setting':24} {'ppl ours':>9} {'ppl llmc':>9} {'ratio':>7} {'ours s':>7} {'llmc s':>7}")
    print("\n".join(rows))
    if theirs_python:
        print("acceptance (within 1%): " + ("met" if not bad else "MISSED: " + "; ".join(bad)))
    return 1 if a.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
