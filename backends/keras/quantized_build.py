"""Keras's quantized layer built without Keras quantizing the float kernel.

``layer.quantize("int4" | "int8", config)`` computes Keras's own grid of the float kernel
(``abs_max_quantize``, ``pack_int4``), builds the quantized variables and assigns that grid; a
one-shot run then overwrites every one of those variables with its own integers and scales
(:func:`.quantized.quantize_layer`), so the computation is thrown away. On JAX each of its
eager operations also compiles once per kernel shape: a second a model of 28 layers, a sixth of
a GPTQ run on a small model. :func:`build_quantized` does what ``quantize`` does for
``Dense`` and ``EinsumDense`` in Keras 3.15 (the same config resolution, argument checks,
``quantized_build``, dtype policy and tracker handling) minus that computation: the layer ends
with the same variables, shapes, dtypes, policy and config (``tests/test_keras_quantized.py``
builds both and compares them), its variables left for the caller to assign. Where a piece of
Keras it relies on is missing (another Keras), or for other modes and layers, it calls
``layer.quantize`` itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

import keras

from .params import host_to_backend

__all__ = ["build_quantized"]

#: The modes whose ``quantize`` computes a grid the caller overwrites.
_COMPUTED = ("int8", "int4")


def _keras_parts() -> tuple[Any, Any] | None:
    try:
        from keras.src import dtype_policies
        from keras.src.quantizers.quantization_config import validate_and_resolve_config
    except ImportError:
        return None
    return validate_and_resolve_config, dtype_policies


class _HostConstant:
    """Keras's ``"zeros"`` / ``"ones"`` initializer made in NumPy (:func:`~.params.host_to_backend`):
    the same values, which a JAX variable takes in without an eager operation (each of which
    JAX compiles once per shape)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        kind = keras.backend.standardize_dtype(dtype or keras.config.floatx())
        return host_to_backend(np.full(tuple(int(d) for d in shape), self.value, dtype=kind))


@contextlib.contextmanager
def _host_constants() -> Iterator[None]:
    """``add_weight``'s ``"zeros"`` and ``"ones"`` initializers as :class:`_HostConstant` in
    the ``with`` block, on JAX (elsewhere, and where Keras resolves initializers otherwise, as
    they are)."""
    try:
        from keras.src import initializers
    except ImportError:  # pragma: no cover - another Keras layout
        yield
        return
    if keras.backend.backend() != "jax" or not callable(getattr(initializers, "get", None)):
        yield
        return
    original = initializers.get
    constants = {"zeros": _HostConstant(0.0), "ones": _HostConstant(1.0)}

    def get(identifier: Any) -> Any:
        return constants[identifier] if isinstance(identifier, str) and identifier in constants else original(identifier)

    initializers.get = get
    try:
        yield
    finally:
        initializers.get = original


def _builds_itself(layer: Any) -> bool:
    return all(hasattr(layer, a) for a in ("_tracker", "_check_quantize_args", "quantized_build", "_kernel")) and (
        type(layer) is not keras.layers.EinsumDense or hasattr(layer, "_set_quantization_info"))


def build_quantized(layer: Any, mode: str, config: Any) -> None:
    """Make ``layer`` (a built, unquantized ``Dense`` or ``EinsumDense``) Keras's quantized layer
    of ``mode`` and ``config``, as ``layer.quantize(mode, config=config)`` does, without
    computing Keras's grid of its float kernel for ``int8`` and ``int4``: the quantized
    variables hold their initial values until the caller assigns them (every one that
    ``quantize`` would have assigned: ``_kernel``, ``kernel_scale`` and, grouped ``int4``,
    ``kernel_zero``). Other modes and layers go through ``layer.quantize``.

    >>> import keras, numpy as np
    >>> layer = keras.layers.Dense(4)
    >>> layer.build((None, 8))
    >>> build_quantized(layer, "int4", keras.quantizers.Int4QuantizationConfig(block_size=-1))
    >>> layer.quantization_mode, layer.dtype_policy.name, tuple(layer.kernel_scale.shape)
    ('int4', 'int4/-1_from_float32', (4,))
    """
    parts = _keras_parts()
    if (mode not in _COMPUTED or parts is None or type(layer) not in (keras.layers.Dense, keras.layers.EinsumDense)
            or not _builds_itself(layer)):
        layer.quantize(mode, config=config)
        return
    resolve, dtype_policies = parts
    config = resolve(mode, config)
    mode = config.mode
    layer._check_quantize_args(mode, layer.compute_dtype)
    layer._tracker.unlock()
    try:
        layer.quantization_config = config
        shape = layer._kernel.shape
        if type(layer) is keras.layers.EinsumDense:
            layer._set_quantization_info()
        del layer._kernel
        with _host_constants():
            layer.quantized_build(shape, mode, config)
        if layer.dtype_policy.quantization_mode is None:
            name = mode
            if mode == "int4":
                block = getattr(config, "block_size", None)
                name = f"int4/{-1 if block is None else block}"
            layer.dtype_policy = dtype_policies.get(f"{name}_from_{layer.dtype_policy.name}")
    finally:
        layer._tracker.lock()
