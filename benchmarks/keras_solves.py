"""Where the Keras host should solve: SparseGPT's and GPTQ's solve of one layer on NumPy
(:data:`recipe_spec.masks.numpy_ops.NUMPY_OPS`, what the host uses on a CPU) against the same
solve on Keras's own tensors (:class:`recipe_spec_keras.solver_ops.KerasOps`, what it uses on
an accelerator), on each Keras backend, in a fresh process per backend, in the same run.

For each layer shape (the speed anchor's ``q_proj``, ``gate_proj`` and ``down_proj``) it prints
the NumPy solve's median time, the Keras solve's first call (on JAX this includes compiling a
small program for each new slice shape of the column loop, kept for the rest of the process)
and its median over later calls, the ratio of the medians (Keras / NumPy), and the share of the
weights on which the two agree (SparseGPT: pruned or not; GPTQ: the same value), checked to be
at least 99% before timing. On a GPU machine (``benchmarks/gpu.sh``) the Keras solves run on
the GPU and NumPy's on its CPU: the figure that says whether ``auto`` should pick Keras there.

    python benchmarks/keras_solves.py [--backends tensorflow,jax,torch] [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

SHAPES = {"q_proj 512 x 512": (512, 512), "gate_proj 1536 x 512": (1536, 512), "down_proj 512 x 1536": (512, 1536)}


def _one_backend(repeat: int, quick: bool) -> list[dict[str, Any]]:
    import keras
    import numpy as np
    from recipe_spec_keras.solver_ops import KERAS_OPS

    from recipe_spec.masks.numpy_ops import NUMPY_OPS
    from recipe_spec.oneshot.gptq.solve import gptq_quantize
    from recipe_spec.oneshot.shared.obs import sparsegpt_prune
    from recipe_spec.quantization import QuantArgs

    w4a16 = QuantArgs(4, "int", True, "group", 128)
    solves = {
        "sparsegpt50": lambda ops, w, h: sparsegpt_prune(ops, w, h, sparsity=0.5),
        "gptq_w4a16": lambda ops, w, h: gptq_quantize(ops, w, h, args=w4a16),
    }
    rng = np.random.default_rng(0)
    rows = []
    shapes = dict(list(SHAPES.items())[:1]) if quick else SHAPES
    for label, (out, cols) in shapes.items():
        x = rng.standard_normal((2048, cols), dtype=np.float32)
        h = (x.T @ x / np.float32(2048)).astype(np.float32)
        w = rng.standard_normal((out, cols), dtype=np.float32)
        for name, solve in solves.items():
            def on_keras(solve: Any = solve, w: Any = w, h: Any = h) -> Any:
                result = solve(KERAS_OPS, keras.ops.convert_to_tensor(w), keras.ops.convert_to_tensor(h))
                return np.asarray(keras.ops.convert_to_numpy(result.weight))

            start = time.perf_counter()
            got = on_keras()
            first = time.perf_counter() - start
            want = solve(NUMPY_OPS, w, h).weight
            agree = float(np.mean((got == 0) == (want == 0)) if name.startswith("sparsegpt") else np.mean(got == want))
            assert agree >= 0.99, (label, name, agree)  # on a GPU, float32 rounding moves a few
            numpy_s = _median(lambda solve=solve, w=w, h=h: solve(NUMPY_OPS, w, h), repeat)
            keras_s = _median(on_keras, repeat)
            rows.append({"layer": label, "solve": name, "numpy_s": numpy_s, "keras_first_s": first,
                         "keras_s": keras_s, "agree": agree})
    return rows


def _median(call: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one layer shape (a smoke test)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_one_backend(args.repeat, args.quick)))
        return
    print(f"{'backend':<11} {'layer':<21} {'solve':<12} {'NumPy s':>8} {'Keras 1st s':>11} {'Keras s':>8} "
          f"{'Keras/NumPy':>11} {'agree':>7}")
    for backend in [b for b in args.backends.split(",") if b]:
        env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", ""))
        command = [sys.executable, __file__, "--child", "--repeat", str(args.repeat)] + (["--quick"] if args.quick else [])
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{backend}: {done.stderr[-3000:]}")
        for r in json.loads(done.stdout.strip().splitlines()[-1]):
            print(f"{backend:<11} {r['layer']:<21} {r['solve']:<12} {r['numpy_s']:>8.3f} {r['keras_first_s']:>11.3f} "
                  f"{r['keras_s']:>8.3f} {r['keras_s'] / r['numpy_s']:>11.2f} {r['agree']:>7.4f}")


if __name__ == "__main__":
    main()
