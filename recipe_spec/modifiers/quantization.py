"""Quantization-aware training (QAT), with SparseML's current and legacy argument sets."""

from __future__ import annotations

from typing import Any

from . import rules
from .common import LOG_TYPES
from .objects import GPTQModifier, QuantizationModifier  # llm-compressor's classes (plain data)
from .spec import Arg, Look, ModifierSpec

__all__ = ["SPECS", "GPTQModifier", "QuantizationModifier"]

_NOT_WITH_LEGACY_KEYS: dict[str, Any] = {
    "description": (
        "Current-key-set option not allowed together with legacy keys (submodules, quantize_*, "
        "*_bits, ...): use one key set."
    ),
    "not": {},
}

QUANTIZATION = ModifierSpec(
    name="QuantizationModifier",
    description=(
        "Quantization-aware training: from start_epoch the model (or the listed submodules) runs "
        "with fake-quantized weights and activations until the end of training. Accepts "
        "SparseML's current keys (scheme, scheme_overrides, ignore, strict) or its legacy keys "
        "(submodules, quantize_*_activations, *_bits, ...), but not both in one modifier."
    ),
    category="quantization",
    args=(
        Arg("start_epoch", {
            "description": (
                "Epoch (fractions allowed) at which quantization-aware training starts (modules "
                "fused and fake-quantized); -1 means at initialization."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        Arg("end_epoch", {
            "description": (
                "Quantization has no end: once enabled it stays on, so only -1 is accepted (kept "
                "for YAML round trips)."
            ),
            "type": "number",
            "const": -1,
            "default": -1,
        }),
        Arg("disable_quantization_observer_epoch", {
            "description": (
                "Epoch (fractions allowed, not before start_epoch) after which quantization "
                "observers stop updating scales and zero points; null never freezes them."
            ),
            "type": ["number", "null"],
            "minimum": -1,
            "default": None,
        }),
        Arg("freeze_bn_stats_epoch", {
            "description": (
                "Epoch (fractions allowed, not before start_epoch) after which batch-norm running "
                "statistics are frozen; null never freezes them."
            ),
            "type": ["number", "null"],
            "minimum": -1,
            "default": None,
        }),
        Arg("model_fuse_fn_name", {
            "description": (
                "How Conv-BN-ReLU blocks are fused before QAT: null or 'conv_bn_relus' uses the "
                "built-in fuser, 'no_fuse' skips fusing, any other name calls that method of the "
                "model."
            ),
            "type": ["string", "null"],
            "minLength": 1,
            "default": None,
        }),
        Arg("model_fuse_fn_kwargs", {
            "description": "Keyword arguments passed to the fusing function.",
            "type": "object",
        }),
        Arg("num_calibration_steps", {
            "description": (
                "Batches of the calibration data loader run right after QAT is enabled; null uses "
                "the whole loader (calibration only happens when a loader is given)."
            ),
            "type": ["integer", "null"],
            "minimum": 0,
            "default": None,
        }),
        Arg("scheme", {
            "description": (
                "Current key set: default quantization scheme for every quantized module (alias "
                "or mapping, see $defs/quantization_scheme); null means 'default'."
            ),
            "type": ["string", "object", "null"],
            "anyOf": [{"type": "null"}, {"$ref": "#/$defs/quantization_scheme"}],
            "default": None,
        }),
        Arg("scheme_overrides", {
            "description": (
                "Current key set: module type names (e.g. 'Embedding') or submodule names mapped "
                "to the scheme to use for them instead of scheme ('default' = scheme)."
            ),
            "type": "object",
            "propertyNames": {"minLength": 1},
            "additionalProperties": {"$ref": "#/$defs/quantization_scheme"},
        }),
        Arg("ignore", {
            "description": (
                "Current key set: module type names or submodule names left unquantized."
            ),
            "type": "array",
            "items": {"type": "string", "minLength": 1},
        }, names="layers_or_types"),
        Arg("strict", {
            "description": (
                "Current key set: raise an error when a name in ignore or scheme_overrides "
                "matches nothing in the model."
            ),
            "type": "boolean",
            "default": True,
        }),
        Arg("submodules", {
            "description": (
                "Legacy key set: exact names of the submodules to quantize (all must exist); "
                "omitted quantizes the whole model."
            ),
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
        }, names="layers"),
        Arg("quantize_embeddings", {
            "description": "Legacy key set: fake-quantize Embedding weights too.",
            "type": ["boolean", "integer"],
            "$ref": "#/$defs/legacy_flag",
            "default": True,
        }),
        Arg("reduce_range", {
            "description": (
                "Legacy key set: reduce the quantized range by one bit (avoids overflow on some "
                "hardware)."
            ),
            "type": ["boolean", "integer"],
            "$ref": "#/$defs/legacy_flag",
            "default": False,
        }),
        Arg("quantize_linear_activations", {
            "description": (
                "Legacy key set: fake-quantize the output activations of Linear layers."
            ),
            "type": ["boolean", "integer"],
            "$ref": "#/$defs/legacy_flag",
            "default": True,
        }),
        Arg("quantize_conv_activations", {
            "description": (
                "Legacy key set: fake-quantize the output activations of convolution layers."
            ),
            "type": ["boolean", "integer"],
            "$ref": "#/$defs/legacy_flag",
            "default": True,
        }),
        Arg("quantize_embedding_activations", {
            "description": (
                "Legacy key set: fake-quantize the output activations of Embedding layers."
            ),
            "type": ["boolean", "integer"],
            "$ref": "#/$defs/legacy_flag",
            "default": True,
        }),
        Arg("activation_bits", {
            "description": "Legacy key set: bit width of quantized activations.",
            "type": "integer",
            "minimum": 1,
            "maximum": 8,
            "default": 8,
        }),
        Arg("weight_bits", {
            "description": "Legacy key set: bit width of quantized weights.",
            "type": "integer",
            "minimum": 1,
            "maximum": 8,
            "default": 8,
        }),
        Arg("exclude_batchnorm", {
            "description": "Legacy key set: do not quantize BatchNorm modules.",
            "type": ["boolean", "integer"],
            "$ref": "#/$defs/legacy_flag",
            "default": True,
        }),
        Arg("exclude_module_types", {
            "description": (
                "Legacy key set: module class names not to quantize (Softmax is always excluded)."
            ),
            "type": "array",
            "items": {"type": "string", "minLength": 1},
        }),
        Arg("custom_quantizable_module_types", {
            "description": (
                "Legacy key set: extra module class names to treat as quantizable (e.g. 'SiLU')."
            ),
            "type": "array",
            "items": {"type": "string", "minLength": 1},
        }),
        Arg("activation_qconfig_kwargs", {
            "description": "Legacy key set: extra keyword arguments for the activation observers.",
            "type": "object",
        }),
        Arg("weight_qconfig_kwargs", {
            "description": "Legacy key set: extra keyword arguments for the weight observers.",
            "type": "object",
        }),
        Arg("tensorrt", {
            "description": (
                "Legacy key set: TensorRT-compatible settings: symmetric int8 inputs and weights, "
                "no output activations, no fusing by default."
            ),
            "type": ["boolean", "integer"],
            "$ref": "#/$defs/legacy_flag",
            "default": False,
        }),
        LOG_TYPES,
    ),
    schema_extra={
        "required": [],
        "additionalProperties": False,
        "$defs": {
            "quantization_args": {
                "type": "object",
                "description": "How one kind of tensor is fake-quantized.",
                "properties": {
                    "num_bits": {
                        "description": "Bit width of the quantized values.",
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 8,
                        "default": 8,
                    },
                    "symmetric": {
                        "description": (
                            "Symmetric (zero point 0) rather than asymmetric quantization."
                        ),
                        "type": "boolean",
                        "default": False,
                    },
                    "strategy": {
                        "description": (
                            "Scope of the scale / zero point: per tensor, per output channel, or "
                            "per token at runtime."
                        ),
                        "type": "string",
                        "enum": ["tensor", "channel", "dynamic_token"],
                        "default": "tensor",
                    },
                    "kwargs": {
                        "description": (
                            "Extra keyword arguments for the observer / fake-quantize constructor "
                            "(e.g. {observer: minmaxobserver})."
                        ),
                        "type": "object",
                    },
                },
                "additionalProperties": False,
            },
            "quantization_scheme": {
                "description": (
                    "A quantization scheme: the alias 'default' (8-bit asymmetric inputs, 8-bit "
                    "symmetric weights, no outputs), 'deepsparse' (same), 'tensorrt' (8-bit "
                    "symmetric inputs and weights), or a mapping of input_activations / weights / "
                    "output_activations (null = not quantized)."
                ),
                "anyOf": [
                    {"enum": ["default", "deepsparse", "tensorrt"]},
                    {
                        "type": "object",
                        "properties": {
                            "input_activations": {
                                "description": (
                                    "Quantization of module inputs; null leaves them in float. "
                                    "Default 8-bit asymmetric."
                                ),
                                "type": ["object", "null"],
                                "anyOf": [{"type": "null"}, {"$ref": "#/$defs/quantization_args"}],
                            },
                            "weights": {
                                "description": (
                                    "Quantization of weights; null leaves them in float. Default "
                                    "8-bit symmetric."
                                ),
                                "type": ["object", "null"],
                                "anyOf": [{"type": "null"}, {"$ref": "#/$defs/quantization_args"}],
                            },
                            "output_activations": {
                                "description": (
                                    "Quantization of module outputs; null (the default) leaves "
                                    "them in float."
                                ),
                                "type": ["object", "null"],
                                "anyOf": [{"type": "null"}, {"$ref": "#/$defs/quantization_args"}],
                            },
                            "target_hardware": {
                                "description": (
                                    "Name of the deployment target the scheme is meant for "
                                    "(informational)."
                                ),
                                "type": ["string", "null"],
                            },
                        },
                        "additionalProperties": False,
                    },
                ],
            },
            "legacy_flag": {
                "description": (
                    "A boolean; 0 and 1 are accepted as false and true because SparseML read "
                    "these flags by Python truthiness and its own test recipes write them so."
                ),
                "anyOf": [{"type": "boolean"}, {"type": "integer", "enum": [0, 1]}],
            },
        },
        "allOf": [
            {
                "$comment": (
                    "SparseML routed a modifier with any legacy-only key to the legacy class, "
                    "which rejects the current-only keys."
                ),
                "if": {
                    "anyOf": [
                        {"required": ["submodules"]},
                        {"required": ["quantize_embeddings"]},
                        {"required": ["reduce_range"]},
                        {"required": ["quantize_linear_activations"]},
                        {"required": ["quantize_conv_activations"]},
                        {"required": ["quantize_embedding_activations"]},
                        {"required": ["activation_bits"]},
                        {"required": ["weight_bits"]},
                        {"required": ["exclude_batchnorm"]},
                        {"required": ["exclude_module_types"]},
                        {"required": ["custom_quantizable_module_types"]},
                        {"required": ["activation_qconfig_kwargs"]},
                        {"required": ["weight_qconfig_kwargs"]},
                        {"required": ["tensorrt"]},
                    ],
                },
                "then": {
                    "properties": {
                        "scheme": _NOT_WITH_LEGACY_KEYS,
                        "scheme_overrides": _NOT_WITH_LEGACY_KEYS,
                        "ignore": _NOT_WITH_LEGACY_KEYS,
                        "strict": _NOT_WITH_LEGACY_KEYS,
                    },
                },
            },
        ],
    },
    example={
        "start_epoch": 4.0,
        "disable_quantization_observer_epoch": 5.0,
        "freeze_bn_stats_epoch": 5.0,
        "scheme": {
            "input_activations": {"num_bits": 8, "symmetric": False},
            "weights": {"num_bits": 8, "symmetric": True},
        },
        "scheme_overrides": {
            "Embedding": {
                "input_activations": None,
                "weights": {"num_bits": 8, "symmetric": True},
            },
        },
        "ignore": ["LayerNorm", "Softmax"],
    },
    look=Look("QAT", phase="quantization-aware training", colour="tab:purple"),
    schedule="quantization",
    emits=frozenset({"quantization", "observers", "bn_stats"}),
    needs=frozenset({"quantization"}),
    rules=(rules.no_end,),
)

SPECS: tuple[ModifierSpec, ...] = (QUANTIZATION,)
