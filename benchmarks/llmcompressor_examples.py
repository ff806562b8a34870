"""llm-compressor 0.14's example scripts, run as their users run them with only the import
changed, on the quality anchor's checkpoint and calibration text.

The anchor (``shared/conformance/llmcompressor/quality/``: a small trained Llama, its tokenizer,
256 calibration windows, the public evaluation windows and llm-compressor's results) stands for
the hub model the scripts name: ``MODEL_ID`` is its ``model/`` folder and the calibration
dataset is its calibration windows decoded back to text (the scripts' ``load_dataset`` rows).
Each example runs in a fresh process, step for step as written (docs/llmcompressor-examples.md
lists them all):

- ``quantization_w4a16``: ``oneshot(model=MODEL_ID, dataset=texts, recipe=GPTQModifier(
  targets="Linear", scheme="W4A16", ignore=["lm_head"]), max_seq_length=..., num_calibration_samples=...)``
  then ``model.save_pretrained(SAVE_DIR, save_compressed=True)``;
- ``quantization_w8a8_fp8``: ``QuantizationModifier(scheme="FP8_DYNAMIC")``, data-free;
- ``quantization_w8a8_int8``: ``[SmoothQuantModifier(smoothing_strength=0.8),
  GPTQModifier(scheme="W8A8")]``.

For each it prints whether the saved folder loads in transformers, whether its
``quantization_config`` group is compressed-tensors' own preset (``preset_name_to_scheme``) with
the format llm-compressor writes, the reloaded model's perplexity on the first
``--limit-windows`` evaluation windows, and for W4A16 its ratio to the anchor's own GPTQ W4A16
setting scored the same way in the same run (llm-compressor's recipe through
``benchmarks/oneshot_quality.py``'s path, calibrated on the same number of windows).

    python benchmarks/llmcompressor_examples.py [--anchor DIR] [--samples 32] [--limit-windows 40]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from oneshot_quality import ANCHOR, missing_anchor, perplexity_module  # noqa: E402

#: example: (preset, format llm-compressor writes, needs calibration data)
EXAMPLES = {
    "quantization_w4a16": ("W4A16", "pack-quantized", True),
    "quantization_w8a8_fp8": ("FP8_DYNAMIC", "float-quantized", False),
    "quantization_w8a8_int8": ("W8A8", "int-quantized", True),
}


def _recipe(example: str) -> Any:
    from recipe_spec.modifiers.gptq import GPTQModifier
    from recipe_spec.modifiers.quantization import QuantizationModifier
    from recipe_spec.modifiers.smoothquant import SmoothQuantModifier

    if example == "quantization_w4a16":
        return GPTQModifier(targets="Linear", scheme="W4A16", ignore=["lm_head"])
    if example == "quantization_w8a8_fp8":
        return QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=["lm_head"])
    return [SmoothQuantModifier(smoothing_strength=0.8), GPTQModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"])]


def run_example(example: str, anchor: Path, samples: int, windows: int, out: Path) -> dict[str, Any]:
    """One example, as its script runs, then the saved folder reloaded and scored."""
    import torch
    from compressed_tensors.quantization import preset_name_to_scheme
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from recipe_spec import oneshot

    preset, fmt, data = EXAMPLES[example]
    model_id = str(anchor / "model")
    tokenizer = AutoTokenizer.from_pretrained(model_id)
    ids = json.loads((anchor / "calibration.json").read_text())["samples"][:samples]
    texts = [tokenizer.decode(s) for s in ids]
    start = time.perf_counter()
    if data:
        model = oneshot(model=model_id, dataset=texts, recipe=_recipe(example), max_seq_length=len(ids[0]),
                        num_calibration_samples=samples, progress=False)
    else:
        model = oneshot(model=model_id, recipe=_recipe(example), progress=False)
    elapsed = time.perf_counter() - start
    save_dir = out / f"{example}-saved"
    model.save_pretrained(str(save_dir), save_compressed=True)
    config = AutoConfig.from_pretrained(str(save_dir)).quantization_config
    q = config if isinstance(config, dict) else config.to_dict()
    (group,) = q["config_groups"].values()
    want = preset_name_to_scheme(preset, ["Linear"]).model_dump(mode="json")
    keys = ("num_bits", "type", "symmetric", "strategy", "group_size", "dynamic")
    preset_ok = all((group.get(p) is None) if want[p] is None else all(group[p][k] == want[p][k] for k in keys)
                    for p in ("weights", "input_activations"))
    reloaded = AutoModelForCausalLM.from_pretrained(str(save_dir), dtype=torch.float32)
    reloaded.float = lambda: reloaded  # perplexity.py casts to float32; transformers refuses on a quantized model
    ppl_mod = perplexity_module(anchor)
    evaluation = ppl_mod.load_windows(str(anchor / "eval_public.json"))[:windows]
    return {"example": example, "oneshot_s": elapsed, "format": q.get("format"), "format_ok": q.get("format") == fmt,
            "preset_ok": preset_ok, "ignore": q.get("ignore"), "tokenizer_saved": (save_dir / "tokenizer.json").exists(),
            "ppl_reloaded": ppl_mod.perplexity(reloaded, evaluation, batch_size=8)}


def run_reference(anchor: Path, samples: int, windows: int) -> float:
    """The anchor's own GPTQ W4A16 setting (its recipe, its token ids in order), scored the same way."""
    from oneshot_quality import run_setting

    return float(run_setting("gptq_w4a16_g128", anchor, windows, samples)["ppl"])


def _in_process(args: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--anchor", default=str(ANCHOR), help="the quality anchor folder")
    p.add_argument("--samples", type=int, default=32, help="calibration windows (of 256)")
    p.add_argument("--limit-windows", type=int, default=40, help="evaluation windows scored")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    anchor = Path(args.anchor)
    problem = missing_anchor(anchor)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    common = ["--anchor", str(anchor), "--samples", str(args.samples), "--limit-windows", str(args.limit_windows),
              "--threads", str(args.threads)]
    if args.one is not None:
        import torch

        torch.set_num_threads(args.threads)
        if args.one == "reference":
            result: dict[str, Any] = {"ppl": run_reference(anchor, args.samples, args.limit_windows)}
        else:
            with tempfile.TemporaryDirectory() as tmp:
                result = run_example(args.one, anchor, args.samples, args.limit_windows, Path(tmp))
        print(json.dumps(result))
        return 0
    reference = _in_process(["--one", "reference", *common])["ppl"]
    print(f"llm-compressor's examples on the quality anchor ({args.samples} calibration windows, "
          f"{args.limit_windows} evaluation windows, {args.threads} threads)")
    print(f"{'example':<24} {'oneshot s':>9} {'format':>16} {'preset':>6} {'tokenizer':>9} {'ppl reloaded':>12} {'ratio':>6}")
    ok = True
    for example in EXAMPLES:
        r = _in_process(["--one", example, *common])
        ratio = r["ppl_reloaded"] / reference if example == "quantization_w4a16" else None
        print(f"{example:<24} {r['oneshot_s']:>9.1f} {r['format']:>16} {'yes' if r['preset_ok'] else 'NO':>6} "
              f"{'yes' if r['tokenizer_saved'] else 'NO':>9} {r['ppl_reloaded']:>12.4f} "
              f"{'' if ratio is None else f'{ratio:.4f}':>6}")
        ok &= r["preset_ok"] and r["format_ok"] and r["tokenizer_saved"] and r["ignore"] == ["lm_head"]
    print(f"reference: the anchor's GPTQ W4A16 recipe on its own token ids, reloaded in memory: ppl {reference:.4f}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
