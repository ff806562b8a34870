"""compressed-tensors' quantization config, resolved as llm-compressor resolves it: the one model
of compressed-tensors is :mod:`recipe_spec.compressed_tensors` (this name is kept for old
imports)."""

from __future__ import annotations

from ..compressed_tensors.config import (
    ACTIVATION_STRATEGIES,
    ARG_FIELDS,
    PRESET_ACTIVATIONS,
    PRESET_SCHEMES,
    UNSUPPORTED_PRESETS,
    ActivationArgs,
    complete_args,
    is_preset,
    preset_activations,
    resolve_config,
)

__all__ = ["PRESET_SCHEMES", "UNSUPPORTED_PRESETS", "ARG_FIELDS", "complete_args", "resolve_config",
           "is_preset", "ActivationArgs", "ACTIVATION_STRATEGIES", "PRESET_ACTIVATIONS", "preset_activations"]
