"""Keras's int4 kernels written and read in NumPy: two signed 4-bit values a byte along the
last axis, the first in the low nibble (``keras.quantizers.pack_int4`` / ``unpack_int4``), and
the weight an int4 layer computes with (``unpack_int4`` divided by a channel's scale, or
``dequantize_with_sz_map`` of a grouped kernel). The same bits as Keras's functions on
TensorFlow and torch, and within one float32 rounding of JAX's (XLA divides by multiplying with
the reciprocal; ``tests/test_keras_quantized.py`` compares them), without their eager dispatch
per operation, which on JAX and TensorFlow also compiles per kernel shape."""

from __future__ import annotations

from typing import Any

import numpy as np

import keras

__all__ = ["pack_int4", "unpack_int4", "int4_weight"]


def pack_int4(values: np.ndarray) -> np.ndarray:
    """``values`` (integers in ``[-8, 7]``) packed two a byte along the last axis (an odd length
    padded with a 0), as ``keras.quantizers.pack_int4(values, axis=-1)`` packs them.

    >>> pack_int4(np.array([[-3, 7, 2], [-8, 1, 0]])).tolist()
    [[125, 2], [24, 0]]
    """
    v = np.asarray(values).astype(np.int8)
    if v.shape[-1] % 2:
        v = np.concatenate([v, np.zeros((*v.shape[:-1], 1), np.int8)], axis=-1)
    low, high = v[..., 0::2].view(np.uint8) & 0x0F, v[..., 1::2].view(np.uint8) & 0x0F
    return ((high << 4) | low).astype(np.uint8).view(np.int8)


def unpack_int4(packed: np.ndarray, length: int) -> np.ndarray:
    """The ``length`` signed values along the last axis of a :func:`pack_int4` array (int8).

    >>> unpack_int4(np.array([[125, 2], [24, 0]], np.int8), 3).tolist()
    [[-3, 7, 2], [-8, 1, 0]]
    """
    b = np.asarray(packed).view(np.uint8)
    both = np.stack([b & 0x0F, b >> 4], axis=-1).reshape(*b.shape[:-1], -1)[..., :length].astype(np.int8)
    return np.where(both > 7, both - 16, both).astype(np.int8)


def int4_weight(layer: Any, columns: int) -> np.ndarray:
    """The float32 kernel, flat ``(in, out)``, a Keras ``int4`` layer computes with: its packed
    ``_kernel`` unpacked to ``columns`` outputs, divided by ``kernel_scale`` (one per output),
    or, grouped, ``(q - kernel_zero[g_idx]) * kernel_scale[g_idx]`` (Keras's
    ``dequantize_with_sz_map`` along the inputs)."""
    read = keras.ops.convert_to_numpy
    q = unpack_int4(read(layer._kernel.value), columns)
    scale = np.asarray(read(layer.kernel_scale.value), np.float32)
    if getattr(layer, "_int4_block_size", None) in (None, -1):
        return (q.astype(np.float32) / scale.reshape(1, -1)).astype(np.float32)
    groups = np.asarray(read(layer.g_idx.value)).astype(np.int32)
    zero = np.asarray(read(layer.kernel_zero.value)).astype(np.float32)
    return ((q.astype(np.float32) - zero[groups]) * scale[groups]).astype(np.float32)
