"""The linear algebra a backend supplies to second-order pruning, besides
:class:`recipe_spec.masks.ops.ArrayOps`. PyTorch: ``recipe_spec_torch.masks.TorchOps``; NumPy
(Keras): :class:`recipe_spec.masks.numpy_ops.NumpyOps`.

Shapes are NumPy's: ``matmul`` batches over leading axes. ``like`` gives the dtype and device
of a new array. The algorithms (:mod:`.fisher`, :mod:`.scoring`) never write into an array
they were given except through :meth:`FisherOps.put`, which takes ownership of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ...masks.ops import Array, ArrayOps

__all__ = ["FisherOps"]


class FisherOps(ArrayOps, Protocol):
    """Linear algebra over a backend's arrays."""

    def zeros(self, shape: Sequence[int], like: Array) -> Array:
        """A new float array of zeros with ``like``'s dtype and device."""

    def eye(self, n: int, like: Array) -> Array:
        """The ``n x n`` identity with ``like``'s dtype and device."""

    def cast(self, x: Array, like: Array) -> Array:
        """``x`` with ``like``'s dtype and on its device."""

    def matmul(self, a: Array, b: Array) -> Array:
        """The (batched) matrix product ``a @ b``."""

    def permute(self, x: Array, axes: Sequence[int]) -> Array:
        """``x`` with its axes in the order ``axes``, as a new contiguous array."""

    def permute_view(self, x: Array, axes: Sequence[int]) -> Array:
        """``x`` with its axes in the order ``axes``, a view of ``x`` where the library has
        strided arrays (else a copy): only read, never written (operands of :meth:`matmul`)."""

    def inverse(self, a: Array) -> Array:
        """The inverses of a batch of symmetric positive definite matrices."""

    def cholesky(self, a: Array) -> Array | None:
        """The lower triangular ``r`` with ``a = r·rᵀ`` for a batch of symmetric matrices
        (only their lower triangles are read), or None when one of them is not positive
        definite to working precision."""

    def solve(self, a: Array, b: Array) -> Array:
        """``a⁻¹ b`` for a batch of square ``a`` and ``b`` of shape ``(..., n, 1)``."""

    def sum(self, x: Array, axis: int) -> Array:
        """The sum along ``axis`` (removed)."""

    def diagonal(self, x: Array) -> Array:
        """The diagonals of a batch of square matrices: ``(..., n, n)`` -> ``(..., n)``."""

    def take(self, x: Array, index: Array) -> Array:
        """``x[index]`` for a 1-D ``x`` and an integer array ``index``."""

    def put(self, x: Array, index: Array, values: Array) -> Array:
        """``x`` (1-D) with ``x[index] = values``; takes ownership of ``x``."""

    def where(self, flags: Array, a: Array, b: Array | float) -> Array:
        """``a`` where ``flags`` is True, else ``b``."""

    def min_value(self, x: Array) -> float:
        """The smallest entry of a non-empty array, as a Python float."""

    def stack(self, xs: Sequence[Array], axis: int) -> Array:
        """Arrays of one shape joined along a new ``axis``."""

    def to_device(self, x: Array, device: Any) -> Array:
        """``x`` on ``device`` (a name such as ``"cuda:0"``; NumPy has only ``"cpu"``)."""

    def device_of(self, x: Array) -> Any:
        """The device ``x`` lives on."""
