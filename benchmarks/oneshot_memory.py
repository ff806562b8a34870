"""Peak host memory of ``recipe-spec oneshot --model DIR`` against the checkpoint's depth: the
checkpoint streamed one block at a time, against the same run on the model loaded whole, in the
same run of this script.

Two bfloat16 Llama checkpoints of the same width (hidden ``--hidden``, intermediate
``2.75 x hidden``, vocab 4096, untied; seed 0) and ``--small`` / ``--large`` decoder layers
(default 6 and 18) are written to a temporary folder; each recipe (``rtn``: QuantizationModifier
W4A16, round to nearest, no data; ``gptq``: GPTQModifier W4A16 on ``--samples`` samples of
``--length`` random tokens) then runs on each checkpoint in a fresh process:

- ``streamed``: ``recipe-spec oneshot --model DIR`` (the command line, as a user runs it);
- ``whole``: the model loaded whole (``load_model(DIR, stream=False)``: transformers'
  ``from_pretrained(dtype="auto")``, as llm-compressor loads ``model="DIR"``), then
  ``recipe_spec.oneshot(model=...)`` with the same data and output.

Each configuration runs ``--repeats`` times (alternating small and large); the peak resident
memory of each process (``wait4``'s ``ru_maxrss``) is printed with the checkpoint sizes as the
least and the most of the repeats (a run's peak falls during one block's solve, and varies
from run to run with the threads' timing by up to about a third: the least is the memory the
run needs), and, per recipe and mode, the growth of the least peak from the small to the
large checkpoint divided by the growth of the checkpoint (``growth ratio``; target for
``streamed``: <= 0.25, one block's weights whatever the depth; ``whole`` grows with the
checkpoint).

    python benchmarks/oneshot_memory.py [--hidden 1024] [--small 6] [--large 18] [--samples 16]
        [--length 128] [--recipes rtn,gptq] [--threads 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RECIPES = {
    "rtn": "quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n      scheme: W4A16\n"
           "      targets: [Linear]\n      ignore: [lm_head]\n",
    "gptq": "quant_stage:\n  quant_modifiers:\n    GPTQModifier:\n      scheme: W4A16\n"
            "      targets: [Linear]\n      ignore: [lm_head]\n",
}

_WHOLE = """
import json, sys
import recipe_spec
from recipe_spec_torch.pretrained import load_model
folder, recipe, data, out = sys.argv[1:5]
samples = [{"input_ids": s, "attention_mask": [1] * len(s)} for s in json.load(open(data))]
model = load_model(folder, stream=False)
recipe_spec.oneshot(model=model, recipe=open(recipe).read(), dataset=samples, num_calibration_samples=len(samples),
                    shuffle_calibration_samples=False, output_dir=out, progress=False)
"""


_CHECKPOINT = """
import sys, torch, transformers
folder, hidden, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
config = transformers.LlamaConfig(vocab_size=4096, hidden_size=hidden, intermediate_size=int(2.75 * hidden),
                                  num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=8,
                                  max_position_embeddings=512, tie_word_embeddings=False)
transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
"""


def checkpoint(folder: Path, hidden: int, layers: int) -> int:
    """Write the bfloat16 Llama checkpoint (in a process of its own: a child forked from a large
    parent would count the parent's pages in its peak); its size in bytes."""
    subprocess.run([sys.executable, "-c", _CHECKPOINT, str(folder), str(hidden), str(layers)], check=True,
                   stderr=subprocess.DEVNULL)
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def peak(argv: list[str], env: dict[str, str]) -> int:
    """Run ``argv``; its peak resident memory in bytes (the run must succeed)."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(argv[:3])} failed:\n{err.decode()[-2000:]}")
    return int(usage.ru_maxrss) * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--small", type=int, default=6)
    parser.add_argument("--large", type=int, default=18)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--recipes", default="rtn,gptq")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory(prefix="oneshot-memory-") as tmp:
        root = Path(tmp)
        sizes = {n: checkpoint(root / f"ckpt{n}", args.hidden, n) for n in (args.small, args.large)}
        import random

        rng = random.Random(1)
        data = root / "data.json"
        data.write_text(json.dumps([[rng.randrange(4, 4096) for _ in range(args.length)]
                                    for _ in range(args.samples)]))
        print(f"checkpoints (bfloat16 Llama, hidden {args.hidden}): {args.small} layers "
              f"{sizes[args.small] / 2**20:.0f} MiB, {args.large} layers {sizes[args.large] / 2**20:.0f} MiB; "
              f"{args.samples} samples x {args.length} tokens; {args.threads} threads; least and most peak "
              f"of {args.repeats} runs")
        print("| recipe | mode | peak, small (MiB) | peak, large (MiB) | peak growth (MiB) | growth ratio |")
        print("|---|---|---|---|---|---|")
        for name in args.recipes.split(","):
            recipe = root / f"{name}.yaml"
            recipe.write_text(RECIPES[name])
            for mode in ("streamed", "whole"):
                peaks: dict[int, list[int]] = {args.small: [], args.large: []}
                for repeat, n in [(r, n) for r in range(args.repeats) for n in (args.small, args.large)]:
                    out = root / f"out-{name}-{mode}-{n}-{repeat}"
                    if mode == "streamed":
                        argv = [sys.executable, "-m", "recipe_spec", "oneshot", str(recipe), "--model",
                                str(root / f"ckpt{n}"), "--calibration", str(data), "--num-samples",
                                str(args.samples), "--output", str(out)]
                    else:
                        argv = [sys.executable, "-c", _WHOLE, str(root / f"ckpt{n}"), str(recipe), str(data), str(out)]
                    peaks[n].append(peak(argv, env))
                grown = min(peaks[args.large]) - min(peaks[args.small])
                ratio = grown / (sizes[args.large] - sizes[args.small])

                def span(values: list[int]) -> str:
                    return f"{min(values) / 2**20:.0f}-{max(values) / 2**20:.0f}"

                print(f"| {name} | {mode} | {span(peaks[args.small])} | {span(peaks[args.large])} | "
                      f"{grown / 2**20:.0f} | {ratio:.2f} |", flush=True)


if __name__ == "__main__":
    main()
