"""Pruning modifiers: gradual magnitude pruning (layer-wise and global), AC/DC, movement
pruning, holding the current masks, and removing whole layers.

The second-order pruners (M-FAC, OBS) are in :mod:`recipe_spec.modifiers.second_order`.
"""

from __future__ import annotations

from typing import Any

from . import rules
from .common import (
    GLOBAL_SPARSITY,
    GRADUAL_ARGS,
    GRADUAL_END_EPOCH,
    GRADUAL_MAGNITUDE,
    GRADUAL_REQUIRED,
    GRADUAL_START_EPOCH,
    GRADUAL_UPDATE_FREQUENCY,
    INIT_SPARSITY,
    INTER_FUNC,
    LEAVE_ENABLED,
    LOG_TYPES,
    MASK_TYPE,
    MASK_TYPE_DEF,
    PARAM_NAME_DEF,
    PARAMS_DEF,
    PRUNING_PARAMS,
    SPARSITY_MAP_DEF,
    SPARSITY_MAP_NEEDS_EMPTY_PARAMS,
    gradual_pruning,
    update_frequency,
)
from .objects import (  # llm-compressor's classes (plain data)
    ConstantPruningModifier,
    MagnitudePruningModifier,
    REAPPruningModifier,
    SparseGPTModifier,
    WandaPruningModifier,
)
from .spec import Arg, Look, ModifierSpec

__all__ = ["SPECS", "ConstantPruningModifier", "MagnitudePruningModifier", "REAPPruningModifier", "SparseGPTModifier", "WandaPruningModifier"]

# The keywords after "properties" in the three gradual magnitude pruning schemas.
_MAGNITUDE_SCHEMA_EXTRA: dict[str, Any] = {
    "required": GRADUAL_REQUIRED,
    "additionalProperties": False,
    "$defs": {
        "param_name": PARAM_NAME_DEF,
        "params": PARAMS_DEF,
        "mask_type": MASK_TYPE_DEF,
        "sparsity_map": SPARSITY_MAP_DEF,
    },
    "allOf": [SPARSITY_MAP_NEEDS_EMPTY_PARAMS],
}

GM_PRUNING = ModifierSpec(
    name="GMPruningModifier",
    description=(
        "Gradual magnitude pruning: raises the sparsity of the selected parameters from "
        "init_sparsity to final_sparsity along inter_func between start_epoch and end_epoch, "
        "removing the smallest-magnitude weights layer by layer at every update."
    ),
    category="pruning",
    args=(
        *GRADUAL_ARGS,
        MASK_TYPE,
        Arg("global_sparsity", {
            "description": (
                "Rank all selected parameters together (one global threshold) instead of layer by "
                "layer; deprecated here, use GlobalMagnitudePruningModifier."
            ),
            "type": "boolean",
            "default": False,
            "deprecated": True,
        }),
        Arg("phased", {
            "description": (
                "No longer supported (former AC/DC switch, use ACDCPruningModifier); only false "
                "is accepted."
            ),
            "type": "boolean",
            "const": False,
            "default": False,
            "deprecated": True,
        }),
        Arg("score_type", {
            "description": (
                "No longer supported (former scoring switch, use the specific pruning modifier); "
                "only 'magnitude' is accepted."
            ),
            "type": "string",
            "const": "magnitude",
            "default": "magnitude",
            "deprecated": True,
        }),
        LOG_TYPES,
    ),
    schema_extra=_MAGNITUDE_SCHEMA_EXTRA,
    example={
        "params": ["re:.*conv.*weight", "classifier.fc.weight"],
        "init_sparsity": 0.05,
        "final_sparsity": 0.85,
        "start_epoch": 1.0,
        "end_epoch": 31.0,
        "update_frequency": 0.5,
        "inter_func": "cubic",
        "mask_type": "unstructured",
        "leave_enabled": True,
    },
    look=Look("GMP"),
    **GRADUAL_MAGNITUDE,
)

MAGNITUDE_PRUNING = ModifierSpec(
    name="MagnitudePruningModifier",
    description=(
        "Layer-wise gradual magnitude pruning (the same schedule as GMPruningModifier): each "
        "selected parameter is pruned to the interpolated sparsity by removing its "
        "smallest-magnitude weights."
    ),
    category="pruning",
    args=(
        *GRADUAL_ARGS,
        MASK_TYPE,
        LOG_TYPES,
    ),
    schema_extra=_MAGNITUDE_SCHEMA_EXTRA,
    example={
        "params": "__ALL_PRUNABLE__",
        "init_sparsity": 0.05,
        "final_sparsity": 0.9,
        "start_epoch": 0.0,
        "end_epoch": 10.0,
        "update_frequency": 0.5,
        "inter_func": "cubic",
        "mask_type": [1, 4],
    },
    look=Look("Magnitude pruning"),
    **GRADUAL_MAGNITUDE,
)

