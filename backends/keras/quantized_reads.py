"""Keras's read-back of a quantized layer's int4 kernel (:func:`.quantized.keras_weight`),
compiled once per shape where the backend compiles (JAX, TensorFlow): eager calls of Keras's
quantizers dispatch dozens of operations each (a tenth of a second a layer on JAX)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import keras

__all__ = ["compiled_function", "int4_channel", "int4_grouped"]


def compiled_function(fn: Callable[..., Any], static: int) -> Callable[..., Any]:
    """``fn`` compiled once per shape where the backend compiles (JAX, TensorFlow), its last
    ``static`` arguments fixed per program; eager calls of Keras's quantizers dispatch dozens
    of operations each (a tenth of a second a layer on JAX)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        n = fn.__code__.co_argcount
        return jax.jit(fn, static_argnums=tuple(range(n - static, n)))
    if backend == "tensorflow":
        import tensorflow as tf

        programs: dict[Any, Any] = {}

        def call(*args: Any) -> Any:
            fixed = args[len(args) - static:]
            if fixed not in programs:
                programs[fixed] = tf.function(lambda *a: fn(*a, *fixed), autograph=False)
            return programs[fixed](*args[:len(args) - static])
        return call
    return fn


def _unpack_channel(kernel: Any, scale: Any, columns: int) -> Any:
    unpacked = keras.quantizers.unpack_int4(kernel, columns, axis=-1)
    return keras.ops.divide(keras.ops.cast(unpacked, "float32"), scale)


def _unpack_grouped(kernel: Any, scale: Any, zero: Any, g_idx: Any, columns: int) -> Any:
    from keras.src.quantizers.quantizers import dequantize_with_sz_map

    unpacked = keras.quantizers.unpack_int4(kernel, columns, axis=-1)
    return dequantize_with_sz_map(unpacked, scale, zero, g_idx, group_axis=0)


@functools.cache
def int4_channel() -> Callable[..., Any]:
    """Keras's read-back of a per-channel int4 kernel (``unpack_int4``, divided by its scale),
    compiled once per shape."""
    return compiled_function(_unpack_channel, 1)


@functools.cache
def int4_grouped() -> Callable[..., Any]:
    """Keras's read-back of a grouped int4 kernel (``unpack_int4``, ``dequantize_with_sz_map``),
    compiled once per shape."""
    return compiled_function(_unpack_grouped, 1)
