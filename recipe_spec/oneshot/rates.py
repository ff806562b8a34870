"""How fast this machine runs what a one-shot run is made of, measured, for the estimate
``lint`` and ``recipe-spec oneshot`` print (:mod:`.checkpoint`).

A run's time is counted in four kinds of work, each at its own measured rate (:class:`Rates`):

- **matrix products** (the forward passes, the Hessians, a solve's block updates): float32
  FLOP/s of a ``(256 x h) · (h x h)`` product, ``h`` the model's width (capped at 1024);
- **factorisations** (a solve's Cholesky factor and inverse): FLOP/s of the Cholesky factor of
  an ``n x n`` matrix (``n³/3`` operations), ``n`` the widest target's input columns (capped);
- **the OBS column loop** (SparseGPT's and GPTQ's column by column update): seconds per column,
  measured on the solver itself at two row counts and taken as ``a + b · rows``; it runs small
  steps one after the other, so its time is set by the library's cost per step, not by FLOP/s;
- **calls**: a fixed cost per block call (hooks, the library's dispatch), from the time of a
  small elementwise step times the steps of a decoder layer (:data:`STEPS_PER_CALL`).

:func:`measure` times them with the arrays of the backend that runs (``ops``: its
:class:`~recipe_spec.pruning.second_order.ops.SolverOps`; NumPy where none is given, as in
``lint``, which imports no framework), in about half a second, once per process and size.
The estimate is printed with a range (:data:`SPREAD`): the rates move with the machine's
load, and the model leaves out what it does not count (attention's softmax, norms, copies).

>>> r = Rates(matmul=1e11, factor=2e10, column_base=2e-5, column_per_row=1e-8, step=5e-6)
>>> round(r.seconds(matmul=1e11, factor=0, columns=[(1000, 1000)], calls=0), 3)
1.03
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Rates", "measure", "SPREAD", "STEPS_PER_CALL"]

#: The printed range: from ``estimate / SPREAD`` to ``estimate · SPREAD``.
SPREAD = 1.6
#: Library steps (kernels, hooks) of one decoder-layer call besides its products.
STEPS_PER_CALL = 60
#: The widest matrices timed (a wider model's rate is taken as this size's).
_CAP = 1024


@dataclass(frozen=True)
class Rates:
    """Measured rates (see the module docstring); ``source`` says what measured them."""

    matmul: float
    factor: float
    column_base: float
    column_per_row: float
    step: float
    source: str = "assumed"

    def column(self, rows: int) -> float:
        """Seconds of one OBS column of a ``rows``-row weight."""
        return self.column_base + self.column_per_row * rows

    def seconds(self, *, matmul: float, factor: float, columns: Sequence[tuple[int, int]], calls: int) -> float:
        """The time of ``matmul`` product FLOPs, ``factor`` factorisation FLOPs, ``columns``
        OBS columns as ``(count, rows)`` pairs and ``calls`` block calls."""
        return (matmul / self.matmul + factor / self.factor + sum(n * self.column(r) for n, r in columns)
                + calls * STEPS_PER_CALL * self.step)


def _best(run: Callable[[], Any], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def measure(ops: Any = None, asarray: Callable[[Any], Any] | None = None, *, width: int = 1024,
            columns: int = 1024, label: str = "") -> Rates:
    """The rates of this machine with ``ops``' arrays (``asarray`` makes one of a float32
    NumPy array; NumPy's own when ``ops`` is None), for a model ``width`` wide whose widest
    target has ``columns`` input columns. Cached per process."""
    return _measure(ops, asarray, min(max(int(width), 64), _CAP), min(max(int(columns), 64), _CAP), label)


@functools.lru_cache(maxsize=8)
def _measure(ops: Any, asarray: Callable[[Any], Any] | None, width: int, columns: int, label: str) -> Rates:
    import numpy as np

    from ..quantization.args import QuantArgs
    from .gptq.solve import gptq_quantize

    if ops is None:
        from ..masks.numpy_ops import NUMPY_OPS as ops
        label = label or "NumPy"

    rng = np.random.default_rng(0)

    def array(*shape: int) -> Any:
        value = rng.standard_normal(shape).astype(np.float32)
        return value if asarray is None else asarray(value)

    a, b = array(256, width), array(width, width)
    _best(lambda: ops.matmul(a, b), 3)  # a library's first products run slower
    matmul = 2.0 * 256 * width * width / _best(lambda: ops.matmul(a, b), 10)
    x = array(2 * columns, columns)
    spd = ops.matmul(ops.permute(x, (1, 0)), x)
    ops.cholesky(spd)
    factor = columns ** 3 / 3.0 / _best(lambda: ops.cholesky(spd))
    width_cols = 128
    inputs = array(512, width_cols)
    hessian = ops.matmul(ops.permute(inputs, (1, 0)), inputs)
    per_column = {}
    for rows in (128, 1024):
        w = array(rows, width_cols)
        args = QuantArgs(num_bits=4, strategy="channel")
        gptq_quantize(ops, w, hessian, args=args)
        per_column[rows] = _best(lambda w=w, args=args: gptq_quantize(ops, w, hessian, args=args), 2) / width_cols
    slope = max((per_column[1024] - per_column[128]) / (1024 - 128), 0.0)
    base = max(per_column[128] - slope * 128, 0.0)
    small = array(64)
    step = _best(lambda: [small * 1.0 for _ in range(100)]) / 100
    return Rates(matmul, factor, base, slope, step, f"measured on this machine ({label or type(ops).__name__})")

