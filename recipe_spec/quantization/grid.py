"""The quantization grid of compressed-tensors 0.19 (``calculate_qparams``, ``fake_quantize``),
written once over :class:`~.ops.QuantOps`, in the weight's dtype (float32 in the solvers).

Scale and zero point from the minima and maxima of each tensor, row or group (the memoryless
min-max observer: :func:`minmax`), with ``min`` clipped to ``<= 0`` and ``max`` to ``>= 0`` so
that 0 is always on the grid:

- int, ``b`` bits: ``qmin = -2^(b-1)``, ``qmax = 2^(b-1) - 1``. Symmetric:
  ``scale = max(|min|, |max|) / ((qmax - qmin) / 2)`` (int4: ``absmax / 7.5``, int8:
  ``absmax / 127.5``), ``zero_point = 0``. Asymmetric: ``scale = (max - min) / (qmax - qmin)``,
  ``zero_point = round(clamp(qmin - min / scale, qmin, qmax))``;
- FP8 e4m3 (symmetric): ``scale = absmax / 448``, ``zero_point = 0``;
- FP4 e2m1 (symmetric): ``scale = absmax / 6``; NVFP4's ``tensor_group`` multiplies it by the
  tensor's global scale (:func:`.fp4.global_scale`) and values are quantized with
  ``scale / global``; MX scales (``scale_dtype: uint8``) are powers of two (:mod:`.fp4`);
- ``scale_dtype: float8_e4m3fn``: the scale is then rounded to FP8 (clamped to ±448);
- a zero scale (an all-zero row or group) becomes float32's ``eps`` (FP8 scales: FP8's, 0.125)
  and its zero point 0.

Quantizing is ``q = clamp(w / scale + zero_point, qmin, qmax)`` rounded to the nearest
integer, halves to even (FP8, FP4: to the nearest ``float8_e4m3fn``, ``e2m1`` value); dequantizing is
``(q - zero_point) · scale``. ``q`` stays in the float dtype (its values are whole numbers, or
FP8 values).

Shapes, as compressed-tensors stores them: ``tensor`` ``(1,)``, ``channel`` ``(rows, 1)``,
``group`` and ``tensor_group`` ``(rows, columns // group_size)``, a global scale ``(1,)``.

>>> import numpy as np
>>> from recipe_spec.masks.numpy_ops import NUMPY_OPS as ops
>>> from recipe_spec.quantization.args import QuantArgs
>>> w = np.array([[-1.0, 0.25, 0.5, 2.0]], dtype=np.float32)
>>> args = QuantArgs(num_bits=4, strategy="channel")
>>> scale, zp = minmax_qparams(ops, w, args)
>>> float(scale[0, 0]), quantize_weight(ops, w, scale, zp, args).tolist()
(0.2666666805744171, [[-4.0, 1.0, 2.0, 7.0]])
"""

from __future__ import annotations

from ..masks.ops import Array
from .args import FP8_E4M3_MAX, QuantArgs
from .fp4 import global_scale, mx_exponents, mx_scales, round_fp4_e2m1
from .ops import QuantOps

__all__ = ["minmax", "qparams", "minmax_qparams", "weight_global_scale", "quantize", "dequantize",
           "fake_quantize", "quantize_weight", "fake_quantize_weight", "check_weight_shape", "FLOAT32_EPS"]

#: What a zero scale becomes (``torch.finfo(torch.float32).eps``).
FLOAT32_EPS = 2.0 ** -23
#: What a zero FP8 scale becomes (``torch.finfo(torch.float8_e4m3fn).eps``).
FP8_EPS = 0.125
_GROUPED = ("group", "tensor_group")


def check_weight_shape(shape: tuple[int, ...], args: QuantArgs) -> None:
    """Refuse a weight that is not 2-D ``(out, in)``, and group scales whose ``group_size``
    does not divide the input columns (compressed-tensors refuses the one with a ValueError and
    the other, fewer columns than a group, with a RuntimeError in its observer)."""
    if len(shape) != 2:
        raise ValueError(f"a quantized weight is 2-D (out, in), got shape {list(shape)}: flatten a "
                         "convolution's kernel to (out, in·kh·kw) first")
    if args.strategy in _GROUPED and shape[1] % int(args.group_size or 1):
        raise ValueError(f"group_size {args.group_size} does not divide the weight's {shape[1]} input "
                         f"columns (shape {list(shape)}): pick a group_size that divides it, or leave "
                         "the layer out of the targets")


