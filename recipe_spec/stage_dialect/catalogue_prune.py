"""Stage/group one-shot pruning modifiers (SparseGPT, Wanda, REAP; validated only).

SparseML 1.6 declares SparseGPT's ``sparsity``, ``block_size`` and ``quantize`` without
defaults (required) and still has ``target_ids``/``layer_prefix``; 1.7 drops those two and
``quantize`` is gone from 1.8 (use GPTQModifier). llm-compressor 0.5 moves the shared
arguments into a sparsity base class where ``sparsity`` has no default and
``sequential_update`` is deprecated (False is forced to True). ``percdamp``, ``prunen`` /
``prunem`` and ``compress_layers`` are development names renamed before SparseML 1.6.
"""

from __future__ import annotations

from typing import Any

from .spec import Deprecation, Renamed, StageSpec, arg, declare

__all__ = ["SPECS"]

_STR_LIST: dict[str, Any] = {"type": ["string", "array", "null"], "items": {"type": "string"}}
#: A sparsity: a fraction of the weights in [0, 1) (``fraction``: reported as M011, with the
#: fraction as the hint when written as a percentage).
_FRACTION: dict[str, Any] = {"minimum": 0, "exclusiveMaximum": 1, "fraction": True}

_SPARSITY_ARGS = (
    arg("sparsity", "Target sparsity: one value, or a list with one per target match "
        "(llm-compressor 0.5+; one per decoder layer before).",
        oneshot="runs", type=["number", "array", "null"], items={"type": "number", **_FRACTION}, **_FRACTION),
    arg("mask_structure", "'0:0' (unstructured) or 'N:M' such as '2:4'.", oneshot="runs", type="string",
        pattern="^[0-9]+:[0-9]+$", nm=True, default="0:0"),
    arg("sequential_update", "Compress layer after layer (deprecated in llm-compressor).",
        oneshot="inert", type=["boolean", "null"]),
    arg("targets", "Layers compressed one after another (names, 're:' patterns, classes).",
        oneshot="runs", **_STR_LIST, default=["Linear"]),
    arg("sparsity_profile", "Per-layer sparsity profile: 'owl' (with owl_m and owl_lmbda).",
        {"sparseml": ">=1.8", "llmcompressor": ""}, oneshot="runs", type=["string", "null"]),
    arg("owl_m", "OWL outlier threshold: a score above owl_m times its layer's mean is an outlier.", {"sparseml": ">=1.8", "llmcompressor": ""},
        oneshot="runs", type=["integer", "null"]),
    arg("owl_lmbda", "OWL spread: layer sparsities lie within sparsity ± owl_lmbda.", {"sparseml": ">=1.8", "llmcompressor": ""},
        oneshot="runs", type=["number", "null"]),
    arg("sequential_targets", "Layer classes compressed one after another.",
        {"llmcompressor": ">=0.5,<0.11"}, type=["string", "array", "null"]),
    arg("ignore", "Layers not pruned.", {"llmcompressor": ">=0.5"}, oneshot="runs", **_STR_LIST, default=[]),
)
_DEPRECATED = (
    Deprecation("sequential_update", {"llmcompressor": ">=0.5"},
                "sequential_update is deprecated: llm-compressor always updates sequentially "
                "(false is forced to true with a warning)"),
)
_RENAMED = (
    Renamed("prunen", "mask_structure", "write mask_structure: 'N:M'"),
    Renamed("prunem", "mask_structure", "write mask_structure: 'N:M'"),
    Renamed("compress_layers", "targets"),
)
_INSTEAD = {
    "sequential_targets": "delete it (pass sequential_targets to oneshot() instead)",
    "quantize": "delete it and add a GPTQModifier or QuantizationModifier after this one",
}

SPARSEGPT = declare(
    "SparseGPTModifier", "SparseGPT one-shot pruning (second-order weight reconstruction).",
    "pruning", {"sparseml": "", "llmcompressor": ""},
    (
        *_SPARSITY_ARGS,
        arg("block_size", "Columns per block.", oneshot="runs", type="integer", minimum=1, default=128),
        arg("dampening_frac", "Hessian dampening fraction.", oneshot="runs", type=["number", "null"],
            minimum=0, default=0.01),
        arg("quantize", "Also quantize (then QuantizationModifier arguments).",
            {"sparseml": "<1.8"}, type=["boolean", "object"]),
        arg("target_ids", "Layer outputs to cache.", {"sparseml": "1.6"},
            type=["array", "null"], items={"type": "string"}),
        arg("layer_prefix", "Prefix of the decoder layers.", {"sparseml": "1.6"},
            type=["string", "null"]),
        arg("preserve_sparsity_mask", "Keep an existing mask.",
            {"sparseml": ">=1.8", "llmcompressor": ""}, oneshot="runs", type="boolean", default=False),
        arg("offload_hessians", "Keep Hessians on the CPU.", {"llmcompressor": ">=0.5"},
            oneshot="inert", type="boolean"),
    ),
    required={"sparsity": {"sparseml": "1.6", "llmcompressor": ">=0.5"},
              "block_size": {"sparseml": "1.6"}, "quantize": {"sparseml": "1.6"}},
    renamed=(*_RENAMED, Renamed("percdamp", "dampening_frac", "renamed before SparseML 1.6")),
    deprecated=_DEPRECATED,
    instead={**_INSTEAD, "target_ids": "delete it (SparseML 1.7 dropped it)",
             "layer_prefix": "delete it (the decoder layers are found from the model)"},
    example={"sparsity": 0.5, "mask_structure": "2:4", "targets": ["re:model.layers.\\d+$"]},
    oneshot_needs=frozenset({"oneshot", "scores:sparsegpt"}),
)

WANDA = declare(
    "WandaPruningModifier", "Wanda one-shot pruning (|weight| x activation norm).",
    "pruning", {"sparseml": ">=1.7", "llmcompressor": ""}, _SPARSITY_ARGS,
    required={"sparsity": {"llmcompressor": ">=0.5"}}, renamed=_RENAMED,
    deprecated=_DEPRECATED, instead=_INSTEAD, example={"sparsity": 0.5},
    oneshot_needs=frozenset({"oneshot", "scores:wanda"}),
)

REAP = declare(
    "REAPPruningModifier", "REAP: prune whole experts of mixture-of-experts layers.",
    "pruning", {"llmcompressor": ">=0.13"},
    (
        arg("sparsity", "Fraction of each layer's experts removed (the lowest router-weighted output norms).",
            oneshot="runs", type="number", exclusiveMinimum=0, exclusiveMaximum=1, fraction=True),
        arg("ignore", "Layers left alone: regular expressions searched in each MoE layer's name.", oneshot="runs",
            type="array", items={"type": "string"}, default=[]),
        arg("report_path", "A .json file written with the experts each layer kept.", {"llmcompressor": ">=0.14"},
            oneshot="runs", type=["string", "null"], pattern="\\.json$", default=None),
    ),
    required={"sparsity": {"llmcompressor": ""}}, example={"sparsity": 0.25},
    oneshot_needs=frozenset({"oneshot", "prune:experts"}),
)

SPECS: tuple[StageSpec, ...] = (SPARSEGPT, WANDA, REAP)
