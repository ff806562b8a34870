"""compressed-tensors' structures, field by field and release by release: ``QuantizationArgs``
(:data:`ARGS_FIELDS`) and ``QuantizationScheme`` (:data:`SCHEME_FIELDS`), each field with the
compressed-tensors releases that have it, its schema per release and the default
compressed-tensors gives it. The validator checks recipes against them
(:mod:`recipe_spec.stage_dialect.quant_args`); the config resolution completes arguments with
their defaults (:mod:`.config`); the tests compare them with compressed-tensors itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["QuantField", "ARGS_FIELDS", "SCHEME_FIELDS", "ARG_NAMES", "ARG_DEFAULTS", "SCHEME_NAMES"]


@dataclass(frozen=True)
class QuantField:
    """One field of a compressed-tensors structure.

    ``ct``: compressed-tensors versions where it exists; ``schemas``: (ct range, schema)
    pairs, the first whose range matches applies (schemas use ``type``/``enum``/``items``,
    see :mod:`recipe_spec.stage_dialect.arg_check`); ``nested``: ``"args"`` when the value is
    itself a QuantizationArgs mapping.
    """

    name: str
    description: str
    schemas: tuple[tuple[str, Mapping[str, Any]], ...]
    ct: str = ""
    required: bool = False
    nested: str | None = None
    #: The value compressed-tensors gives the field when it is left out.
    default: Any = None


def _f(name: str, description: str, schema: Mapping[str, Any], ct: str = "", **kw: Any) -> QuantField:
    return QuantField(name, description, (("", schema),), ct, **kw)


_STRATEGIES = ["tensor", "channel", "group", "block", "token"]

#: ``QuantizationArgs`` fields (compressed-tensors ``quantization/quant_args.py``).
ARGS_FIELDS: tuple[QuantField, ...] = (
    _f("num_bits", "Bits per quantized value.", {"type": "integer", "minimum": 1}, default=8),
    _f("type", "Value type.", {"enum": ["int", "float"], "ci": True}, default="int"),
    _f("symmetric", "Symmetric (no zero point) or asymmetric.", {"type": "boolean"}, default=True),
    _f("group_size", "Columns per group for the group strategy.", {"type": ["integer", "null"]}),
    QuantField("strategy", "Granularity of scales.", (
        (">=0.13", {"enum": [*_STRATEGIES, "tensor_group", "attn_head", None], "ci": True}),
        (">=0.10", {"enum": [*_STRATEGIES, "tensor_group", None], "ci": True}),
        ("", {"enum": [*_STRATEGIES, None], "ci": True}),
    )),
    QuantField("block_structure", "Block shape for the block strategy.", (
        (">=0.11", {"type": ["array", "null"], "items": {"type": "integer"}}),
        ("", {"type": ["string", "null"]}),
    )),
    QuantField("dynamic", "Compute scales at run time (\"local\": NVFP4 local scales).", (
        (">=0.10", {"type": "boolean", "enum": [True, False, "local"], "ci": True}),
        ("", {"type": "boolean"}),
    ), default=False),
    QuantField("actorder", "GPTQ activation ordering.", (
        (">=0.9", {"enum": [True, False, None, "group", "weight", "dynamic", "static"], "ci": True}),
        ("", {"enum": [True, False, None, "group", "weight"], "ci": True}),
    ), ct=">=0.6"),
    _f("scale_dtype", "Dtype of the scales.", {"type": ["string", "null"]}, ct=">=0.13"),
    _f("zp_dtype", "Dtype of the zero points.", {"type": ["string", "null"]}, ct=">=0.13"),
    _f("observer", "Observer name (e.g. minmax, mse).", {"type": ["string", "null"]}),
    _f("observer_kwargs", "Observer keyword arguments.", {"type": "object"}, default={}),
)

#: ``QuantizationScheme`` fields (compressed-tensors ``quantization/quant_scheme.py``).
SCHEME_FIELDS: tuple[QuantField, ...] = (
    _f("targets", "Layer names, 're:' patterns or class names.",
       {"type": "array", "items": {"type": "string"}}, required=True),
    _f("weights", "Weight quantization.", {"type": ["object", "null"]}, nested="args"),
    _f("input_activations", "Input activation quantization.", {"type": ["object", "null"]},
       nested="args"),
    _f("output_activations", "Output activation quantization.", {"type": ["object", "null"]},
       nested="args"),
    _f("format", "Compression format of the saved checkpoint.", {"type": ["string", "null"]},
       ct=">=0.11"),
)

#: ``QuantizationArgs`` field names, in compressed-tensors' order.
ARG_NAMES: tuple[str, ...] = tuple(f.name for f in ARGS_FIELDS)
#: The value of each ``QuantizationArgs`` field left out.
ARG_DEFAULTS: dict[str, Any] = {f.name: f.default for f in ARGS_FIELDS}
#: ``QuantizationScheme`` field names.
SCHEME_NAMES: tuple[str, ...] = tuple(f.name for f in SCHEME_FIELDS)
