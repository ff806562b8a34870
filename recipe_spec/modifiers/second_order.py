"""Second-order pruning modifiers: M-FAC (WoodFisher) and OBS (oBERT).

Both follow the gradual pruning schedule of GMPruningModifier, but rank weights with an inverse
empirical Fisher built from recent gradients and correct the remaining weights at each step.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import rules
from .common import (
    GLOBAL_SPARSITY,
    GRADUAL_ARGS,
    GRADUAL_REQUIRED,
    LOG_TYPES,
    MASK_TYPE,
    MASK_TYPE_DEF,
    PARAM_NAME_DEF,
    PARAMS_DEF,
    SPARSITY_MAP_DEF,
    SPARSITY_MAP_NEEDS_EMPTY_PARAMS,
    gradual_pruning,
)
from .spec import Arg, Look, ModifierSpec

__all__ = ["SPECS"]

# M-FAC settings given flat or, in the old spelling, grouped under mfac_options.
_NUM_GRADS: dict[str, Any] = {
    "description": (
        "Number of recent gradients used to estimate the inverse Fisher: an integer, or a mapping "
        "from sparsity threshold to count (key 0 required)."
    ),
    "type": ["integer", "object"],
    "anyOf": [{"type": "integer", "minimum": 1}, {"$ref": "#/$defs/num_grads_map"}],
    "default": 64,
}

_DAMP: dict[str, Any] = {
    "description": (
        "Dampening lambda added to the empirical Fisher diagonal (F = lambda*I + G^T G / m)."
    ),
    "type": "number",
    "exclusiveMinimum": 0,
    "default": 1e-05,
}

_GRADS_DEVICE: dict[str, Any] = {
    "description": (
        "Device that stores the gradient buffer (e.g. 'cpu', 'cuda:0', or a CUDA index)."
    ),
    "type": ["string", "integer"],
    "default": "cpu",
}

_FISHER_BLOCK_SIZE: dict[str, Any] = {
    "description": (
        "Size of the diagonal blocks of the block-diagonal Fisher approximation; null computes "
        "the full matrix."
    ),
    "type": ["integer", "null"],
    "minimum": 1,
    "default": 2000,
}

_NUM_PAGES: dict[str, Any] = {
    "description": (
        "Pages the gradient samples are split into for GPU computation when fisher_block_size is "
        "null (num_grads must be divisible by it)."
    ),
    "type": "integer",
    "minimum": 1,
    "default": 1,
}

_NOT_WITH_MFAC_OPTIONS: dict[str, Any] = {
    "description": (
        "Not allowed together with mfac_options (old grouped spelling): give each M-FAC setting "
        "once."
    ),
    "not": {},
}

MFAC_PRUNING = ModifierSpec(
    name="MFACPruningModifier",
    description=(
        "Gradual pruning scored by M-FAC / WoodFisher: weights are ranked by w^2 / (2 [F^-1]_qq) "
        "from an inverse empirical Fisher built from recent gradients, and the remaining weights "
        "receive the Optimal Brain Surgeon correction at every pruning step."
    ),
    category="pruning",
    args=(
        *GRADUAL_ARGS,
        MASK_TYPE,
        Arg("global_sparsity", {
            "description": (
                "Rank all selected parameters together with one global threshold (true) or prune "
                "layer by layer (false)."
            ),
            "type": "boolean",
            "default": False,
        }),
        Arg("use_gradient_buffering", {
            "description": (
                "true: always collect gradients from the training steps (ring buffer); false: "
                "require a gradient sampler; null: use a gradient sampler when one is provided."
            ),
            "type": ["boolean", "null"],
            "default": None,
        }),
        Arg("num_grads", _NUM_GRADS),
        Arg("damp", _DAMP),
        Arg("grads_device", _GRADS_DEVICE),
        Arg("fisher_block_size", _FISHER_BLOCK_SIZE),
        Arg("num_pages", _NUM_PAGES),
        Arg("available_devices", {
            "description": (
                "Devices for the inverse-Fisher computation (e.g. ['cuda:0']); defaults to "
                "['cuda:0'] when CUDA is available, else ['cpu']."
            ),
            "type": "array",
            "items": {"type": "string", "minLength": 1},
        }),
        Arg("available_gpus", {
            "description": (
                "Old name of available_devices (renamed in SparseML PR #558), accepted so old "
                "recipes load."
            ),
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "deprecated": True,
        }),
        Arg("grad_sampler_kwargs", {
            "description": (
                "Overrides for the data loader that samples gradients (e.g. {batch_size: 8}), "
                "passed to the gradient sampler's loader builder."
            ),
            "type": "object",
        }),
        Arg("mfac_options", {
            "description": (
                "Old (pre-#558) spelling: the M-FAC settings num_grads, damp, grads_device, "
                "fisher_block_size, num_pages, available_gpus grouped in one mapping; same "
                "meaning as the flat keys, which must then not be given as well."
            ),
            "type": "object",
            "deprecated": True,
            "properties": {
                "num_grads": _NUM_GRADS,
                "damp": _DAMP,
                "grads_device": _GRADS_DEVICE,
                "fisher_block_size": _FISHER_BLOCK_SIZE,
                "num_pages": _NUM_PAGES,
                "available_gpus": {
                    "description": (
                        "Devices for the inverse-Fisher computation (old name of "
                        "available_devices)."
                    ),
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                },
            },
            "additionalProperties": False,
        }),
        LOG_TYPES,
    ),
    schema_extra={
        "required": GRADUAL_REQUIRED,
        "additionalProperties": False,
        "$defs": {
            "param_name": PARAM_NAME_DEF,
            "params": PARAMS_DEF,
            "mask_type": MASK_TYPE_DEF,
            "sparsity_map": SPARSITY_MAP_DEF,
            "num_grads_map": {
                "type": "object",
                "description": (
                    "Sparsity threshold (number in [0, 1], arriving as its string form such as "
                    "'0.0' or '0.5') to the number of gradients to use once that sparsity is "
                    "reached; the threshold 0 must be present (rule M009)."
                ),
                "minProperties": 1,
                "propertyNames": {
                    "pattern": "^(0|1|0?\\.[0-9]+|0\\.|1\\.0*|[0-9](\\.[0-9]+)?[eE]-[0-9]+)$",
                },
                "additionalProperties": {"type": "integer", "minimum": 1},
            },
        },
        "allOf": [SPARSITY_MAP_NEEDS_EMPTY_PARAMS],
        "dependentSchemas": {
            "mfac_options": {
                "$comment": "the old grouped spelling and the flat keys are exclusive",
                "properties": {
                    "num_grads": _NOT_WITH_MFAC_OPTIONS,
                    "damp": _NOT_WITH_MFAC_OPTIONS,
                    "grads_device": _NOT_WITH_MFAC_OPTIONS,
                    "fisher_block_size": _NOT_WITH_MFAC_OPTIONS,
                    "num_pages": _NOT_WITH_MFAC_OPTIONS,
                    "available_gpus": _NOT_WITH_MFAC_OPTIONS,
                    "available_devices": _NOT_WITH_MFAC_OPTIONS,
                },
            },
            "available_gpus": {
                "$comment": "available_gpus is the old name of available_devices",
                "properties": {
                    "available_devices": {
                        "description": (
                            "Not allowed together with available_gpus, its old name: give one of "
                            "them."
                        ),
                        "not": {},
                    },
                },
            },
        },
    },
    example={
        "params": "__ALL_PRUNABLE__",
        "init_sparsity": 0.05,
        "final_sparsity": 0.85,
        "start_epoch": 1.0,
        "end_epoch": 61.0,
        "update_frequency": 4.0,
        "inter_func": "cubic",
        "global_sparsity": True,
        "num_grads": {"0.0": 256, "0.5": 512, "0.75": 1024, "0.83": 1400},
        "fisher_block_size": 10000,
        "available_devices": ["cuda:0"],
    },
    look=Look("M-FAC pruning"),
    **gradual_pruning("mfac", "gradients"),
)

OBS_PRUNING = ModifierSpec(
    name="OBSPruningModifier",
    description=(
        "Optimal BERT Surgeon pruning: gradual pruning whose weights are scored with a "
        "block-diagonal inverse empirical Fisher from sampled gradients, with the Optimal Brain "
        "Surgeon update applied to the remaining weights at every pruning step."
    ),
    category="pruning",
    args=(
        *GRADUAL_ARGS,
        Arg("mask_type", {
            "description": (
                "Sparsity structure: 'unstructured' or 'block4' (groups of 4 along the input "
                "dimension, scored with their 4x4 inverse-Fisher block)."
            ),
            "type": "string",
            "enum": ["unstructured", "block4"],
            "default": "unstructured",
        }),
        GLOBAL_SPARSITY,
        Arg("num_grads", {
            "description": (
                "Number of gradients sampled to build the empirical inverse Fisher at each "
                "pruning step (and each recomputation)."
            ),
            "type": "integer",
            "minimum": 1,
            "default": 1024,
        }),
        Arg("damp", {
            "description": "Dampening lambda of the empirical Fisher (F^-1 starts at I / lambda).",
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 1e-07,
        }),
        Arg("fisher_block_size", {
            "description": (
                "Size B of the diagonal blocks of the per-parameter inverse Fisher approximation; "
                "a multiple of 4 with mask_type block4."
            ),
            "type": "integer",
            "minimum": 1,
            "default": 1,
        }),
        Arg("grad_sampler_kwargs", {
            "description": (
                "Overrides for the data loader that samples gradients (e.g. {batch_size: 16}), "
                "passed to the gradient sampler's loader builder."
            ),
            "type": "object",
        }),
        Arg("num_recomputations", {
            "description": (
                "Times the inverse Fisher is recomputed within one pruning step, moving linearly "
                "from the last to the new target sparsity."
            ),
            "type": "integer",
            "minimum": 1,
            "default": 1,
        }),
        LOG_TYPES,
    ),
    schema_extra={
        "required": GRADUAL_REQUIRED,
        "additionalProperties": False,
        "$defs": {
            "param_name": PARAM_NAME_DEF,
            "params": PARAMS_DEF,
            "sparsity_map": SPARSITY_MAP_DEF,
        },
        "allOf": [
            SPARSITY_MAP_NEEDS_EMPTY_PARAMS,
            {
                "$comment": (
                    "SparseML: block4 needs fisher_block_size % 4 == 0 (the default 1 is not)."
                ),
                "if": {
                    "required": ["mask_type"],
                    "properties": {"mask_type": {"const": "block4"}},
                },
                "then": {
                    "required": ["fisher_block_size"],
                    "properties": {"fisher_block_size": {"multipleOf": 4}},
                },
            },
        ],
    },
    example={
        "params": [
            "re:bert.encoder.layer.*.attention.self.query.weight",
            "re:bert.encoder.layer.*.output.dense.weight",
        ],
        "init_sparsity": 0.7,
        "final_sparsity": 0.9,
        "start_epoch": 2,
        "end_epoch": 26,
        "update_frequency": 4.0,
        "inter_func": "cubic",
        "global_sparsity": True,
        "mask_type": "block4",
        "num_grads": 1024,
        "damp": 1e-07,
        "fisher_block_size": 32,
        "grad_sampler_kwargs": {"batch_size": 8},
    },
    look=Look("OBS pruning"),
    **gradual_pruning("obs", "gradients"),
)

# M012 from the recipe alone reads each modifier's declared defaults: bound once declared
MFAC_PRUNING = replace(MFAC_PRUNING, rules=(rules.num_grads_from_zero, rules.second_order_static(MFAC_PRUNING)))
OBS_PRUNING = replace(OBS_PRUNING, rules=(rules.num_grads_from_zero, rules.second_order_static(OBS_PRUNING)))

SPECS: tuple[ModifierSpec, ...] = (MFAC_PRUNING, OBS_PRUNING)
