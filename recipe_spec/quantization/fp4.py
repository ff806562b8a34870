"""The FP4 and MX parts of compressed-tensors 0.19's grid (``fp4_utils.py``, ``mxfp_utils.py``,
``generate_gparam``), written once over :class:`~.ops.QuantOps`; :mod:`.grid` uses them.

- **FP4 e2m1** values: 0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6. :func:`round_fp4_e2m1` takes each
  entry to the nearest, ties to the even one (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2,
  2.5 -> 2, 3.5 -> 4, 5 -> 4), beyond 6 to 6, keeping the sign (``cast_to_fp4``);
- **NVFP4** (``tensor_group``): a float32 *global scale* per tensor,
  ``448 · 6 / max(|min|, |max|)`` (:func:`global_scale`; 1 where that is not finite), and per
  group of 16 a scale ``global · absmax / 6`` rounded to ``float8_e4m3fn``; a value is
  quantized with ``scale / global``;
- **MX** (``scale_dtype: uint8``, groups of 32): each group's scale is a power of two held as
  its E8M0 exponent ``e = 127 + log2(p) - log2(floor(max))`` (2 for FP4, 8 for FP8), ``p`` the
  group's absmax rounded to a power of two (up from a mantissa of 1.75, else down:
  :func:`mx_exponents`), clamped to ``[0, 255]``; the scale is ``2^(e - 127)``.

>>> import numpy as np
>>> from recipe_spec.masks.numpy_ops import NUMPY_OPS as ops
>>> round_fp4_e2m1(ops, np.array([0.25, 0.3, 0.75, 2.5, 2.6, -5.0, 7.0], np.float32)).tolist()
[0.0, 0.5, 1.0, 2.0, 3.0, -4.0, 6.0]
>>> mx_exponents(ops, np.array([1.0, 1.74, 1.75, 0.0], np.float32), 4).tolist()
[125.0, 125.0, 126.0, 0.0]
"""

from __future__ import annotations

from ..masks.ops import Array
from .args import FP4_E2M1_MAX, FP8_E4M3_MAX
from .ops import QuantOps

__all__ = ["round_fp4_e2m1", "global_scale", "mx_exponents", "mx_scales", "FLOAT32_TINY"]

#: The smallest normal float32 (``torch.finfo(torch.float32).tiny``): the floor of a global
#: scale's absmax.
FLOAT32_TINY = 2.0 ** -126

#: (upper end of the band, value, whether the end belongs to the band): the e2m1 value each
#: magnitude rounds to, ties to even (compressed-tensors' ``cast_to_fp4`` thresholds).
_BANDS = ((0.25, 0.0, True), (0.75, 0.5, False), (1.25, 1.0, True), (1.75, 1.5, False),
          (2.5, 2.0, True), (3.5, 3.0, False), (5.0, 4.0, True))

#: ``floor(log2(largest value))`` of the element formats: what an MX exponent leaves for them.
_MX_ELEMENT_OFFSET = {4: 2, 8: 8}


def round_fp4_e2m1(ops: QuantOps, x: Array) -> Array:
    """Each entry of ``x`` rounded to the nearest FP4 e2m1 value (ties to even; beyond 6: 6),
    with its sign, in ``x``'s dtype; NaN stays NaN."""
    a = ops.abs(x)
    out = ops.where(a > 5.0, 6.0, a)  # NaN compares False everywhere: it stays
    for end, value, closed in reversed(_BANDS):
        out = ops.where((a <= end) if closed else (a < end), value, out)
    return ops.where(x < 0, -out, out)


def global_scale(ops: QuantOps, low: Array, high: Array) -> Array:
    """NVFP4's global scale, shape ``(1,)`` float32, from a tensor's minimum and maximum
    (``generate_gparam``): ``448 · 6 / max(|min(low, 0)|, |max(high, 0)|, tiny)``, 1 where that
    is NaN or infinite."""
    low = ops.minimum(low, 0.0)
    high = ops.maximum(high, 0.0)
    top = ops.maximum(ops.maximum(ops.abs(low), ops.abs(high)), FLOAT32_TINY)
    # torch divides a number by a tensor as the tensor's reciprocal times the number: its bits
    scale = (1.0 / top) * (FP8_E4M3_MAX * FP4_E2M1_MAX)
    finite = ops.isfinite(scale)
    return ops.reshape(ops.where(finite, scale, 1.0), (1,))


def mx_exponents(ops: QuantOps, absmax: Array, num_bits: int) -> Array:
    """The E8M0 exponents (whole numbers in ``[0, 255]``, in ``absmax``'s float dtype) of the MX
    scales of groups whose largest magnitude is ``absmax`` (``generate_mx_scales``, then the
    rounding to ``uint8``): ``127 + log2(p) - offset``, ``p`` the power of two ``absmax`` rounds
    to (a mantissa of 1.75 or more rounds up), 0 for a group of zeros, 255 for one that is not
    finite."""
    mantissa, exponent = ops.frexp(absmax)  # absmax = mantissa · 2^exponent, mantissa in [0.5, 1)
    power = ops.where(mantissa >= 0.875, exponent, exponent - 1.0)  # log2 of the rounded power of two
    e = ops.clip(power + float(127 - _MX_ELEMENT_OFFSET[num_bits]), 0.0, 255.0)
    e = ops.where(absmax == 0, 0.0, e)
    return ops.where(ops.isfinite(absmax), e, 255.0)


def mx_scales(ops: QuantOps, exponents: Array) -> Array:
    """The float scales ``2^(e - 127)`` of E8M0 exponents (``maybe_convert_from_mx_exp``), in
    their dtype (the smallest, ``2^-127``, is a float32 subnormal)."""
    return ops.ldexp(exponents * 0.0 + 1.0, exponents - 127.0)
