"""The one-shot solvers' array operations over Keras 3's own tensors (:class:`KerasOps`):
:class:`recipe_spec.pruning.second_order.ops.SolverOps` written with ``keras.ops`` (TensorFlow,
JAX and torch tensors, on whichever device Keras places them), so that SparseGPT's, GPTQ's and
Wanda's solves (:mod:`recipe_spec.oneshot.shared.obs`, :mod:`recipe_spec.oneshot.gptq.solve`,
the Hessian factorisations) run where the model runs instead of through NumPy.

Keras tensors are treated as immutable: the writing methods (``assign``, ``subtract``,
``put``, ...) return a new tensor (``keras.ops.slice_update``, ``scatter_update``). Three
things Keras does not say are taken from the backend itself: a stable sort
(``tf.argsort(stable=True)``; JAX's and torch's sorts are stable when asked), the bits of a
float (``frexp``/``ldexp`` are exact bit operations, as NumPy's), and the device.

The Keras calibration host solves with these where Keras runs on an accelerator
(:func:`solver_for`); on a CPU NumPy's LAPACK and its in-place updates are faster, and the host
keeps :data:`recipe_spec.masks.numpy_ops.NUMPY_OPS`.

>>> import numpy as np
>>> ops = KerasOps()
>>> x = ops.assign(ops.zeros((2, 3), np.zeros(1, np.float32)), (1, slice(0, 2)), 5.0)
>>> keras.ops.convert_to_numpy(x).tolist()
[[0.0, 0.0, 0.0], [5.0, 5.0, 0.0]]
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

import keras
from recipe_spec.masks.ops import SelectionLimits
from recipe_spec.oneshot.shared.solver import Solver

from .float_bits import frexp, ldexp

__all__ = ["KERAS_OPS", "KerasOps", "SOLVES_VARIABLE", "on_accelerator", "solver_for"]

K = keras.ops

#: The sizes of :mod:`recipe_spec.masks.selection` (as NumPy's and torch's).
_LIMITS = SelectionLimits(1 << 16, 1 << 14, 1 << 14)



def _backend() -> str:
    return keras.backend.backend()


def _scalar_like(value: float, x: Any) -> Any:
    return K.convert_to_tensor(value, dtype=x.dtype)


class KerasOps:
    """:class:`~recipe_spec.pruning.second_order.ops.SolverOps` over Keras tensors (see the
    module docstring). Arrays it is given may be NumPy arrays; it returns Keras tensors."""

    # -- recipe_spec.masks.ops.ArrayOps ---------------------------------------------------------
    def describe_shape(self, shape: Sequence[int]) -> str:
        return str([int(d) for d in shape])

    def is_floating(self, x: Any) -> bool:
        return "float" in str(keras.backend.standardize_dtype(x.dtype))

    def astype(self, x: Any, dtype: str) -> Any:
        return K.cast(x, dtype)

    def abs(self, x: Any) -> Any:
        return K.abs(x)

    def isnan(self, x: Any) -> Any:
        return K.isnan(x)

    def isfinite(self, x: Any) -> Any:
        return K.isfinite(x)

    def sum_all(self, x: Any) -> float:
        return float(K.convert_to_numpy(K.sum(x)))

    def count_nonzero(self, x: Any) -> int:
        return int(K.convert_to_numpy(K.sum(K.cast(K.not_equal(x, K.zeros((), x.dtype)), "int32"))))

    def full(self, shape: Sequence[int], value: bool, like: Any) -> Any:
        return K.full(tuple(int(d) for d in shape), value, dtype="bool")

    def reshape(self, x: Any, shape: Sequence[int]) -> Any:
        return K.reshape(x, tuple(int(d) for d in shape))

    def expand(self, x: Any, shape: Sequence[int]) -> Any:
        return K.copy(K.broadcast_to(x, tuple(int(d) for d in shape)))

    def concat(self, xs: Sequence[Any], axis: int) -> Any:
        return K.concatenate(list(xs), axis=axis)

    def selection_limits(self) -> SelectionLimits:
        return _LIMITS

    def kth_direct(self, flat: Any, k: int) -> Any:
        return K.sort(flat)[k - 1]

    def random_sample(self, flats: Sequence[Any], counts: Sequence[int], seed: int) -> Any:
        rng = np.random.default_rng(seed)  # the draws (positions) on the host, the values where they live
        return K.concatenate([K.take(f, rng.integers(0, int(f.shape[0]), c).astype(np.int32))
                              for f, c in zip(flats, counts, strict=True)])

    def row_counts(self, flags: Any) -> Any:
        return K.count_nonzero(flags, axis=1)

    def cumsum(self, x: Any) -> Any:
        return K.cumsum(x)

    def or_prefix(self, keep: Any, flags: Any, stop: int) -> Any:
        if stop <= 0:
            return keep
        return K.slice_update(keep, (0,), K.logical_or(keep[:stop], flags[:stop]))

    def flat_nonzero(self, flags: Any) -> Any:
        return K.cast(K.nonzero(K.reshape(flags, (-1,)))[0], "int32")

    def compress(self, x: Any, flags: Any) -> Any:
        return K.take(x, self.flat_nonzero(flags))

    def set_true(self, keep: Any, positions: Any) -> Any:
        if int(positions.shape[0]) == 0:
            return keep
        return K.scatter_update(keep, K.reshape(positions, (-1, 1)), K.ones((int(positions.shape[0]),), "bool"))

    # -- linear algebra (FisherOps) ---------------------------------------------------------------
    def zeros(self, shape: Sequence[int], like: Any) -> Any:
        return K.zeros(tuple(int(d) for d in shape), dtype=like.dtype)

    def eye(self, n: int, like: Any) -> Any:
        return K.eye(n, dtype=like.dtype)

    def cast(self, x: Any, like: Any) -> Any:
        return K.cast(x, like.dtype)

    def matmul(self, a: Any, b: Any) -> Any:
        return K.matmul(a, b)

    def permute(self, x: Any, axes: Sequence[int]) -> Any:
        return K.transpose(x, tuple(axes))

    def permute_view(self, x: Any, axes: Sequence[int]) -> Any:
        return K.transpose(x, tuple(axes))

    def same_values(self, a: Any, b: Any) -> bool:
        return a is b  # a tensor is never written: the one object is the same values

    def inverse(self, a: Any) -> Any:
        return K.linalg.inv(a)

    def cholesky(self, a: Any) -> Any | None:
        try:  # TensorFlow raises on a matrix that is not positive definite, JAX returns NaN
            r = K.linalg.cholesky(a)
        except Exception:  # noqa: BLE001 - each backend's own error type
            return None
        return r if bool(K.convert_to_numpy(K.all(K.isfinite(r)))) else None

    def solve(self, a: Any, b: Any) -> Any:
        return K.linalg.solve(a, b)

    def lower_inverse(self, r: Any) -> Any | None:
        eye = K.broadcast_to(K.eye(int(r.shape[-1]), dtype=r.dtype), tuple(r.shape))
        return K.linalg.solve_triangular(r, eye, lower=True)

    def working_entries(self, like: Any) -> int:
        return 1 << 20 if self.device_of(like) == "cpu" else 1 << 24

    def sum(self, x: Any, axis: int) -> Any:
        return K.sum(x, axis=axis)

    def diagonal(self, x: Any) -> Any:
        return K.diagonal(x, axis1=-2, axis2=-1)

    def take(self, x: Any, index: Any) -> Any:
        return K.take(x, index)

    def put(self, x: Any, index: Any, values: Any) -> Any:
        return K.scatter_update(x, K.reshape(index, (-1, 1)), K.reshape(K.cast(values, x.dtype), (-1,)))

    def where(self, flags: Any, a: Any, b: Any) -> Any:
        b = _scalar_like(b, a) if isinstance(b, (int, float)) else b
        return K.where(flags, a, b)

    def min_value(self, x: Any) -> float:
        return float(K.convert_to_numpy(K.min(x)))

    def stack(self, xs: Sequence[Any], axis: int) -> Any:
        return K.stack(list(xs), axis=axis)

    def to_device(self, x: Any, device: Any) -> Any:
        with keras.device(str(device)):
            return K.copy(x)

    def device_of(self, x: Any) -> str:
        return _device_kind(x)

    # -- the one-shot solvers (SolverOps) -----------------------------------------------------------
    def copy(self, x: Any) -> Any:
        return K.copy(x)

    def mean(self, x: Any) -> Any:
        return K.mean(x)

    def sqrt(self, x: Any) -> Any:
        return K.sqrt(x)

    def row_norms(self, x: Any) -> Any:
        return K.sqrt(K.sum(x * x, axis=1))

    def subtract_outer(self, x: Any, start: int, a: Any, b: Any) -> Any:
        products = K.expand_dims(a, 1) * K.expand_dims(b, 0)  # one product per entry
        return K.slice_update(x, (start, 0), x[start:] - products)

    def gram(self, a: Any) -> Any:
        return K.matmul(a, K.transpose(a))

    def gram_matrix(self, h: Any) -> Any:
        return h

    def scale_add(self, x: Any, alpha: float, y: Any) -> Any:
        return (x if alpha == 1.0 else x * _scalar_like(alpha, x)) + y

    def add_diagonal(self, a: Any, values: Any) -> Any:
        n = int(a.shape[-1])
        if isinstance(values, (int, float)):
            values = K.full((n,), values, dtype=a.dtype)
        diagonal = K.diagonal(a) + values
        flat = K.reshape(a, (-1,))
        index = K.reshape(K.arange(n, dtype="int32") * (n + 1), (-1, 1))
        return K.reshape(K.scatter_update(flat, index, diagonal), (n, n))

    def inverse_upper_factor(self, lower: Any) -> Any | None:
        inv = K.linalg.cholesky_inverse(lower)  # (L·Lᵀ)⁻¹, as torch.cholesky_inverse
        factor = self.cholesky(inv)
        return None if factor is None else K.transpose(factor)

    def argsort_last(self, x: Any) -> Any:
        return _stable_argsort(x)

    def scatter_last(self, flags: Any, index: Any, value: bool) -> Any:
        n, k = int(flags.shape[-1]), int(index.shape[-1])
        rows = int(np.prod([int(d) for d in flags.shape[:-1]]))
        if rows * k == 0:
            return flags
        offsets = K.reshape(K.arange(rows, dtype="int32") * n, (rows, 1))
        flat = K.reshape(K.cast(K.reshape(index, (rows, k)), "int32") + offsets, (-1, 1))
        updated = K.scatter_update(K.reshape(flags, (-1,)), flat, K.full((rows * k,), value, dtype="bool"))
        return K.reshape(updated, tuple(flags.shape))

    def assign(self, x: Any, index: tuple[Any, ...], values: Any) -> Any:
        start, shape, kept = _region(tuple(int(d) for d in x.shape), index)
        if isinstance(values, (int, float)):
            values = K.full(kept, values, dtype=x.dtype)
        values = K.broadcast_to(K.cast(values, x.dtype), kept)
        return K.slice_update(x, start, K.reshape(values, shape))

    def subtract(self, x: Any, index: tuple[Any, ...], values: Any) -> Any:
        return self.assign(x, index, x[index] - values)

    def serial(self, like: Any) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # the backend's own threads: its elementwise work is one launch

    def index_select(self, x: Any, axis: int, index: Any) -> Any:
        return K.take(x, index, axis=axis)

    # -- the quantization grid (QuantOps) ---------------------------------------------------------
    def round_even(self, x: Any) -> Any:
        return K.round(x)  # halves to even on every backend

    def divide(self, x: Any, value: float) -> Any:
        # by an array of x's shape: XLA turns a division by a broadcast scalar into a product
        # with its reciprocal (one unit in the last place off at times)
        return x / K.full_like(x, value)

    def clip(self, x: Any, low: float, high: float) -> Any:
        return K.minimum(K.maximum(x, _scalar_like(low, x)), _scalar_like(high, x))

    def minimum(self, x: Any, y: Any) -> Any:
        return K.minimum(x, _scalar_like(y, x) if isinstance(y, (int, float)) else y)

    def maximum(self, x: Any, y: Any) -> Any:
        return K.maximum(x, _scalar_like(y, x) if isinstance(y, (int, float)) else y)

    def amin(self, x: Any, axis: int) -> Any:
        return K.min(x, axis=axis, keepdims=True)

    def amax(self, x: Any, axis: int) -> Any:
        return K.max(x, axis=axis, keepdims=True)

    def round_fp8_e4m3(self, x: Any) -> Any:
        # NumPy's formula (recipe_spec.masks.numpy_ops.round_fp8_e4m3): the binade's step is a
        # power of two, so |x| / step is exact and one rounding gives the nearest e4m3fn value
        mag = K.abs(x)
        _, exp = self.frexp(mag)
        step = self.ldexp(K.ones_like(mag), K.maximum(exp - 1, _scalar_like(-6, exp)) - 3)
        rounded = K.round(mag / step) * step
        return K.where(x < 0, -rounded, rounded)

    def frexp(self, x: Any) -> tuple[Any, Any]:
        return frexp(x)

    def ldexp(self, m: Any, e: Any) -> Any:
        return ldexp(m, e)

    # -- smoothing (SmoothingOps) -----------------------------------------------------------------
    def log2(self, x: Any) -> Any:
        return K.log2(x)


def _region(shape: tuple[int, ...], index: tuple[Any, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """For ``x[index]`` (ints and slices of step 1): its start along each axis, its shape with
    every axis (an int's of length 1), and its shape as indexing gives it (ints dropped)."""
    start, full, kept = [], [], []
    for axis, size in enumerate(shape):
        item = index[axis] if axis < len(index) else slice(None)
        if isinstance(item, slice):
            lo, hi, step = item.indices(size)
            if step != 1:
                raise ValueError(f"KerasOps writes slices of step 1, got {item!r}")
            length = max(hi - lo, 0)
            start.append(lo)
            full.append(length)
            kept.append(length)
        else:
            i = int(item) + size if int(item) < 0 else int(item)
            start.append(i)
            full.append(1)
    return tuple(start), tuple(full), tuple(kept)


def _device_kind(x: Any) -> str:
    """``"cpu"``, ``"gpu"`` or ``"tpu"``: where a tensor of the current backend lives."""
    backend = _backend()
    if isinstance(x, np.ndarray):
        return "cpu"
    if backend == "jax":
        devices = getattr(x, "devices", None)
        return next(iter(devices())).platform if devices is not None else "cpu"
    if backend == "torch":
        return "cpu" if x.device.type == "cpu" else "gpu"
    device = str(getattr(x, "device", "") or "").upper()
    return "gpu" if ":GPU:" in device else "tpu" if ":TPU:" in device else "cpu"


def _stable_argsort(x: Any) -> Any:
    """Indices sorting ``x`` along its last axis, equal values in their order."""
    backend = _backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.argsort(x, axis=-1, stable=True)
    if backend == "jax":
        import jax.numpy as jnp

        return jnp.argsort(x, axis=-1, stable=True)
    if backend == "torch":
        import torch

        return torch.sort(K.convert_to_tensor(x), dim=-1, stable=True)[1]
    raise ValueError(f"KerasOps has no stable sort on the {backend!r} backend")


#: The one instance the Keras host uses.
KERAS_OPS = KerasOps()


#: The environment variable that picks where the Keras host solves: ``auto`` (Keras's tensors
#: where Keras runs on an accelerator, NumPy on a CPU), ``keras`` or ``numpy``.
SOLVES_VARIABLE = "RECIPE_SPEC_KERAS_SOLVES"


def on_accelerator() -> bool:
    """Whether Keras's backend places new tensors on a GPU or TPU."""
    backend = _backend()
    if backend == "jax":
        import jax

        return jax.default_backend() != "cpu"
    if backend == "tensorflow":
        import tensorflow as tf

        return bool(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))
    if backend == "torch":
        import torch

        return bool(torch.cuda.is_available())  # Keras's torch backend places tensors on CUDA when there is one
    return False


def solver_for(where: str | None = None) -> Solver | None:
    """The :class:`~recipe_spec.oneshot.shared.solver.Solver` the Keras host solves on, None for
    its own NumPy arrays. ``where``: ``"auto"``, ``"keras"`` or ``"numpy"`` (None: the
    ``RECIPE_SPEC_KERAS_SOLVES`` environment variable, ``auto`` when unset)."""
    chosen = (where if where is not None else os.environ.get(SOLVES_VARIABLE, "") or "auto").strip().lower()
    if chosen not in ("auto", "keras", "numpy"):
        raise ValueError(f"{SOLVES_VARIABLE}={chosen!r} is not a place to solve: write auto (Keras's tensors "
                         "on an accelerator, NumPy on a CPU), keras or numpy")
    if chosen == "numpy" or (chosen == "auto" and not on_accelerator()):
        return None
    return Solver(KERAS_OPS, _to_tensor, _to_numpy)


def _to_tensor(x: Any) -> Any:
    return K.convert_to_tensor(x)


def _to_numpy(x: Any) -> np.ndarray:
    return np.asarray(K.convert_to_numpy(x))
