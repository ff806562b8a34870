"""Schema fragments that several modifiers share, each written once.

Only fragments that are the same, word for word, in every modifier using them live here; an
argument that merely has the same name (``start_epoch`` means something different to a
gradual pruner and to a learning-rate setter) is declared with its modifier.

- ``*_DEF``: entries of a schema's ``$defs`` (parameter selectors, mask types, sparsity maps,
  optimizer param groups);
- :class:`~recipe_spec.modifiers.spec.Arg` constants: arguments (most of them those of the
  gradual pruning modifiers, plus ``log_types``, ``param_groups`` and ``constant_logging``);
- schema keywords the gradual pruning modifiers share (``required``, the sparsity-map rule);
- :func:`gradual_pruning`: the behaviour every gradual pruner declares (its schedule, events
  and needs), by how it scores weights.
"""

from __future__ import annotations

from typing import Any

from .spec import Arg

__all__ = [
    "gradual_pruning",
    "GRADUAL_MAGNITUDE",
    "GRADUAL_ARGS",
    "PARAM_NAME_DEF",
    "PARAMS_DEF",
    "MASK_TYPE_DEF",
    "SPARSITY_MAP_DEF",
    "PARAM_GROUPS_DEF",
    "PRUNING_PARAMS",
    "INIT_SPARSITY",
    "FINAL_SPARSITY",
    "GRADUAL_START_EPOCH",
    "GRADUAL_END_EPOCH",
    "GRADUAL_UPDATE_FREQUENCY",
    "update_frequency",
    "INTER_FUNC",
    "LEAVE_ENABLED",
    "MASK_TYPE",
    "GLOBAL_SPARSITY",
    "PARAM_GROUPS",
    "CONSTANT_LOGGING",
    "LOG_TYPES",
    "GRADUAL_REQUIRED",
    "SPARSITY_MAP_NEEDS_EMPTY_PARAMS",
]

def gradual_pruning(scores: str, *needs: str) -> dict[str, Any]:
    """The behaviour fields of a gradual pruner that ranks weights by ``scores``: the
    ``gradual`` track, its ``sparsity``/``masks`` events, and the ``masks`` and
    ``scores:<scores>`` capabilities plus ``needs``.

    >>> sorted(gradual_pruning("mfac", "gradients")["needs"])
    ['gradients', 'masks', 'scores:mfac']
    """
    return {
        "schedule": "gradual",
        "emits": frozenset({"sparsity", "masks"}),
        "needs": frozenset({"masks", f"scores:{scores}", *needs}),
        "prunes": True,
        "scores": scores,
    }


#: Gradual magnitude pruning (GMP, Magnitude, GlobalMagnitude).
GRADUAL_MAGNITUDE = gradual_pruning("magnitude")

# -- $defs -------------------------------------------------------------------------------------
PARAM_NAME_DEF: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "not": {"const": "re:"},
    "description": (
        "One parameter selector: an exact parameter name (e.g. 'sections.0.0.conv1.weight'), a "
        "'re:'-prefixed Python regular expression applied with re.match (anchored at the start "
        "only), or one of the tokens __ALL__ (every parameter) / __ALL_PRUNABLE__ (weights of "
        "Linear/Dense, Conv/ConvTranspose 1-3d, Embedding), case-insensitive."
    ),
}

PARAMS_DEF: dict[str, Any] = {
    "description": (
        "Parameter selection: a single selector string or a list of selector strings (exact "
        "names, 're:' patterns, __ALL__ / __ALL_PRUNABLE__ tokens, in any mix)."
    ),
    "anyOf": [
        {"$ref": "#/$defs/param_name"},
        {"type": "array", "items": {"$ref": "#/$defs/param_name"}},
    ],
}

MASK_TYPE_DEF: dict[str, Any] = {
    "description": (
        "Sparsity structure: 'unstructured'; 'block4' (groups of 4 along the input dimension; "
        "'block' is its legacy alias); 'channel' / 'filter' (whole input channels / output "
        "filters, Keras-era structured masks); 'N:M' such as '2:4' (N kept out of every M, target "
        "sparsity must be 1 - N/M); 'tensorrt' (= '2:4'); or a block shape [rows, cols] whose "
        "mean magnitude is pruned together (-1 = the whole dimension)."
    ),
    "anyOf": [
        {"enum": ["unstructured", "block4", "block", "channel", "filter", "tensorrt"]},
        {"type": "string", "pattern": "^[1-9][0-9]*:[1-9][0-9]*$"},
        {
            "type": "array",
            "minItems": 2,
            "maxItems": 2,
            "items": {"type": "integer", "anyOf": [{"const": -1}, {"minimum": 1}]},
        },
    ],
}

SPARSITY_MAP_DEF: dict[str, Any] = {
    "type": "object",
    "description": (
        "SparseML's {sparsity: [param selectors]} form: each key is a target final sparsity in "
        "(0, 1) written as a number (it arrives as its string form, e.g. '0.9'), each value the "
        "list of parameter selectors pruned to it. Requires params: []."
    ),
    "minProperties": 1,
    "propertyNames": {"pattern": "^(0?\\.[0-9]*[1-9][0-9]*|[1-9](\\.[0-9]+)?[eE]-[0-9]+)$"},
    "additionalProperties": {
        "type": "array",
        "minItems": 1,
        "items": {"$ref": "#/$defs/param_name"},
    },
}

PARAM_GROUPS_DEF: dict[str, Any] = {
    "type": "array",
    "items": {"type": "integer", "minimum": 0},
    "minItems": 1,
}

