"""How often the Keras backends' float32 elementwise functions give PyTorch's bits.

A one-shot run on Keras calibrates on the activations its framework computes; GPTQ's column
sweep then carries each rounding decision along its row, so a last-bit difference in an
activation can move a weight to the next grid point and every later column of that row with it.
TensorFlow's matrix products give PyTorch's bits on the CPU (both call oneDNN); JAX's
(XLA's own kernels) do for some shapes and not for others (few tokens, a long reduction);
and the transcendental functions a Llama block runs (``exp`` in softmax and SiLU,
``sin``/``cos`` in the rotary embedding, ``rsqrt`` in RMSNorm) do not: each framework has its
own vectorised approximation. This prints, per function, the fraction of 100,000 float32 inputs
on which TensorFlow and JAX return exactly PyTorch's value (PyTorch, the baseline, against
itself: 1.0), and the largest difference in units in the last place.

    python benchmarks/elementwise_agreement.py [--n 100000]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

#: ``[tokens, in] @ [in, out]`` as a Llama block's Linear layers see them (tokens: a short and a long batch)
SHAPES = ((7, 256, 768), (37, 256, 256), (100, 256, 256), (64, 768, 256), (512, 768, 256))
FUNCTIONS = (*(f"matmul {m}x{k}x{n}" for m, k, n in SHAPES), "exp", "sin", "cos", "rsqrt", "sigmoid", "tanh", "log")


def _inputs(n: int) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    pairs = [(rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, o)).astype(np.float32))
             for m, k, o in SHAPES]
    return x, np.abs(x) + np.float32(1e-3), pairs


def _products(matmul: Any, pairs: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
    return {f"matmul {m}x{k}x{o}": matmul(a, b) for (m, k, o), (a, b) in zip(SHAPES, pairs, strict=True)}


def torch_values(n: int) -> dict[str, np.ndarray]:
    import torch

    x, p, pairs = _inputs(n)
    out = _products(lambda a, b: torch.from_numpy(a) @ torch.from_numpy(b), pairs)
    x, p = torch.from_numpy(x), torch.from_numpy(p)
    out |= {"exp": torch.exp(x), "sin": torch.sin(x), "cos": torch.cos(x), "rsqrt": torch.rsqrt(p),
           "sigmoid": torch.sigmoid(x), "tanh": torch.tanh(x), "log": torch.log(p)}
    return {k: v.numpy() for k, v in out.items()}


def tensorflow_values(n: int) -> dict[str, np.ndarray]:
    import tensorflow as tf

    x, p, pairs = _inputs(n)
    out = _products(tf.matmul, pairs)
    out |= {"exp": tf.exp(x), "sin": tf.sin(x), "cos": tf.cos(x),
           "rsqrt": tf.math.rsqrt(p), "sigmoid": tf.sigmoid(x), "tanh": tf.tanh(x), "log": tf.math.log(p)}
    return {k: v.numpy() for k, v in out.items()}


def jax_values(n: int) -> dict[str, np.ndarray]:
    import jax
    import jax.numpy as jnp

    x, p, pairs = _inputs(n)
    out = {k: np.asarray(v) for k, v in _products(jax.jit(jnp.dot), pairs).items()}
    fns: dict[str, Any] = {"exp": lambda: jnp.exp(x), "sin": lambda: jnp.sin(x),
                           "cos": lambda: jnp.cos(x), "rsqrt": lambda: jax.lax.rsqrt(p),
                           "sigmoid": lambda: jax.nn.sigmoid(x), "tanh": lambda: jnp.tanh(x), "log": lambda: jnp.log(p)}
    return out | {k: np.asarray(jax.jit(f)()) for k, f in fns.items()}


def ulps(a: np.ndarray, b: np.ndarray) -> int:
    """The largest distance between ``a`` and ``b`` in float32 units in the last place."""
    ia, ib = (v.astype(np.float32).view(np.int32).astype(np.int64) for v in (a, b))
    ia = np.where(ia < 0, np.int64(-(2**31)) - ia, ia)
    ib = np.where(ib < 0, np.int64(-(2**31)) - ib, ib)
    return int(np.abs(ia - ib).max())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    args = p.parse_args(argv)
    base = torch_values(args.n)
    others = {"pytorch": base, "tensorflow": tensorflow_values(args.n), "jax": jax_values(args.n)}
    print(f"fraction of {args.n:,} float32 inputs equal to PyTorch's value (max ulps apart)")
    print(f"{'function':<22}" + "".join(f"{name:>20}" for name in others))
    for f in FUNCTIONS:
        cells = [f"{float(np.mean(v[f] == base[f])):.4f} ({ulps(v[f], base[f])})" for v in others.values()]
        print(f"{f:<22}" + "".join(f"{c:>20}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
