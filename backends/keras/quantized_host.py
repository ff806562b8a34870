"""The Keras calibration host's quantized weights (:class:`QuantizedWeights`, a base of
:class:`~.oneshot.KerasCalibrationHost`): what a one-shot quantization modifier records during
calibration, and Keras's own quantized layers made from it at the end (:mod:`.quantized`).

Calibration must see each quantized weight as the float values it stands for (its
dequantized weight), with the layer's inputs in float: a later block is calibrated on the
outputs of the quantized earlier ones, as llm-compressor does. So :meth:`~QuantizedWeights.set_quantized`
writes the weight on its grid into the float kernel and keeps the integers' scales;
:meth:`~QuantizedWeights.finish` (called before saving) turns each layer into Keras's quantized
layer. A scheme Keras cannot hold is refused when it is recorded, before the weight changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .quantized import QuantizationRefused, QuantizedLayer, check_quantizable, on_grid, quantize_layer, saved_config_is_lost

__all__ = ["QuantizedWeights"]


class QuantizedWeights:
    """Quantized weights recorded on a calibration host with ``model`` and ``_linear``
    (module name -> its ``(out, in)`` view)."""

    model: Any
    _linear: dict[str, Any]

    quantized: list[QuantizedLayer]

    def _quantized_state(self) -> dict[str, dict[str, Any]]:
        if not hasattr(self, "_pending"):
            self._pending: dict[str, dict[str, Any]] = {}
            self.quantized = []  # one line per layer turned into Keras's quantized layer
        return self._pending

    def set_quantized(self, name: str, weight: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None,
                      args: Any, g_idx: Sequence[int] | None = None, *, activations: Any = None,
                      input_scale: float | None = None) -> None:
        """Record module ``name``'s weight on the grid of ``scale`` / ``zero_point`` (``args``:
        :class:`~recipe_spec.quantization.QuantArgs`; ``g_idx``: each input column's group;
        ``activations``: the scheme's
        :class:`~recipe_spec.quantization.activations.ActivationArgs`, None for weight-only;
        ``input_scale``: a static FP8 input scale) and write it dequantized, so that calibration
        sees float weights; :meth:`finish` makes the Keras layer. A scheme Keras cannot hold is
        refused here (:class:`~.quantized.QuantizationRefused`), before anything changes."""
        pending = self._quantized_state()
        lin = self._linear[name]
        if lin.reverse:
            raise QuantizationRefused(f"{name}: the reverse embeddings of a ReversibleEmbedding have no quantized "
                                      "Keras layer of their own (Keras would quantize the embedding table too); "
                                      "leave it out of the targets (ignore: [lm_head])")
        check_quantizable(lin.layer, args, activations, name=name, need_input_scale=False)
        first = pending.get(name, {}).get("reference")
        pending[name] = dict(weight=on_grid(weight, scale, zero_point, args, g_idx), scale=scale,
                             zero_point=zero_point, args=args, g_idx=g_idx, activations=activations,
                             input_scale=input_scale, reference=first if first is not None else lin.weight())
        lin.set_weight(pending[name]["weight"])

    def finish(self) -> list[QuantizedLayer]:
        """Turn every layer recorded by :meth:`set_quantized` into Keras's quantized layer
        (:func:`~.quantized.quantize_layer`); the report lines so far, also kept in
        ``quantized``. Calling it again converts only what was recorded since."""
        pending = self._quantized_state()
        for name, p in list(pending.items()):
            self.quantized.append(quantize_layer(self._linear[name].layer, p["weight"], p["scale"], p["zero_point"],
                                                 p["args"], activations=p["activations"],
                                                 input_scale=p["input_scale"], g_idx=p["g_idx"], name=name,
                                                 reference=p["reference"]))
            del pending[name]
        for attr in ("train_function", "test_function", "predict_function"):
            if getattr(self.model, attr, None) is not None:
                setattr(self.model, attr, None)  # traced with the float layers
        return list(self.quantized)

    def check_saveable(self) -> None:
        """Refuse to save a keras-hub model holding weight-only int8 layers
        (:func:`~.quantized.saved_config_is_lost`)."""
        lost = saved_config_is_lost(self.model)
        if lost:
            raise QuantizationRefused(f"{', '.join(lost)}: weight-only int8 layers of a keras-hub model come back "
                                      "from a saved preset or .keras file quantizing their inputs (keras-hub saves "
                                      "their dtype policy, not their quantization config); save with W8A8 or an "
                                      "int4 scheme, or use the model in memory")
