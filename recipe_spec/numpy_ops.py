""":class:`~recipe_spec.array_ops.ArrayOps` over NumPy arrays: what the Keras backend computes
masks with (Keras variables are read into NumPy once per update). Imported only by backends
and tests, never by ``import recipe_spec``.

>>> from recipe_spec.masks import unstructured_mask
>>> unstructured_mask(NUMPY_OPS, np.array([0.3, 0.1, 0.2, 0.1]), 0.5).tolist()
[True, False, True, False]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .array_ops import InPlaceOps

__all__ = ["NumpyOps", "NUMPY_OPS"]


class NumpyOps(InPlaceOps):
    """NumPy primitives; selection is ``np.partition`` (introselect), exact."""

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

    def kth_smallest(self, flats: Sequence[np.ndarray], k: int) -> tuple[np.generic, None]:
        if len(flats) == 1:
            return np.partition(flats[0], k - 1)[k - 1], None
        joined = np.concatenate(flats)  # our own copy: select in place
        joined.partition(k - 1)
        return joined[k - 1], None

    def nth_true(self, flags: np.ndarray, nth: int) -> int:
        return int(np.flatnonzero(flags)[nth - 1])

    def flat_nonzero(self, flags: np.ndarray) -> np.ndarray:
        return np.flatnonzero(flags)


#: The one instance the backends use.
NUMPY_OPS = NumpyOps()