def _grouped(ops: QuantOps, weight: Array, args: QuantArgs) -> Array:
    """The weight as ``(rows, groups, group_size)`` (group, tensor_group) or as it is (tensor,
    channel)."""
    if args.strategy not in _GROUPED:
        return weight
    rows, cols = (int(d) for d in weight.shape)
    size = int(args.group_size or 1)
    return ops.reshape(weight, (rows, cols // size, size))


def _expanded(ops: QuantOps, qparam: Array, args: QuantArgs) -> Array:
    """A stored scale or zero point in the shape that broadcasts against :func:`_grouped`."""
    if args.strategy not in _GROUPED:
        return qparam
    return ops.reshape(qparam, (*(int(d) for d in qparam.shape), 1))


def minmax(ops: QuantOps, weight: Array, args: QuantArgs) -> tuple[Array, Array]:
    """The memoryless min-max observer: ``(min, max)`` of the whole weight, each row, or each
    group of ``group_size`` consecutive columns of a row, in the qparams' shape."""
    check_weight_shape(tuple(weight.shape), args)
    rows = int(weight.shape[0])
    if args.strategy == "tensor":
        flat = ops.reshape(weight, (1, -1))
        return ops.reshape(ops.amin(flat, 1), (1,)), ops.reshape(ops.amax(flat, 1), (1,))
    if args.strategy == "channel":
        return ops.amin(weight, 1), ops.amax(weight, 1)
    grouped = _grouped(ops, weight, args)
    groups = int(grouped.shape[1])
    return (ops.reshape(ops.amin(grouped, 2), (rows, groups)),
            ops.reshape(ops.amax(grouped, 2), (rows, groups)))


def qparams(ops: QuantOps, min_vals: Array, max_vals: Array, args: QuantArgs,
            global_scale: Array | None = None) -> tuple[Array, Array]:
    """``(scale, zero_point)`` from minima and maxima (compressed-tensors'
    ``calculate_qparams``); the zero point is whole-valued, in the scale's dtype.
    ``global_scale``: NVFP4's (``tensor_group``), which multiplies each group's scale."""
    low = ops.minimum(min_vals, 0.0)
    high = ops.maximum(max_vals, 0.0)
    qmin, qmax = args.q_range
    span = float(qmax - qmin)
    if args.symmetric:
        absmax = ops.maximum(ops.abs(low), ops.abs(high))
        if args.mx:
            scale = mx_scales(ops, mx_exponents(ops, absmax, args.num_bits))
        else:
            scale = ops.divide(absmax, span / 2)
        zero = scale * 0.0  # +0.0: the scale is >= 0
    else:
        scale = ops.divide(high - low, span)
        empty = scale == 0
        zero = ops.where(empty, 0.0, ops.clip(float(qmin) - low / ops.where(empty, 1.0, scale),
                                               float(qmin), float(qmax)))
        zero = ops.round_even(zero)  # int8 zero points: already within [-128, 127]
    if global_scale is not None:
        scale = global_scale * scale
    eps = FLOAT32_EPS
    if args.scale_dtype == "float8_e4m3fn":
        scale, eps = ops.round_fp8_e4m3(ops.clip(scale, -FP8_E4M3_MAX, FP8_E4M3_MAX)), FP8_EPS
    scale = ops.where(scale == 0, eps, scale)
    return scale, zero


def weight_global_scale(ops: QuantOps, weight: Array) -> Array:
    """NVFP4's global scale of a whole weight (:func:`.fp4.global_scale` of its minimum and
    maximum), shape ``(1,)``."""
    flat = ops.reshape(weight, (1, -1))
    return global_scale(ops, ops.amin(flat, 1), ops.amax(flat, 1))


def minmax_qparams(ops: QuantOps, weight: Array, args: QuantArgs,
                   global_scale: Array | None = None) -> tuple[Array, Array]:
    """``(scale, zero_point)`` of a weight by the memoryless min-max observer; a
    ``tensor_group`` weight's scales with ``global_scale``, by default its own
    (:func:`weight_global_scale`)."""
    low, high = minmax(ops, weight, args)
    if args.strategy == "tensor_group" and global_scale is None:
        global_scale = weight_global_scale(ops, weight)
    return qparams(ops, low, high, args, global_scale if args.strategy == "tensor_group" else None)


def quantize(ops: QuantOps, x: Array, scale: Array, zero_point: Array | None, args: QuantArgs,
             global_scale: Array | None = None) -> Array:
    """``q``: ``x / scale + zero_point`` clamped to the grid's range and rounded onto it
    (elementwise; ``scale`` and ``zero_point`` broadcast against ``x``). A symmetric grid adds
    no zero point; with a ``global_scale`` (NVFP4) the scale is ``scale / global_scale``."""
    if global_scale is not None:
        scale = _divided(ops, scale, global_scale)
    scaled = _divided(ops, x, scale)
    if zero_point is not None and not args.symmetric:
        scaled = scaled + zero_point
    qmin, qmax = args.q_range
    clamped = ops.clip(scaled, float(qmin), float(qmax))
    if args.type == "float":
        return ops.round_fp8_e4m3(clamped) if args.num_bits == 8 else round_fp4_e2m1(ops, clamped)
    return ops.round_even(clamped)


def dequantize(ops: QuantOps, q: Array, scale: Array, zero_point: Array | None, args: QuantArgs,
               global_scale: Array | None = None) -> Array:
    """``(q - zero_point) · scale`` (elementwise; a symmetric grid subtracts nothing; with a
    ``global_scale``, ``scale / global_scale``)."""
    if global_scale is not None:
        scale = _divided(ops, scale, global_scale)
    if zero_point is not None and not args.symmetric:
        q = q - zero_point
    return q * scale


def _divided(ops: QuantOps, x: Array, y: Array) -> Array:
    """``x / y``, a ``y`` of one entry spread to ``x``'s shape first: XLA (JAX, TensorFlow's
    compiled functions) divides by a broadcast scalar as a product with its reciprocal, one
    unit in the last place off at times; by an array of ``x``'s shape it divides."""
    one = len(y.shape) <= len(x.shape) and all(int(d) == 1 for d in y.shape)
    if one and any(int(d) != 1 for d in x.shape):
        y = ops.expand(ops.reshape(y, (1,) * len(x.shape)), x.shape)
    return x / y


def fake_quantize(ops: QuantOps, x: Array, scale: Array, zero_point: Array | None, args: QuantArgs,
                  global_scale: Array | None = None) -> Array:
    """``x`` moved onto the grid: ``dequantize(quantize(x))`` (elementwise)."""
    return dequantize(ops, quantize(ops, x, scale, zero_point, args, global_scale), scale, zero_point, args,
                      global_scale)


def quantize_weight(ops: QuantOps, weight: Array, scale: Array, zero_point: Array | None,
                    args: QuantArgs, global_scale: Array | None = None) -> Array:
    """:func:`quantize` of a whole ``(out, in)`` weight with its stored qparams (group scales
    spread over their columns)."""
    q = quantize(ops, _grouped(ops, weight, args), _expanded(ops, scale, args),
                 None if zero_point is None else _expanded(ops, zero_point, args), args, global_scale)
    return ops.reshape(q, tuple(int(d) for d in weight.shape))


def fake_quantize_weight(ops: QuantOps, weight: Array, scale: Array, zero_point: Array | None,
                         args: QuantArgs, global_scale: Array | None = None) -> Array:
    """:func:`fake_quantize` of a whole ``(out, in)`` weight with its stored qparams."""
    s = _expanded(ops, scale, args)
    z = None if zero_point is None else _expanded(ops, zero_point, args)
    out = fake_quantize(ops, _grouped(ops, weight, args), s, z, args, global_scale)
    return ops.reshape(out, tuple(int(d) for d in weight.shape))
