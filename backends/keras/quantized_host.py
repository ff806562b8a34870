"""The Keras calibration host's quantized weights (:class:`QuantizedWeights`, a base of
:class:`~.oneshot.KerasCalibrationHost`): what a one-shot quantization modifier records during
calibration, and Keras's own quantized layers made from it at the end (:mod:`.quantized`).

The calibration-host protocol's part (:mod:`recipe_spec.oneshot.host`):
:meth:`~QuantizedWeights.attach_quantization` reads a resolved compressed-tensors
``QuantizationConfig`` mapping (``config_groups`` with ``targets``, ``weights``,
``input_activations``; ``ignore``), gives each targeted layer its scheme and refuses, before any
weight changes, a scheme Keras has no layer for (:class:`~.quantized.QuantizationRefused`);
:meth:`~QuantizedWeights.set_quantized` takes a weight and its qparams under compressed-tensors'
names (``weight_scale``, ``weight_zero_point``, ``weight_g_idx``, ``input_scale``).

Calibration must see each quantized weight as the float values it stands for, with the layer's
inputs in float: a later block is calibrated on the outputs of the quantized earlier ones, as
llm-compressor does. So a GPTQ weight (on its grid) is written into the float kernel, a weight
of None (round to nearest: llm-compressor keeps the float weight until it saves) leaves it, and
:meth:`~QuantizedWeights.finish` (called before saving) turns each layer into Keras's quantized
layer holding the integers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from recipe_spec.quantization.args import QuantArgs
from recipe_spec.quantization.scheme import ActivationArgs

from .quantized import (
    WEIGHT_ONLY_INT8_LOST,
    QuantizationRefused,
    QuantizedLayer,
    check_quantizable,
    grid_values,
    hub_backbone_layers,
    keras_version,
    quantize_layer,
    saved_config_is_lost,
    weight_only_int8,
)

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
            self._schemes: dict[str, tuple[QuantArgs, ActivationArgs | None]] = {}
            self.quantized = []  # one line per layer turned into Keras's quantized layer
        return self._pending

    def attach_quantization(self, config: Mapping[str, Any]) -> None:
        """Give every Linear layer a group of ``config`` targets (and ``ignore`` does not name)
        its scheme; :class:`~.quantized.QuantizationRefused` naming the first layer whose
        scheme Keras cannot hold, before any weight changes."""
        from recipe_spec.oneshot.modifiers import matches

        self._quantized_state()
        ignore = list(config.get("ignore") or [])
        groups = list((config.get("config_groups") or {}).values())
        for info in self.modules():  # type: ignore[attr-defined]
            if any(matches(t, info.name, info.classes) for t in ignore):
                continue
            for group in groups:
                if any(matches(t, info.name, info.classes) for t in group.get("targets") or []):
                    if not info.prunable:
                        if "Embedding" in info.classes:
                            raise QuantizationRefused(
                                f"{info.name}: the recipe quantizes this Embedding layer; recipe-spec's Keras "
                                "backend quantizes Dense and EinsumDense layers only (PyTorch quantizes embeddings "
                                "round to nearest): leave it out of the targets (ignore:), or run the recipe on "
                                "PyTorch")
                        break
                    weights = group.get("weights")
                    if weights is None:
                        raise QuantizationRefused(
                            f"{info.name}: Keras {keras_version()} has no quantized layer for a scheme without "
                            "weights (input activations only: its quantized layers quantize the kernel); give "
                            "the scheme weights, or leave the layer out of the targets (ignore:)")
                    args = QuantArgs.from_config({k: v for k, v in weights.items() if v is not None})
                    acts = ActivationArgs.from_config(group.get("input_activations"))
                    self._refuse_reverse(info.name)
                    refusal = getattr(self._linear[info.name], "quantization_refusal", None)
                    if refusal:
                        raise QuantizationRefused(f"{info.name}: {refusal}")
                    check_quantizable(self._linear[info.name].layer, args, acts, name=info.name,
                                      need_input_scale=False)
                    self._schemes[info.name] = (args, acts)
                    break

    def set_quantized(self, name: str, weight: Any, qparams: Mapping[str, Any]) -> None:
        """Record module ``name`` as quantized (the protocol's form): ``weight`` ``(out, in)`` on
        its grid, or None to keep the float weight; ``qparams`` under compressed-tensors' names
        and shapes. The scheme is the one :meth:`attach_quantization` gave the layer."""
        if name not in self._quantized_state() and name not in self._schemes:
            raise ValueError(f"{name} has no quantization scheme: attach_quantization() did not select it")
        args, acts = self._schemes[name]
        scale = np.asarray(qparams["weight_scale"], dtype=np.float32)
        zero = qparams.get("weight_zero_point")
        g_idx = qparams.get("weight_g_idx")
        input_scale = qparams.get("input_scale")
        self.record_quantized(name, self.weight(name) if weight is None else weight,  # type: ignore[attr-defined]
                              scale, None if zero is None else np.asarray(zero, dtype=np.float32), args,
                              None if g_idx is None else [int(g) for g in np.asarray(g_idx).reshape(-1)],
                              activations=acts, write=weight is not None,
                              input_scale=None if input_scale is None else float(np.asarray(input_scale).reshape(-1)[0]))

    def save_problem(self, quantized: bool) -> str | None:
        """Why :meth:`save` could not write the model with the schemes attached so far
        (``quantized``: the run quantizes), or None: weight-only int8 inside a keras-hub
        backbone (:meth:`check_saveable`), naming the first such layer. Asked before any
        weight changes when ``oneshot(output_dir=...)`` will save."""
        if not quantized:
            return None
        self._quantized_state()
        inside = hub_backbone_layers(self.model)
        for name, (args, acts) in self._schemes.items():
            if id(self._linear[name].layer) in inside and weight_only_int8(args, acts):
                return f"{name}: {WEIGHT_ONLY_INT8_LOST}"
        return None

    def _refuse_reverse(self, name: str) -> None:
        if self._linear[name].reverse:
            raise QuantizationRefused(f"{name}: the reverse embeddings of a ReversibleEmbedding have no quantized "
                                      "Keras layer of their own (Keras would quantize the embedding table too); "
                                      "leave it out of the targets (ignore: [lm_head])")

    def record_quantized(self, name: str, weight: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None,
                         args: Any, g_idx: Sequence[int] | None = None, *, activations: Any = None,
                         input_scale: float | None = None, write: bool = True) -> None:
        """Record module ``name``'s weight on the grid of ``scale`` / ``zero_point`` (``args``:
        :class:`~recipe_spec.quantization.QuantArgs`; ``g_idx``: each input column's group;
        ``activations``: the scheme's
        :class:`~recipe_spec.quantization.scheme.ActivationArgs`, None for weight-only;
        ``input_scale``: a static FP8 input scale) and, with ``write``, write it dequantized, so
        that calibration sees float weights; :meth:`finish` makes the Keras layer. A scheme
        Keras cannot hold is refused here (:class:`~.quantized.QuantizationRefused`), before
        anything changes."""
        pending = self._quantized_state()
        lin = self._linear[name]
        self._refuse_reverse(name)
        check_quantizable(lin.layer, args, activations, name=name, need_input_scale=False)
        first = pending.get(name, {}).get("reference")
        integers, grid = grid_values(weight, scale, zero_point, args, g_idx)
        if args.type == "int" and args.num_bits <= 8:  # kept until finish: a byte each
            integers = integers.astype(np.int8)
        pending[name] = dict(weight=grid, integers=integers, scale=scale,
                             zero_point=zero_point, args=args, g_idx=g_idx, activations=activations,
                             input_scale=input_scale, reference=first if first is not None else lin.weight())
        if write:
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
                                                 reference=p["reference"], integers=p["integers"]))
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
            raise QuantizationRefused(f"{', '.join(lost)}: {WEIGHT_ONLY_INT8_LOST}")
