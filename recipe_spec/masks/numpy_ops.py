""":class:`~recipe_spec.masks.ops.ArrayOps` over NumPy arrays: what the Keras backend computes
masks with (Keras variables are read into NumPy once per update). Imported only by backends
and tests, never by ``import recipe_spec``.

>>> from recipe_spec.masks import unstructured_mask
>>> unstructured_mask(NUMPY_OPS, np.array([0.3, 0.1, 0.2, 0.1]), 0.5).tolist()
[True, False, True, False]
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .ops import InPlaceOps, SelectionLimits

__all__ = ["NumpyOps", "NUMPY_OPS", "round_fp8_e4m3", "transposed"]

#: Arrays (or lists of them) up to this many entries go straight to ``np.partition``.
_DIRECT_SELECT = 1 << 16
#: Size of the random sample that brackets the k-th smallest value of larger ones.
_SAMPLE = 1 << 14
#: Flags counted per block when locating the n-th tied entry.
_CHUNK = 1 << 14


class NumpyOps(InPlaceOps):
    """NumPy primitives. Selection (:mod:`recipe_spec.masks.selection`) runs ``np.partition``
    (introselect, exact) on small inputs, on a sample and on the few entries near the answer:
    not on all of a large array, where introselect is slow when many values are equal (the
    zeros of a pruned weight)."""

    def describe_shape(self, shape: Sequence[int]) -> str:
        return str([int(d) for d in shape])

    def is_floating(self, x: np.ndarray) -> bool:
        return x.dtype.kind in "fc" or x.dtype.name == "bfloat16"

    def astype(self, x: np.ndarray, dtype: str) -> np.ndarray:
        return np.asarray(x).astype(dtype)

    def isnan(self, x: np.ndarray) -> np.ndarray:
        return np.isnan(x)

    def isfinite(self, x: np.ndarray) -> np.ndarray:
        return np.isfinite(x)

    def sum_all(self, x: np.ndarray) -> float:
        with np.errstate(over="ignore", invalid="ignore"):  # inf / NaN are the point here
            return float(np.sum(x))

    def count_nonzero(self, x: np.ndarray) -> int:
        return int(np.count_nonzero(x))

    def full(self, shape: Sequence[int], value: bool, like: np.ndarray) -> np.ndarray:
        return np.full(tuple(shape), value, dtype=bool)

    def expand(self, x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
        return np.broadcast_to(x, tuple(shape)).copy()

    def concat(self, xs: Sequence[np.ndarray], axis: int) -> np.ndarray:
        return np.concatenate(xs, axis=axis)

    def selection_limits(self) -> SelectionLimits:
        return SelectionLimits(_DIRECT_SELECT, _SAMPLE, _CHUNK)

    def kth_direct(self, flat: np.ndarray, k: int) -> np.generic:
        return np.partition(flat, k - 1)[k - 1]

    def random_sample(self, flats: Sequence[np.ndarray], counts: Sequence[int], seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return np.concatenate([f[rng.integers(0, f.shape[0], c)] for f, c in zip(flats, counts, strict=True)])

    def row_counts(self, flags: np.ndarray) -> np.ndarray:
        return np.count_nonzero(flags, axis=1)

    def cumsum(self, x: np.ndarray) -> np.ndarray:
        return np.cumsum(x)

    def flat_nonzero(self, flags: np.ndarray) -> np.ndarray:
        return np.flatnonzero(flags)

    # -- linear algebra (recipe_spec.pruning.second_order.ops.FisherOps) --------------------------
    def zeros(self, shape: Sequence[int], like: np.ndarray) -> np.ndarray:
        return np.zeros(tuple(shape), dtype=like.dtype)

    def eye(self, n: int, like: np.ndarray) -> np.ndarray:
        return np.eye(n, dtype=like.dtype)

    def cast(self, x: np.ndarray, like: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=like.dtype)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.matmul(a, b)

    def permute(self, x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
        if np.ndim(x) == 2 and tuple(axes) == (1, 0):
            return transposed(x)
        return np.ascontiguousarray(np.transpose(x, tuple(axes)))

    def permute_view(self, x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
        return np.transpose(x, tuple(axes))

    def same_values(self, a: np.ndarray, b: np.ndarray) -> bool:
        return a is b  # NumPy keeps no write counter: only the one array is known unchanged

    def inverse(self, a: np.ndarray) -> np.ndarray:
        return np.linalg.inv(a)

    def cholesky(self, a: np.ndarray) -> np.ndarray | None:
        potrf = _scipy("lapack", "potrf", a)
        if potrf is not None:  # SciPy's LAPACK: twice NumPy's speed here
            lower, info = potrf(a, lower=1, clean=1)
            return lower if info == 0 else None
        try:
            return np.linalg.cholesky(a)
        except np.linalg.LinAlgError:
            return None

    def solve(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.linalg.solve(a, b)

    def lower_inverse(self, r: np.ndarray) -> None:
        return None  # NumPy has no batched triangular solve: inverted by doubling

    def working_entries(self, like: np.ndarray) -> int:
        return 1 << 20

    def sum(self, x: np.ndarray, axis: int) -> np.ndarray:
        return np.sum(x, axis=axis)

    def diagonal(self, x: np.ndarray) -> np.ndarray:
        return np.diagonal(x, axis1=-2, axis2=-1).copy()

    def take(self, x: np.ndarray, index: np.ndarray) -> np.ndarray:
        return x[index]

    def put(self, x: np.ndarray, index: np.ndarray, values: np.ndarray) -> np.ndarray:
        x[index] = values
        return x

    def where(self, flags: np.ndarray, a: np.ndarray, b: np.ndarray | float) -> np.ndarray:
        return np.where(flags, a, b)

    def min_value(self, x: np.ndarray) -> float:
        return float(np.min(x))

    def stack(self, xs: Sequence[np.ndarray], axis: int) -> np.ndarray:
        return np.stack(list(xs), axis=axis)

    def to_device(self, x: np.ndarray, device: object) -> np.ndarray:
        if str(device) != "cpu":
            raise ValueError(f"NumPy arrays live on the CPU only, not on {device!r}")
        return x

    def device_of(self, x: np.ndarray) -> str:
        return "cpu"

    # -- one-shot solvers (recipe_spec.pruning.second_order.ops.SolverOps) ------------------------
    def copy(self, x: np.ndarray) -> np.ndarray:
        return np.array(x, copy=True)

    def mean(self, x: np.ndarray) -> np.ndarray:
        return np.mean(x)

    def sqrt(self, x: np.ndarray) -> np.ndarray:
        return np.sqrt(x)

    def row_norms(self, x: np.ndarray) -> np.ndarray:
        return np.linalg.norm(x, axis=1)

    def subtract_outer(self, x: np.ndarray, start: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        # the products into a buffer kept per thread (a new array each step costs more than the
        # arithmetic: fresh pages); a BLAS product of a column by a row is 3x slower here
        products = _scratch(a.shape[0] * b.shape[0], x.dtype).reshape(a.shape[0], b.shape[0])
        np.multiply(a[:, None], b[None, :], out=products)
        target = x[start:]
        np.subtract(target, products, out=target)
        return x

    def gram(self, a: np.ndarray) -> np.ndarray:
        syrk = _scipy("blas", "syrk", a)
        if syrk is None:
            return a @ a.T
        # the upper triangle in Fortran order is the lower one of a C-ordered array: its sum with
        # the running Hessian reads both in their own order
        return syrk(1.0, a, lower=0).T  # type: ignore[no-any-return]

    def gram_matrix(self, h: np.ndarray) -> np.ndarray:
        if _scipy("blas", "syrk", h) is None:  # gram() made whole products
            return h
        return np.where(_lower_mask(h.shape[0]), h, h.T)

    def scale_add(self, x: np.ndarray, alpha: float, y: np.ndarray) -> np.ndarray:
        if alpha != 1.0:  # x·1 is x: no pass over x
            x *= alpha
        x += y
        return x

    def add_diagonal(self, a: np.ndarray, values: np.ndarray | float) -> np.ndarray:
        np.einsum("ii->i", a)[...] += values  # a writable view of the diagonal
        return a

    def inverse_upper_factor(self, lower: np.ndarray) -> np.ndarray | None:
        potri, potrf = _scipy("lapack", "potri", lower), _scipy("lapack", "potrf", lower)
        if potri is not None and potrf is not None:  # LAPACK's inverse from the factor
            inv, info = potri(lower, lower=1)  # (as torch.cholesky_inverse): its lower triangle
            if info == 0:  # is all potrf reads: no mirror, and the inverse is factored in place
                factor, info = potrf(inv, lower=1, clean=1, overwrite_a=1)
                return np.ascontiguousarray(factor.T) if info == 0 else None
        inv = np.linalg.inv(lower)
        factor = self.cholesky(inv.T @ inv)
        return None if factor is None else np.ascontiguousarray(factor.T)

    def argsort_last(self, x: np.ndarray) -> np.ndarray:
        return np.argsort(x, axis=-1, kind="stable")

    def scatter_last(self, flags: np.ndarray, index: np.ndarray, value: bool) -> np.ndarray:
        np.put_along_axis(flags, index, value, axis=-1)
        return flags

    def assign(self, x: np.ndarray, index: tuple, values: np.ndarray | float) -> np.ndarray:
        x[index] = values
        return x

    def subtract(self, x: np.ndarray, index: tuple, values: np.ndarray) -> np.ndarray:
        x[index] -= values
        return x

    def serial(self, like: np.ndarray) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def index_select(self, x: np.ndarray, axis: int, index: np.ndarray) -> np.ndarray:
        return np.take(x, index, axis=axis)

    # -- the quantization grid (recipe_spec.quantization.ops.QuantOps) ----------------------------
    def round_even(self, x: np.ndarray) -> np.ndarray:
        return np.rint(x)  # np.round's values (halves to even), without its Python wrapper

    def divide(self, x: np.ndarray, value: float) -> np.ndarray:
        return x / np.asarray(value, dtype=x.dtype)

    def clip(self, x: np.ndarray, low: float, high: float) -> np.ndarray:
        return np.minimum(np.maximum(x, low), high)  # np.clip's values, two ufuncs with no wrapper

    def minimum(self, x: np.ndarray, y: np.ndarray | float) -> np.ndarray:
        return np.minimum(x, y)

    def maximum(self, x: np.ndarray, y: np.ndarray | float) -> np.ndarray:
        return np.maximum(x, y)

    def amin(self, x: np.ndarray, axis: int) -> np.ndarray:
        return np.amin(x, axis=axis, keepdims=True)

    def amax(self, x: np.ndarray, axis: int) -> np.ndarray:
        return np.amax(x, axis=axis, keepdims=True)

    def round_fp8_e4m3(self, x: np.ndarray) -> np.ndarray:
        return round_fp8_e4m3(x)

    def frexp(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m, e = np.frexp(x)
        return m, e.astype(x.dtype)

    def ldexp(self, m: np.ndarray, e: np.ndarray) -> np.ndarray:
        return np.ldexp(m, e.astype(np.int32)).astype(m.dtype, copy=False)

    # -- smoothing (recipe_spec.oneshot.smoothquant.solve.SmoothingOps) ------------------------------
    def log2(self, x: np.ndarray) -> np.ndarray:
        return np.log2(x)


def round_fp8_e4m3(x: np.ndarray) -> np.ndarray:
    """Each entry rounded to the nearest ``float8_e4m3fn`` value, ties to even, in ``x``'s
    dtype (NumPy has no FP8 type). e4m3fn has 3 mantissa bits and exponent bias 7: a binade
    ``[2^e, 2^(e+1))`` with ``e >= -6`` holds 8 values ``2^(e-3)`` apart, and below ``2^-6`` the
    subnormals are ``2^-9`` apart. Dividing by that step is exact (a power of two), so
    ``round(|x| / step) · step`` is the correctly rounded value. Entries must lie within
    ``[-448, 448]`` (the grid clamps them first): beyond it e4m3fn has only NaN."""
    x = np.asarray(x)
    mag = np.abs(x)
    _, exp = np.frexp(mag)  # mag = f·2^exp, f in [0.5, 1): its binade is 2^(exp - 1)
    step = np.ldexp(np.ones_like(mag), np.maximum(exp - 1, -6) - 3)
    return np.copysign(np.round(mag / step) * step, x).astype(x.dtype, copy=False)


#: Rows of the source copied at a time by :func:`transposed`, and the size below which NumPy's
#: own copy is as fast.
_BAND, _SMALL = 16, 1 << 16


def transposed(x: np.ndarray) -> np.ndarray:
    """The transpose of a 2-D array as a new C-contiguous array, the same values as
    ``np.ascontiguousarray(x.T)``, copied a band of ``x``'s rows at a time. NumPy's own copy
    walks ``x`` down its columns; where a row is a power of two bytes long (a 1536 x 512
    float32 weight), those reads all fall in the same few cache sets: 5.3 ms for that weight,
    0.8 ms in bands (a 4096 x 4096 one: 149 ms, 62 ms).

    >>> transposed(np.arange(6).reshape(2, 3)).tolist()
    [[0, 3], [1, 4], [2, 5]]
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"transposed() takes a 2-D array, got {x.ndim}-D")
    rows, cols = x.shape
    if x.size < _SMALL:
        return np.ascontiguousarray(x.T)
    out = np.empty((cols, rows), dtype=x.dtype)
    for i in range(0, rows, _BAND):
        out[:, i:i + _BAND] = x[i:i + _BAND].T
    return out


