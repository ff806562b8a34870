"""The array operations a backend supplies to the mask algorithms of :mod:`recipe_spec.masks`.

The algorithms are written once, over an :class:`ArrayOps` object and the arrays it returns;
each backend implements the protocol with its framework's primitives (PyTorch:
``recipe_spec_torch.masks``; NumPy, for Keras: :mod:`recipe_spec.masks.numpy_ops`). The algorithms
never ask which backend runs.

Besides the methods below, the algorithms use only what every array library of the Python
array API standard has (NumPy, PyTorch, JAX, CuPy): ``.shape`` and ``.dtype``; the operators
``+ * / // % == > >= <= < & | ~`` between arrays, or with a Python number or a 0-d array of the
same dtype; basic indexing with integers and slices (positive steps); and ``int()`` and
``bool()`` of a single entry. They never write into an array they were given: the two
methods that may (``or_prefix`` and ``set_true``) take ownership of the mask they are given
and return the result, so a library with immutable arrays (JAX) returns a new array and one
with mutable arrays may update in place (:class:`InPlaceOps`). The one augmented assignment,
``&=``, is on a bool array the algorithm has just made (where arrays are immutable, Python
rebinds the name to a new one).

Arithmetic that decides ties (group scores) is done by the algorithms themselves, in float64
elementwise additions (see :func:`recipe_spec.masks.pairwise_sum`), never by a backend's own
reduction, whose order of additions is its own.

Selection (the k-th smallest value, the n-th True) is written once too, in
:mod:`recipe_spec.masks.selection`, over the small primitives ``kth_direct``, ``random_sample``,
``row_counts`` and ``cumsum``, with the sizes each backend picks (``selection_limits``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

__all__ = ["Array", "ArrayOps", "InPlaceOps", "SelectionLimits"]

#: An array of the backend (``torch.Tensor``, ``numpy.ndarray``, ...).
Array = Any


class SelectionLimits(NamedTuple):
    """The sizes a backend picks for :func:`~.selection.kth_smallest` and
    :func:`~.selection.nth_true`."""

    direct: int  # inputs of at most this many entries go straight to ``ops.kth_direct``
    sample: int  # entries drawn to bracket the k-th smallest value of larger inputs
    chunk: int  # flags counted per block when looking for the n-th True


class ArrayOps(Protocol):
    """What a backend supplies. ``dtype`` names are ``"float64"`` and ``"int32"``."""

    def describe_shape(self, shape: Sequence[int]) -> str:
        """How error messages print a parameter's shape (torch: ``torch.Size([8, 3])``, as
        SparseML's messages do; NumPy: ``[8, 3]``)."""

    def is_floating(self, x: Array) -> bool:
        """Whether ``x`` holds floating-point values (which may be NaN or infinite)."""

    def astype(self, x: Array, dtype: str) -> Array:
        """``x`` converted to ``dtype`` (exact for every float up to 64 bits into float64). A
        device without float64 (Apple MPS; JAX unless x64 is enabled) cannot give the same
        group-score bits: its backend should compute those on the CPU."""

    def abs(self, x: Array) -> Array:
        """Elementwise magnitude, in ``x``'s dtype (``|-0.0|`` is ``+0.0``)."""

    def isnan(self, x: Array) -> Array:
        """Elementwise NaN test (bool array)."""

    def isfinite(self, x: Array) -> Array:
        """Elementwise finiteness test (bool array)."""

    def sum_all(self, x: Array) -> float:
        """The sum of all entries as a Python float, in any order: used only as a fast proof
        that no entry is NaN or infinite (a finite sum), never for a decision on values."""

    def count_nonzero(self, x: Array) -> int:
        """The number of nonzero (True) entries, as a Python int."""

    def full(self, shape: Sequence[int], value: bool, like: Array) -> Array:
        """A new bool array of ``shape`` filled with ``value``, where ``like`` lives."""

    def reshape(self, x: Array, shape: Sequence[int]) -> Array:
        """``x`` in row-major order with a new shape (a view where possible)."""

    def expand(self, x: Array, shape: Sequence[int]) -> Array:
        """``x`` broadcast to ``shape``, as a new contiguous array."""

    def concat(self, xs: Sequence[Array], axis: int) -> Array:
        """Arrays joined along ``axis``."""

    def selection_limits(self) -> SelectionLimits:
        """The sizes :mod:`recipe_spec.masks.selection` works with on this backend (read when called,
        so a test may change them): inputs up to ``direct`` entries go to :meth:`kth_direct`
        at once, ``sample`` entries bracket the answer of larger ones, ``chunk`` flags are
        counted per block."""

    def kth_direct(self, flat: Array, k: int) -> Array:
        """The library's own exact selection: the k-th smallest value (1-based,
        ``1 <= k <= size``) of the 1-D ``flat`` (no NaN), as a 0-d array or scalar of its
        dtype; the value a full sort puts at position ``k``. ``flat`` must not be modified."""

    def random_sample(self, flats: Sequence[Array], counts: Sequence[int], seed: int) -> Array:
        """``counts[i]`` entries of each 1-D ``flats[i]``, drawn uniformly with replacement by
        one generator seeded with ``seed`` (the same draws on every call), joined into one new
        1-D array. Only the cost of a selection depends on the draws, never its result."""

    def row_counts(self, flags: Array) -> Array:
        """The number of True entries in each row of a 2-D bool array (1-D integer array)."""

    def cumsum(self, x: Array) -> Array:
        """Running totals of a 1-D integer array (inclusive: entry ``i`` sums ``x[:i + 1]``)."""

    def or_prefix(self, keep: Array, flags: Array, stop: int) -> Array:
        """``keep | flags`` on positions ``< stop``, ``keep`` elsewhere (1-D bool arrays).
        Takes ownership of ``keep``: the caller uses only the returned array."""

    def flat_nonzero(self, flags: Array) -> Array:
        """Flat positions of the True entries of a bool array, ascending (integer array)."""

    def compress(self, x: Array, flags: Array) -> Array:
        """The entries of 1-D ``x`` where the bool array ``flags`` is True, in order."""

    def set_true(self, keep: Array, positions: Array) -> Array:
        """``keep`` (1-D bool) with the given positions set to True. Takes ownership of
        ``keep``: the caller uses only the returned array."""


class InPlaceOps:
    """The methods of :class:`ArrayOps` that NumPy-style indexing gives, for libraries whose
    arrays can be written in place (NumPy, PyTorch, CuPy): a backend's ops derive from this
    and supply the rest. (A JAX backend would use ``.at[...].set`` instead.)"""

    def abs(self, x: Array) -> Array:
        return abs(x)

    def reshape(self, x: Array, shape: Sequence[int]) -> Array:
        return x.reshape(tuple(shape))

    def compress(self, x: Array, flags: Array) -> Array:
        return x[flags]

    def or_prefix(self, keep: Array, flags: Array, stop: int) -> Array:
        keep[:stop] |= flags[:stop]
        return keep

    def set_true(self, keep: Array, positions: Array) -> Array:
        keep[positions] = True
        return keep
