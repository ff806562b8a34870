"""The weight copies of the Keras host on NumPy: a weight's transpose made contiguous, and a
quantized weight's integers and grid values, each against the form it replaced, measured in
the same run.

- ``transpose``: :func:`recipe_spec.masks.numpy_ops.transposed` (a band of rows at a time)
  against ``np.ascontiguousarray(x.T)`` (NumPy's own copy, which reads down the columns), for
  the float32 kernels of the speed anchor (``gate_proj``, ``down_proj``) and of a 7B Llama.
- ``grid``: :func:`recipe_spec_keras.quantized.grid_values` (each group's scale beside a
  ``(rows, groups, size)`` view of the weight) against the same ``grid.quantize`` /
  ``grid.dequantize`` on scales spread over every column (``scale[:, column // size]``), for
  W4A16's int4 groups of 128; the two results are checked equal before timing.
- ``jax``, where JAX is installed: a NumPy array of a shape not seen before taken in by JAX as a
  Keras variable's ``assign`` took it (``jnp.asarray``, which compiles a program per new shape)
  against :func:`recipe_spec_keras.params.host_to_backend`'s ``jax.device_put``; each call a new
  shape, so every call of the old form compiles.

Prints, per case, the median of ``--repeat`` calls of each form (ms) and their ratio.

    python benchmarks/numpy_copies.py [--repeat 20] [--anchor-only]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

SHAPES = {"speed anchor gate_proj (1536 x 512)": (1536, 512), "speed anchor down_proj (512 x 1536)": (512, 1536),
          "7B q_proj (4096 x 4096)": (4096, 4096), "7B down_proj (4096 x 11008)": (4096, 11008)}


def _median_ms(call: Callable[[], Any], repeat: int) -> float:
    call()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _transpose_case(label: str, shape: tuple[int, int], repeat: int) -> tuple[str, float, float]:
    from recipe_spec.masks.numpy_ops import transposed

    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    assert np.array_equal(transposed(x), x.T)
    return (f"transpose {label}", _median_ms(lambda: np.ascontiguousarray(x.T), repeat),
            _median_ms(lambda: transposed(x), repeat))


def _grid_case(label: str, shape: tuple[int, int], repeat: int) -> tuple[str, float, float]:
    from recipe_spec_keras.quantized import grid_values

    from recipe_spec.masks.numpy_ops import NUMPY_OPS
    from recipe_spec.quantization import QuantArgs, minmax_qparams
    from recipe_spec.quantization.grid import dequantize, quantize

    args = QuantArgs(num_bits=4, strategy="group", group_size=128, symmetric=True)
    w = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
    scale, zero = (np.asarray(a, dtype=np.float32) for a in minmax_qparams(NUMPY_OPS, w, args))
    columns = np.arange(shape[1]) // 128

    def spread() -> tuple[np.ndarray, np.ndarray]:
        s, z = scale[:, columns], zero[:, columns]
        q = quantize(NUMPY_OPS, w, s, z, args)
        return q, dequantize(NUMPY_OPS, q, s, z, args)

    for a, b in zip(spread(), grid_values(w, scale, zero, args), strict=True):
        assert np.array_equal(a, b)
    return (f"int4 grid {label}", _median_ms(spread, repeat),
            _median_ms(lambda: grid_values(w, scale, zero, args), repeat))


def _jax_case(repeat: int) -> tuple[str, float, float] | None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    shapes = iter(range(1000, 100000))

    def fresh() -> np.ndarray:
        return np.zeros((next(shapes), 3), np.int8)

    def old() -> None:
        jnp.asarray(fresh()).block_until_ready()

    def new() -> None:
        jax.device_put(fresh()).block_until_ready()

    return "jax: a NumPy array of a new shape in", _median_ms(old, repeat), _median_ms(new, repeat)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--anchor-only", action="store_true", help="only the speed anchor's shapes (not the 7B ones)")
    a = p.parse_args()
    shapes = {k: v for k, v in SHAPES.items() if not a.anchor_only or k.startswith("speed anchor")}
    print(f"{'case':<50} {'before ms':>10} {'now ms':>10} {'now/before':>11}")
    rows = [_transpose_case(label, shape, a.repeat) for label, shape in shapes.items()]
    rows += [_grid_case(label, shape, a.repeat) for label, shape in shapes.items()]
    jax_row = _jax_case(a.repeat)
    rows += [jax_row] if jax_row is not None else []
    for label, before, now in rows:
        print(f"{label:<50} {before:>10.2f} {now:>10.2f} {now / before:>11.2f}")


if __name__ == "__main__":
    main()
