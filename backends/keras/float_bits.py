"""Exact ``frexp`` and ``ldexp`` over Keras tensors (``keras.ops`` has neither), read off and
built from float32's bits (``keras.ops.view``), as NumPy's and torch's are exact: MX scales
and FP8 rounding (:mod:`recipe_spec.quantization`) decide grid points with them. Subnormal
inputs and results are handled through their bits too: XLA on a CPU flushes arithmetic on them
to zero.

>>> import numpy as np
>>> m, e = frexp(keras.ops.convert_to_tensor(np.float32([12.0, 0.0, -2.0 ** -140])))
>>> keras.ops.convert_to_numpy(m).tolist(), keras.ops.convert_to_numpy(e).tolist()
([0.75, 0.0, -0.5], [4.0, 0.0, -139.0])
>>> keras.ops.convert_to_numpy(ldexp(m, e)).tolist() == [12.0, 0.0, -2.0 ** -140]
True
"""

from __future__ import annotations

from typing import Any

import keras

__all__ = ["frexp", "ldexp"]

K = keras.ops

#: float32's layout: the exponent field, its bias, the fraction and sign bits.
_EXP_SHIFT, _EXP_MASK, _BIAS = 23, 0xFF, 127
_FRACTION, _SIGN = (1 << 23) - 1, -(1 << 31)


def _bits(x: Any, dtype: str) -> Any:
    return K.view(x, dtype)


def frexp(x: Any) -> tuple[Any, Any]:
    """``(m, e)`` with ``x = m·2^e``, ``0.5 <= |m| < 1`` (0 and 0 for 0, ``x`` itself for inf/NaN),
    read off float32's bits."""
    dtype = x.dtype
    f = K.cast(x, "float32")  # exact from float16 / bfloat16
    bits = _bits(f, "int32")
    field = K.bitwise_and(K.right_shift(bits, _EXP_SHIFT), _EXP_MASK)
    fraction = K.bitwise_and(bits, _FRACTION)
    # a subnormal is its fraction field times 2^-149: that integer as a float is exact and
    # normal (arithmetic on the subnormal itself is flushed to zero by XLA on a CPU)
    subnormal = (field == 0) & (fraction != 0)
    from_fraction = _bits(K.cast(fraction, "float32"), "int32")
    sign = K.bitwise_and(bits, _SIGN)
    bits = K.where(subnormal, K.bitwise_or(from_fraction, sign), bits)
    shift = K.where(subnormal, 149, 0)
    field = K.where(subnormal, K.bitwise_and(K.right_shift(bits, _EXP_SHIFT), _EXP_MASK), field)
    exponent = field - (_BIAS - 1) - shift
    mantissa = _bits(K.bitwise_or(K.bitwise_and(bits, ~(_EXP_MASK << _EXP_SHIFT)), (_BIAS - 1) << _EXP_SHIFT), "float32")
    zero = (field == 0) & (fraction == 0)
    special = field == _EXP_MASK
    mantissa = K.where(zero | special, f, mantissa)  # ±0 keeps its sign, as NumPy's
    exponent = K.where(zero | special, 0, exponent)
    return K.cast(mantissa, dtype), K.cast(exponent, dtype)


def _power_of_two(e: Any) -> Any:
    """``2^e`` in float32 for whole ``e`` in ``[-126, 127]``, built from its bits."""
    return _bits(K.left_shift(K.cast(e, "int32") + _BIAS, _EXP_SHIFT), "float32")


def ldexp(m: Any, e: Any) -> Any:
    """``m·2^e`` exactly (in two power-of-two steps, so that neither leaves float32's range
    where the result does not), in ``m``'s dtype. A result below float32's normal range is
    made from its bits, rounded half to even as IEEE arithmetic rounds it (XLA on a CPU
    flushes such products to zero)."""
    f = K.cast(m, "float32")
    e = K.clip(K.cast(e, "int32"), -300, 300)
    half = K.clip(e // 2, -126, 127)
    rest = K.clip(e - half, -126, 127)
    product = f * _power_of_two(half) * _power_of_two(rest)
    fm, fe = frexp(f)
    total = K.cast(fe, "int32") + e  # the result is fm·2^total, |fm| in [0.5, 1)
    low = (total < -125) & (f != 0) & K.isfinite(f)
    # the fraction field of a subnormal: |fm|·2^24 (a whole number < 2^24) shifted right
    whole = K.cast(K.abs(fm) * (2.0 ** 24), "int32")
    shift = K.clip(-125 - total, 1, 30)
    kept = K.right_shift(whole, shift)
    dropped = whole - K.left_shift(kept, shift)
    halfway = K.left_shift(K.ones_like(shift), shift - 1)
    up = (dropped > halfway) | ((dropped == halfway) & (K.bitwise_and(kept, 1) == 1))
    field = kept + K.cast(up, "int32")
    sign = K.bitwise_and(_bits(f, "int32"), _SIGN)
    subnormal = _bits(K.bitwise_or(field, sign), "float32")
    return K.cast(K.where(low, subnormal, product), m.dtype)