# -- arguments ---------------------------------------------------------------------------------
PRUNING_PARAMS = Arg("params", {
    "description": (
        "Parameters to prune: a selector string or list of selectors (exact names, 're:' "
        "patterns, __ALL__, __ALL_PRUNABLE__); must be [] when final_sparsity is a mapping."
    ),
    "type": ["string", "array"],
    "$ref": "#/$defs/params",
})

INIT_SPARSITY = Arg("init_sparsity", {
    "description": (
        "Sparsity (fraction of zeros, 0 to 1) applied at start_epoch, the start of the "
        "interpolation."
    ),
    "type": "number",
    "minimum": 0,
    "maximum": 1,
})

FINAL_SPARSITY = Arg("final_sparsity", {
    "description": (
        "Sparsity reached at end_epoch: a number in [0, 1), or a mapping of sparsity to parameter "
        "selectors (then params must be [])."
    ),
    "type": ["number", "object"],
    "anyOf": [
        {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
        {"$ref": "#/$defs/sparsity_map"},
    ],
})

GRADUAL_START_EPOCH = Arg("start_epoch", {
    "description": (
        "Epoch (fractions allowed) of the first pruning step, at init_sparsity; -1 means from the "
        "start of training."
    ),
    "type": "number",
    "minimum": -1,
})

GRADUAL_END_EPOCH = Arg("end_epoch", {
    "description": (
        "Epoch (fractions allowed) by which final_sparsity is reached; pruning is active on "
        "[start_epoch, end_epoch) with one final update at the first step at or after it."
    ),
    "type": "number",
    "minimum": -1,
})

def update_frequency(description: str, *, zero: bool = False, **schema: Any) -> Arg:
    """An ``update_frequency`` argument: -1 or a positive number of epochs (0 too when
    ``zero``, for the modifiers that ignore it). A value between -1 and 0 is an error: SparseML
    took it as "update once every step" only for exactly -1, and any other negative spacing
    never reaches the next update (a schedule that never ends, a run that never prunes)."""
    excluded: dict[str, Any] = {"type": "number", "exclusiveMinimum": -1}
    excluded["exclusiveMaximum" if zero else "maximum"] = 0
    return Arg("update_frequency", {
        "description": description, "type": "number", "minimum": -1, "not": excluded, **schema,
    })


GRADUAL_UPDATE_FREQUENCY = update_frequency(
    "Epochs (fractions allowed) between two updates of the target inside [start_epoch, "
    "end_epoch); -1 updates at every optimizer step; 0 and values between -1 and 0 are not "
    "allowed."
)

INTER_FUNC = Arg("inter_func", {
    "description": (
        "Interpolation curve from init_sparsity to final_sparsity over [start_epoch, end_epoch]."
    ),
    "type": "string",
    "enum": ["linear", "cubic", "inverse_cubic"],
    "default": "cubic",
})

LEAVE_ENABLED = Arg("leave_enabled", {
    "description": (
        "Keep enforcing the masks after end_epoch (true) or release them so pruned weights may "
        "regrow (false)."
    ),
    "type": "boolean",
    "default": True,
})

MASK_TYPE = Arg("mask_type", {
    "description": (
        "How weights are grouped when pruned: 'unstructured', 'block4', an 'N:M' pattern such as "
        "'2:4', 'tensorrt', 'channel' / 'filter', or a block shape [rows, cols]."
    ),
    "type": ["string", "array"],
    "$ref": "#/$defs/mask_type",
    "default": "unstructured",
})

GLOBAL_SPARSITY = Arg("global_sparsity", {
    "description": (
        "Rank all selected parameters together with one global threshold (true) or prune layer by "
        "layer (false)."
    ),
    "type": "boolean",
    "default": True,
})

PARAM_GROUPS = Arg("param_groups", {
    "description": (
        "Indices of the optimizer parameter groups to change; omitted changes all groups."
    ),
    "type": "array",
    "$ref": "#/$defs/param_groups",
})

CONSTANT_LOGGING = Arg("constant_logging", {
    "description": (
        "Log the value at every step (true) or only when it changes (false); logging only."
    ),
    "type": "boolean",
    "default": False,
})

LOG_TYPES = Arg("log_types", {
    "deprecated": True,
    "description": "Ignored. SparseML's logging selector, kept so old recipes load; remove it.",
    "type": ["string", "array"],
    "items": {"type": "string"},
})

# -- schema keywords ---------------------------------------------------------------------------
GRADUAL_REQUIRED: list[str] = [
    "params", "init_sparsity", "final_sparsity", "start_epoch", "end_epoch", "update_frequency",
]

SPARSITY_MAP_NEEDS_EMPTY_PARAMS: dict[str, Any] = {
    "$comment": (
        "SparseML: a {sparsity: [names]} final_sparsity needs params: []; a numeric one needs a "
        "non-empty params."
    ),
    "if": {"required": ["final_sparsity"], "properties": {"final_sparsity": {"type": "object"}}},
    "then": {"properties": {"params": {"type": "array", "maxItems": 0}}},
    "else": {"properties": {"params": {"minItems": 1}}},
}


#: The arguments every gradual pruner starts with, in schema order.
GRADUAL_ARGS: tuple[Arg, ...] = (
    PRUNING_PARAMS,
    INIT_SPARSITY,
    FINAL_SPARSITY,
    GRADUAL_START_EPOCH,
    GRADUAL_END_EPOCH,
    GRADUAL_UPDATE_FREQUENCY,
    INTER_FUNC,
    LEAVE_ENABLED,
)
