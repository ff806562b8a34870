"""The quantization grid, written once over the array operations a backend supplies: what a
weight's scale and zero point are, and which values a quantized weight can take.

- :mod:`.args`: :class:`~.args.QuantArgs`, compressed-tensors' ``QuantizationArgs`` for a
  weight (bits, int or float, symmetric, strategy, group size), read from a recipe's
  ``weights:`` mapping or a preset scheme (``W4A16``, ``W8A8``, ``FP8_DYNAMIC``, ...);
- :mod:`.ops`: the :class:`~.ops.QuantOps` protocol (rounding, clamping, the FP8 cast);
- :mod:`.grid`: the memoryless min-max observer, ``scale``/``zero_point`` from minima and
  maxima, and ``quantize`` / ``dequantize`` / ``fake_quantize``.

The grid is its own package, beside :mod:`recipe_spec.masks`, because more than one
algorithm quantizes onto it: GPTQ (:mod:`recipe_spec.oneshot.gptq.solve`) feeds it
column by column, a round-to-nearest quantizer whole weights; neither owns it. It needs only
array operations, so it sits in the lowest layer.
"""

from .args import PRESET_WEIGHTS, QuantArgs, preset_weights
from .grid import dequantize, fake_quantize, minmax, minmax_qparams, qparams, quantize

__all__ = [
    "QuantArgs",
    "PRESET_WEIGHTS",
    "preset_weights",
    "minmax",
    "qparams",
    "minmax_qparams",
    "quantize",
    "dequantize",
    "fake_quantize",
]
