"""One-shot over one process and over two (``torchrun --nproc-per-node 2``, gloo on the CPU),
measured in the same run: the time of ``oneshot``, the decoder-layer forward calls each process
ran, and how far the two results agree.

The model: a randomly initialised Llama (vocab 1024, hidden ``--hidden``, intermediate ``3 x
hidden``, ``--layers`` layers, 8 heads, untied; seed 0), ``--samples`` samples of ``--length``
random tokens (seed 1), batch 1, no shuffling; recipes ``sparsegpt`` (SparseGPTModifier 50%) and
``gptq`` (GPTQModifier W4A16), every Linear but ``lm_head``. One process runs with ``--threads``
threads; each of the two with ``--threads / 2``, so both use the same cores; a third setting,
one process with ``--threads / 2`` threads, is the reference the two-process result is compared
with (a thread count changes the bits of a matrix product, so only the same count per process
can agree bit for bit). Runs alternate (setting by setting); the table gives the median of
``--runs``.

    python benchmarks/oneshot_distributed.py [--recipes sparsegpt,gptq] [--runs 3] [--threads 2]
        [--hidden 512] [--layers 4] [--samples 64] [--length 256]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_WORKER = """
import os, sys, time, torch, transformers, random
import recipe_spec
recipe, out, hidden, layers, samples, length = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
how = "sum" if len(sys.argv) > 7 and sys.argv[7] == "summed" else "auto"
R = {"sparsegpt": "SparseGPTModifier:\\n      sparsity: 0.5", "gptq": "GPTQModifier:\\n      scheme: W4A16"}
text = "s_stage:\\n  s_modifiers:\\n    " + R[recipe] + "\\n      targets: [Linear]\\n      ignore: [lm_head]\\n"
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
    vocab_size=1024, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
    num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=length, tie_word_embeddings=False))
rng = random.Random(1)
data = [{"input_ids": [rng.randrange(4, 1024) for _ in range(length)], "attention_mask": [1] * length}
        for _ in range(samples)]
calls = [0]
for layer in model.model.layers:
    layer.register_forward_pre_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
start = time.perf_counter()
recipe_spec.oneshot(model=model, recipe=text, dataset=data, num_calibration_samples=samples,
                    shuffle_calibration_samples=False, progress=False, distributed_statistics=how)
took = time.perf_counter() - start
rank = int(os.environ.get("RANK", "0"))
weights = {k: v for k, v in model.state_dict().items() if k.endswith("proj.weight")}
torch.save({"time": took, "calls": calls[0], "weights": weights}, os.path.join(out, f"rank{rank}.pt"))
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(recipe: str, processes: int, threads: int, args: argparse.Namespace, out: Path,
        how: str = "relayed") -> list[dict]:
    """``processes`` processes of ``threads`` threads each (``how``: GPTQ's Hessians
    ``relayed`` in one process's order, ``distributed_statistics="auto"``, or ``summed``,
    ``"sum"``, llm-compressor's way)."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    sizes = [str(args.hidden), str(args.layers), str(args.samples), str(args.length)]
    script = out / "worker.py"
    script.write_text(_WORKER)
    argv = [sys.executable, str(script), recipe, str(out), *sizes, how]
    if processes > 1:
        argv = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={processes}",
                f"--master-port={_port()}", *argv[1:]]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return [torch.load(out / f"rank{r}.pt") for r in range(processes)]


def agreement(one: dict, two: dict) -> tuple[float, float]:
    """(share of weights with the same zero/non-zero state, share exactly equal)."""
    total = zeros = equal = 0
    for k, a in one["weights"].items():
        b = two["weights"][k]
        total += a.numel()
        zeros += int(((a == 0) == (b == 0)).sum())
        equal += int((a == b).sum())
    return zeros / total, equal / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", default="sparsegpt,gptq")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--length", type=int, default=256)
    args = parser.parse_args()
    each = max(1, args.threads // 2)
    print(f"Llama hidden {args.hidden}, {args.layers} layers, {args.samples} samples x {args.length} tokens; "
          f"{args.threads} threads in all (one process with {args.threads}, two with {each} each; the one-process "
          f"run with {each} thread(s) is the reference the results are compared with: a thread count changes "
          f"the bits of a matrix product); median of {args.runs} runs")
    print(f"| recipe | 1 process x {args.threads} threads (s) | 1 process x {each} (s) | 2 processes x {each} (s) "
          f"| ratio 2 / (1 x {args.threads}) | ratio 2 / (1 x {each}) | forward calls per process (1 / 2) "
          "| zero pattern equal | weights equal |")
    print("|---|---|---|---|---|---|---|---|---|")
    settings = [("whole", 1, args.threads, "relayed"), ("reference", 1, each, "relayed"), ("two", 2, each, "relayed"),
                ("two summed", 2, each, "summed")]
    with tempfile.TemporaryDirectory(prefix="oneshot-dist-") as tmp:
        for recipe in args.recipes.split(","):
            mine = [st for st in settings if recipe == "gptq" or st[3] == "relayed"]
            times: dict[str, list[float]] = {key: [] for key, *_ in mine}
            last: dict[str, list[dict]] = {}
            for i in range(args.runs):
                for key, processes, threads, how in mine:
                    last[key] = run(recipe, processes, threads, args, Path(tmp) / f"{recipe}{i}-{key}", how)
                    times[key].append(max(r["time"] for r in last[key]))
            whole, ref = statistics.median(times["whole"]), statistics.median(times["reference"])
            for key in [k for k, *_ in mine if k.startswith("two")]:
                two = statistics.median(times[key])
                zeros, equal = agreement(last["reference"][0], last[key][0])
                calls = "/".join(str(r["calls"]) for r in last[key])
                label = recipe + (" (Hessians summed, llm-compressor's way)" if key == "two summed" else "")
                print(f"| {label} | {whole:.2f} | {ref:.2f} | {two:.2f} | {two / whole:.2f} | {two / ref:.2f} "
                      f"| {last['whole'][0]['calls']} / {calls} | {zeros:.4f} | {equal:.4f} |", flush=True)

if __name__ == "__main__":
    main()
