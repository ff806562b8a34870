"""The time one Hessian product per distinct layer input saves (q/k/v share the attention's
input, gate/up the MLP's: :class:`recipe_spec.oneshot.shared.hessian.SharedInput`), against
the same run with each layer's product computed alone, measured in the same run.

The model and data of ``benchmarks/oneshot_speed.py`` (the speed anchor's random Llama, hidden
512, 4 layers; ``--samples`` x 256 tokens, batch 1), each run a fresh process, the two settings
interleaved (shared, alone, shared, alone, ...); the weights of the two settings compared at
the end (they must be equal bit for bit).

    python benchmarks/oneshot_shared_input.py [--recipes gptq_w4a16,sparsegpt50] [--runs 3] [--threads 2]
        [--samples 32]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


def one(setting: str, recipe: str, samples: int) -> dict[str, Any]:
    """One run in this process; ``setting``: ``shared`` or ``alone``."""
    import oneshot_speed
    import torch
    from recipe_spec_torch.masks import TorchOps

    if setting == "alone":
        TorchOps.same_values = lambda self, a, b: False  # type: ignore[method-assign]
    captured: dict[str, Any] = {}
    build = oneshot_speed.build

    def keep(n: int) -> Any:
        model, ids = build(n)
        captured["model"] = model
        return model, ids

    oneshot_speed.build = keep
    result = oneshot_speed.run_once("ours", recipe, samples)
    digest = hashlib.sha256()
    for key, value in sorted(captured["model"].state_dict().items()):
        digest.update(key.encode())
        digest.update(value.detach().contiguous().numpy().tobytes())
    return {**result, "setting": setting, "weights": digest.hexdigest()[:16], "threads": torch.get_num_threads()}


def spawn(setting: str, recipe: str, threads: int, samples: int) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), str(REPO / ".shim"), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, __file__, "--one", setting, "--recipes", recipe, "--samples", str(samples),
           "--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"{setting} {recipe} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipes", default="gptq_w4a16,sparsegpt50")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    recipes = [r.strip() for r in a.recipes.split(",") if r.strip()]
    if a.one:
        import torch

        torch.set_num_threads(a.threads)
        print(json.dumps(one(a.one, recipes[0], a.samples)))
        return 0
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _ in range(a.runs):
        for recipe in recipes:
            for setting in ("shared", "alone"):
                result = spawn(setting, recipe, a.threads, a.samples)
                print(json.dumps(result), file=sys.stderr, flush=True)
                runs.setdefault((setting, recipe), []).append(result)
    print(f"Hessian products shared by layers fed one input: random Llama 14.7M, {a.samples} x 256 tokens, "
          f"{a.threads} threads, {a.runs} run(s) each, interleaved; load average {os.getloadavg()[0]:.1f}")
    print("| recipe | shared: per layer s (min / median) | alone: per layer s (min / median) | ratio shared/alone "
          "(median) | same weights |")
    print("|---|---|---|---|---|")
    for recipe in recipes:
        s, o = runs[("shared", recipe)], runs[("alone", recipe)]
        ms, mo = ([r["per_layer_s"] for r in x] for x in (s, o))
        same = len({r["weights"] for r in s + o}) == 1
        print(f"| {recipe} | {min(ms):.2f} / {statistics.median(ms):.2f} | {min(mo):.2f} / {statistics.median(mo):.2f} "
              f"| {statistics.median(ms) / statistics.median(mo):.2f} | {'yes' if same else 'NO'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
