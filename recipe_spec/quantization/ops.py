"""The array operations the quantization grid needs besides
:class:`recipe_spec.masks.ops.ArrayOps`. PyTorch: ``recipe_spec_torch.masks.TorchOps``; NumPy:
:class:`recipe_spec.masks.numpy_ops.NumpyOps`.

Each is exact in IEEE arithmetic (a minimum, a rounding, a cast), so every backend gives the
same bits for the same float32 inputs; the arithmetic between them (``/``, ``*``, ``+``,
``-``) is the array operators' own.
"""

from __future__ import annotations

from typing import Protocol

from ..masks.ops import Array, ArrayOps

__all__ = ["QuantOps"]


class QuantOps(ArrayOps, Protocol):
    """Rounding, clamping and reductions for :mod:`recipe_spec.quantization.grid`."""

    def round_even(self, x: Array) -> Array:
        """Elementwise rounding to the nearest integer, halves to even (``torch.round``,
        ``np.round``), in ``x``'s dtype."""

    def clip(self, x: Array, low: float, high: float) -> Array:
        """``x`` clamped elementwise to ``[low, high]``, in ``x``'s dtype."""

    def minimum(self, x: Array, y: Array | float) -> Array:
        """The elementwise minimum of ``x`` and ``y`` (an array or a number)."""

    def maximum(self, x: Array, y: Array | float) -> Array:
        """The elementwise maximum of ``x`` and ``y`` (an array or a number)."""

    def amin(self, x: Array, axis: int) -> Array:
        """The smallest entry along ``axis`` (kept, with length 1)."""

    def amax(self, x: Array, axis: int) -> Array:
        """The largest entry along ``axis`` (kept, with length 1)."""

    def where(self, flags: Array, a: Array, b: Array | float) -> Array:
        """``a`` where ``flags`` is True, else ``b``."""

    def divide(self, x: Array, value: float) -> Array:
        """``x / value`` with ``value`` held in an array of ``x``'s dtype and device, as
        compressed-tensors divides by its ``bit_range``: on a GPU, torch divides by a Python
        number by multiplying with its reciprocal, one unit in the last place off at times."""

    def round_fp8_e4m3(self, x: Array) -> Array:
        """Each entry of ``x`` (within ``[-448, 448]``) rounded to the nearest
        ``float8_e4m3fn`` value, ties to even, returned in ``x``'s dtype: torch's
        ``x.to(torch.float8_e4m3fn).to(x.dtype)``."""

    def frexp(self, x: Array) -> tuple[Array, Array]:
        """``(m, e)`` with ``x = m · 2^e`` and ``0.5 <= |m| < 1`` (both 0 for 0), ``e`` whole
        numbers in ``x``'s float dtype (``torch.frexp``, ``np.frexp``)."""

    def ldexp(self, m: Array, e: Array) -> Array:
        """``m · 2^e`` exactly (``e`` whole numbers in a float dtype), in ``m``'s dtype."""