GLOBAL_MAGNITUDE_PRUNING = ModifierSpec(
    name="GlobalMagnitudePruningModifier",
    description=(
        "Global gradual magnitude pruning: the selected parameters are ranked together by "
        "magnitude and pruned with one shared threshold, so layers end with different sparsities "
        "that average to the interpolated target."
    ),
    category="pruning",
    args=(
        PRUNING_PARAMS,
        INIT_SPARSITY,
        Arg("final_sparsity", {
            "description": (
                "Overall sparsity reached at end_epoch across all selected parameters: a number "
                "in [0, 1), or a one-entry mapping {sparsity: [selectors]} (then params must be "
                "[]); global pruning needs a single common target."
            ),
            "type": ["number", "object"],
            "anyOf": [
                {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
                {
                    "allOf": [
                        {"$ref": "#/$defs/sparsity_map"},
                        {"maxProperties": 1, "$comment": "global pruning needs one common target"},
                    ],
                },
            ],
        }),
        GRADUAL_START_EPOCH,
        GRADUAL_END_EPOCH,
        GRADUAL_UPDATE_FREQUENCY,
        INTER_FUNC,
        LEAVE_ENABLED,
        MASK_TYPE,
        LOG_TYPES,
    ),
    schema_extra=_MAGNITUDE_SCHEMA_EXTRA,
    example={
        "params": ["re:features.*.conv.*.weight", "classifier.weight"],
        "init_sparsity": 0.05,
        "final_sparsity": 0.8,
        "start_epoch": 0.0,
        "end_epoch": 30.0,
        "update_frequency": 0.5,
        "inter_func": "cubic",
        "mask_type": "unstructured",
        "leave_enabled": True,
    },
    look=Look("Global magnitude pruning"),
    **GRADUAL_MAGNITUDE,
    global_sparsity=True,
)

ACDC_PRUNING = ModifierSpec(
    name="ACDCPruningModifier",
    description=(
        "Alternating Compressed/DeCompressed training (AC/DC): from start_epoch the model "
        "alternates dense phases and phases pruned to compression_sparsity, each update_frequency "
        "epochs long, always ending on a compressed phase."
    ),
    category="pruning",
    args=(
        Arg("compression_sparsity", {
            "description": "Sparsity (fraction of zeros) enforced during each compressed phase.",
            "type": "number",
            "minimum": 0,
            "exclusiveMaximum": 1,
        }),
        Arg("start_epoch", {
            "description": (
                "Whole epoch at which the first (dense) phase starts; -1 means from the start of "
                "training."
            ),
            "type": "integer",
            "minimum": -1,
        }),
        Arg("end_epoch", {
            "description": (
                "Whole epoch at which AC/DC ends; moved earlier if needed so the run ends on a "
                "compressed phase; -1 never ends."
            ),
            "type": "integer",
            "minimum": -1,
        }),
        Arg("update_frequency", {
            "description": "Length in whole epochs of each compressed or dense phase.",
            "type": "integer",
            "minimum": 1,
        }),
        Arg("params", {
            "description": (
                "Parameters to prune: a selector string or non-empty list of selectors (exact "
                "names, 're:' patterns, __ALL__, __ALL_PRUNABLE__)."
            ),
            "type": ["string", "array"],
            "$ref": "#/$defs/params",
            "minItems": 1,
        }),
        GLOBAL_SPARSITY,
        LEAVE_ENABLED,
        Arg("momentum_buffer_reset", {
            "description": (
                "Zero the optimizer's momentum buffers when a dense phase begins, so "
                "re-introduced weights do not carry stale momentum."
            ),
            "type": "boolean",
            "default": True,
        }),
        MASK_TYPE,
        LOG_TYPES,
    ),
    schema_extra={
        "required": [
            "compression_sparsity", "start_epoch", "end_epoch", "update_frequency", "params",
        ],
        "additionalProperties": False,
        "$defs": {"param_name": PARAM_NAME_DEF, "params": PARAMS_DEF, "mask_type": MASK_TYPE_DEF},
    },
    example={
        "compression_sparsity": 0.9,
        "start_epoch": 0,
        "end_epoch": 100,
        "update_frequency": 5,
        "params": "__ALL_PRUNABLE__",
        "global_sparsity": True,
    },
    look=Look("AC/DC"),
    schedule="acdc",
    emits=frozenset({"sparsity", "masks", "momentum"}),
    needs=frozenset({"masks", "scores:magnitude", "acdc"}),
    prunes=True,
    scores="magnitude",
)

MOVEMENT_PRUNING = ModifierSpec(
    name="MovementPruningModifier",
    description=(
        "Movement pruning (Sanh et al., 2020): the gradual schedule of GMPruningModifier, but "
        "weights are ranked by how training moves them away from zero, the score "
        "S -= 0.01 * grad * w accumulated before every optimizer step from the first step; each "
        "selected parameter keeps its highest-scoring weights (layer by layer: movement scores "
        "are not comparable across layers)."
    ),
    category="pruning",
    args=(
        *GRADUAL_ARGS,
        MASK_TYPE,
    ),
    schema_extra=_MAGNITUDE_SCHEMA_EXTRA,
    example={
        "params": ["re:.*weight"],
        "init_sparsity": 0.05,
        "final_sparsity": 0.8,
        "start_epoch": 0.0,
        "end_epoch": 10.0,
        "update_frequency": 1.0,
        "inter_func": "cubic",
        "mask_type": "unstructured",
        "leave_enabled": True,
    },
    look=Look("Movement pruning"),
    rules=(rules.movement_mask_type,),
    **gradual_pruning("movement", "gradients"),
)

CONSTANT_PRUNING = ModifierSpec(
    name="ConstantPruningModifier",
    description=(
        "Holds the current zero pattern of the selected parameters fixed while training (masks = "
        "weights != 0), e.g. for sparse transfer learning or quantizing a pruned model."
    ),
    category="pruning",
    args=(
        Arg("params", {
            "description": (
                "Parameters whose existing zeros are kept: a selector string or non-empty list of "
                "selectors (exact names, 're:' patterns, __ALL__, __ALL_PRUNABLE__)."
            ),
            "type": ["string", "array"],
            "$ref": "#/$defs/params",
            "minItems": 1,
        }),
        Arg("start_epoch", {
            "description": (
                "Epoch (fractions allowed) at which the modifier starts; -1 means from the start "
                "of training."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        Arg("end_epoch", {
            "description": (
                "Epoch (fractions allowed) at which the masks are released; -1 keeps them for the "
                "whole run."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        update_frequency(
            "Ignored: SparseML accepted it and forced -1 (masks are re-applied at every "
            "step); kept so old recipes load; -1, 0 or a positive number.",
            zero=True, default=-1,
        ),
        LOG_TYPES,
    ),
    schema_extra={
        "required": ["params"],
        "additionalProperties": False,
        "$defs": {"param_name": PARAM_NAME_DEF, "params": PARAMS_DEF},
    },
    example={"params": "__ALL_PRUNABLE__", "start_epoch": 0.0, "end_epoch": -1},
    look=Look("Mask hold", phase="masks held, sparsity frozen", colour="tab:gray"),
    schedule="hold_masks",
    emits=frozenset({"masks"}),
    needs=frozenset({"masks"}),
    prunes=True,
)

LAYER_PRUNING = ModifierSpec(
    name="LayerPruningModifier",
    description=(
        "Removes whole layers: from start_epoch the named modules are replaced by identity, and "
        "put back at end_epoch if one is set."
    ),
    category="pruning",
    args=(
        Arg("layers", {
            "description": (
                "Modules to replace with identity: a module name or list of full module names "
                "(e.g. 'bert.encoder.layer.6'); parameter selector tokens (__ALL__, "
                "__ALL_PRUNABLE__) name no layer."
            ),
            "type": ["string", "array"],
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
            ],
        }, names="layers"),
        Arg("start_epoch", {
            "description": (
                "Epoch (fractions allowed) at which the layers are removed; -1 means from the "
                "start of training."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        Arg("end_epoch", {
            "description": (
                "Epoch (fractions allowed) at which the original layers are restored; -1 keeps "
                "them removed."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        update_frequency(
            "Ignored: SparseML accepted it and forced -1 (the layers are swapped once at "
            "start and end); kept so old recipes load; -1, 0 or a positive number.",
            zero=True, default=-1,
        ),
        LOG_TYPES,
    ),
    schema_extra={"required": ["layers"], "additionalProperties": False},
    example={
        "layers": ["bert.encoder.layer.6", "bert.encoder.layer.7"],
        "start_epoch": -1.0,
        "end_epoch": -1.0,
    },
    look=Look("Layer pruning", phase="layers removed", colour="tab:brown"),
    schedule="layers",
    emits=frozenset({"layers"}),
    needs=frozenset({"layers"}),
)

SPECS: tuple[ModifierSpec, ...] = (
    GM_PRUNING,
    MAGNITUDE_PRUNING,
    GLOBAL_MAGNITUDE_PRUNING,
    ACDC_PRUNING,
    MOVEMENT_PRUNING,
    CONSTANT_PRUNING,
    LAYER_PRUNING,
)