_BUFFERS = threading.local()


def _scratch(size: int, dtype: np.dtype) -> np.ndarray:
    """A 1-D array of at least ``size`` entries of ``dtype``, reused by this thread (its
    contents are the caller's until the next call)."""
    key = np.dtype(dtype).str
    held = getattr(_BUFFERS, "arrays", None)
    if held is None:
        held = _BUFFERS.arrays = {}
    buffer = held.get(key)
    if buffer is None or buffer.size < size:
        buffer = held[key] = np.empty(size, dtype=dtype)
    return buffer[:size]


@functools.lru_cache(maxsize=8)
def _lower_mask(n: int) -> np.ndarray:
    return np.tri(n, dtype=bool)


def _scipy(kind: str, name: str, like: np.ndarray) -> Any:
    """SciPy's ``kind`` (``"blas"``, ``"lapack"``) routine ``name`` for ``like``'s dtype, or None
    without SciPy (it comes with JAX and scikit-learn; NumPy's own routines are used otherwise)."""
    if like.dtype not in (np.float32, np.float64) or like.ndim != 2:
        return None
    try:
        from scipy.linalg import blas, lapack
    except ImportError:
        return None
    module = blas if kind == "blas" else lapack
    return getattr(module, f"get_{kind}_funcs")((name,), (like,))[0]


#: The one instance the backends use.
NUMPY_OPS = NumpyOps()
