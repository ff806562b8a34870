"""The linear algebra a backend supplies to second-order pruning, besides
:class:`recipe_spec.masks.ops.ArrayOps`. PyTorch: ``recipe_spec_torch.masks.TorchOps``; NumPy
(Keras): :class:`recipe_spec.masks.numpy_ops.NumpyOps`.

Shapes are NumPy's: ``matmul`` batches over leading axes. ``like`` gives the dtype and device
of a new array. The algorithms (:mod:`.fisher`, :mod:`.scoring`) never write into an array
they were given except through :meth:`FisherOps.put`, which takes ownership of it.

:class:`SolverOps` adds what the one-shot solvers (SparseGPT, Wanda: :mod:`.blockwise`,
:mod:`.wanda`, :mod:`.hessian`) need. Its writing methods (``assign``, ``subtract``,
``add_diagonal``, ``scale_add``, ``scatter_last``) take ownership of the array they write and return the
result: NumPy and PyTorch write in place, a library with immutable arrays returns a new one.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ...masks.ops import Array, ArrayOps
from ...quantization.ops import QuantOps

__all__ = ["FisherOps", "SolverOps"]


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

    def lower_inverse(self, r: Array) -> Array | None:
        """``r⁻¹`` for a batch of lower triangular matrices by one batched triangular solve,
        where the library's is fast for many small matrices (a GPU); else None, and the
        caller inverts by doubling with batched products (one small LAPACK call per matrix
        stalls on a busy CPU)."""

    def working_entries(self, like: Array) -> int:
        """How many entries a temporary may hold on ``like``'s device: the size of the pieces
        a long computation is cut into (small on a CPU, for its caches; large on a GPU, where
        each piece costs a launch)."""

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


class SolverOps(FisherOps, QuantOps, Protocol):
    """What SparseGPT, GPTQ and Wanda need besides :class:`FisherOps` (and, for GPTQ, the
    quantization grid's :class:`~recipe_spec.quantization.ops.QuantOps`). ``astype`` also
    takes ``"float32"`` (the solvers' working precision, as llm-compressor's) and ``"bool"``."""

    def index_select(self, x: Array, axis: int, index: Array) -> Array:
        """The entries of ``x`` at the integer positions ``index`` along ``axis``, as a new
        array (``x[:, index]`` for ``axis`` 1): GPTQ's activation order permutes with it."""

    def copy(self, x: Array) -> Array:
        """A new array equal to ``x`` that the caller may write."""

    def mean(self, x: Array) -> Array:
        """The mean of all entries, as a 0-d array of ``x``'s dtype (the library's own
        reduction: the solvers reproduce llm-compressor's dampening bit for bit)."""

    def sqrt(self, x: Array) -> Array:
        """Elementwise square root."""

    def same_values(self, a: Array, b: Array) -> bool:
        """Whether ``a`` and ``b`` hold the same values because they are the same memory,
        unchanged: one array, or two views of one tensor with the same shape, strides and
        dtype, not written since the first was taken (the input that q/k/v, or gate/up, are
        fed). False where that cannot be told (then nothing is shared)."""

    def row_norms(self, x: Array) -> Array:
        """The Euclidean norm of each row of a 2-D array (``torch.norm(x, p=2, dim=1)``)."""

    def subtract_outer(self, x: Array, start: int, a: Array, b: Array) -> Array:
        """``x`` with ``x[start:] -= a ⊗ b`` (``a``: one value per row from ``start``, ``b``: one
        per column), each entry one product ``a[i] · b[j]`` (the bits of ``matmul`` of a column
        by a row) subtracted once; takes ownership of ``x``. The block-wise OBS update's rank-1
        step, thousands per layer: NumPy writes the products into a reused buffer."""

    def gram(self, a: Array) -> Array:
        """``a·aᵀ`` of a 2-D array, in the form the Hessian sums add up: the whole product, or,
        where the library has a symmetric product (NumPy: BLAS ``syrk``, half the work, the
        lower triangle of its own ``matmul`` bit for bit), its lower triangle with zeros above.
        :meth:`gram_matrix` makes the whole matrix of a sum of them."""

    def gram_matrix(self, h: Array) -> Array:
        """The whole symmetric matrix of a sum of :meth:`gram` products (``h`` itself where
        they are whole products)."""

    def scale_add(self, x: Array, alpha: float, y: Array) -> Array:
        """``x·alpha + y``, rounded after each step (``x *= alpha; x += y``); takes ownership
        of ``x``; ``alpha`` 1 only adds (``x·1`` is ``x``, bit for bit). The running means
        of :mod:`.hessian` update in place with it."""

    def add_diagonal(self, a: Array, values: Array | float) -> Array:
        """``a`` (square) with ``values`` (one per row, or one for all) added to its diagonal;
        takes ownership of ``a``."""

    def inverse_upper_factor(self, lower: Array) -> Array | None:
        """The upper triangular ``u`` with ``uᵀ·u = (L·Lᵀ)⁻¹``, from the lower Cholesky factor
        ``L``: ``torch.linalg.cholesky(torch.cholesky_inverse(L), upper=True)`` (LAPACK's
        ``potri`` then ``potrf``, which read one triangle: NumPy does not mirror the inverse
        in between); None when the inverse is not positive definite to working precision."""

    def argsort_last(self, x: Array) -> Array:
        """Indices that sort ``x`` ascending along its last axis; stable (equal values keep
        their order), so ties go to the lower index on every backend."""

    def scatter_last(self, flags: Array, index: Array, value: bool) -> Array:
        """The bool array ``flags`` with ``flags[..., index[..., j]] = value`` along the last
        axis (``index`` has ``flags``' leading shape); takes ownership of ``flags``."""

    def assign(self, x: Array, index: tuple[Any, ...], values: Array | float) -> Array:
        """``x`` with ``x[index] = values`` (``index``: ints and slices); takes ownership."""

    def subtract(self, x: Array, index: tuple[Any, ...], values: Array) -> Array:
        """``x`` with ``x[index] -= values`` (``index``: ints and slices); takes ownership."""

    def serial(self, like: Array) -> AbstractContextManager[None]:
        """A context in which the library runs operations on arrays like ``like`` on one
        thread, and then goes back to its own setting. SparseGPT's column loop is thousands
        of small elementwise operations and rank-1 products, whose results do not depend on
        the thread count: on a CPU, splitting each over threads costs more than it saves, and
        where the other cores are busy every split waits for them (ten times slower on a
        shared 2-core machine). A no-op where there is nothing to set (NumPy: its elementwise
        work is single-threaded; an accelerator)."""
