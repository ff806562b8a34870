"""Training-loop modifiers: the epoch range of a recipe, a fixed weight decay, and freezing
parameters."""

from __future__ import annotations

from . import rules
from .common import (
    CONSTANT_LOGGING,
    LOG_TYPES,
    PARAM_GROUPS,
    PARAM_GROUPS_DEF,
    PARAM_NAME_DEF,
    PARAMS_DEF,
)
from .spec import Arg, Look, ModifierSpec

__all__ = ["SPECS"]

EPOCH_RANGE = ModifierSpec(
    name="EpochRangeModifier",
    description=(
        "Declares the training epoch range; it changes nothing at runtime and only feeds the "
        "recipe's min_epochs / max_epochs (the number of epochs integrations train for)."
    ),
    category="epoch",
    args=(
        Arg("start_epoch", {
            "description": (
                "First epoch of the training range (fractions allowed); -1 means unset."
            ),
            "type": "number",
            "minimum": -1,
        }),
        Arg("end_epoch", {
            "description": (
                "Epoch at which training ends (fractions allowed); max_epochs is its ceiling; -1 "
                "means unset."
            ),
            "type": "number",
            "minimum": -1,
        }),
        LOG_TYPES,
    ),
    schema_extra={"required": ["start_epoch", "end_epoch"], "additionalProperties": False},
    example={"start_epoch": 0.0, "end_epoch": 90.0},
    look=Look("Epoch range"),
)

SET_WEIGHT_DECAY = ModifierSpec(
    name="SetWeightDecayModifier",
    description=(
        "Sets the optimizer's weight decay (L2 penalty) to a fixed value once, at start_epoch."
    ),
    category="regularization",
    args=(
        Arg("weight_decay", {
            "description": (
                "Weight decay written into the optimizer (all or the listed param groups) at "
                "start_epoch."
            ),
            "type": "number",
            "minimum": 0,
        }),
        Arg("start_epoch", {
            "description": (
                "Epoch (fractions allowed) at which the weight decay is set; -1 means at "
                "initialization."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        PARAM_GROUPS,
        Arg("end_epoch", {
            "description": (
                "Ignored: SparseML accepted it and always used -1 (the value is set once and "
                "never reverted); kept so old recipes load."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        CONSTANT_LOGGING,
        LOG_TYPES,
    ),
    schema_extra={
        "required": ["weight_decay"],
        "additionalProperties": False,
        "$defs": {"param_groups": PARAM_GROUPS_DEF},
    },
    example={"weight_decay": 0.0, "start_epoch": 30.0},
    look=Look("Weight decay"),
    schedule="set_weight_decay",
    emits=frozenset({"weight_decay"}),
    needs=frozenset({"weight_decay"}),
)

TRAINABLE_PARAMS = ModifierSpec(
    name="TrainableParamsModifier",
    description=(
        "Freezes or unfreezes the selected parameters from start_epoch (requires_grad / "
        "trainable), restoring their previous state at end_epoch if one is set."
    ),
    category="params",
    args=(
        Arg("params", {
            "description": (
                "Parameters to change: a selector string or non-empty list of selectors (exact "
                "names, 're:' patterns, __ALL__)."
            ),
            "type": ["string", "array"],
            "$ref": "#/$defs/params",
            "minItems": 1,
        }),
        Arg("trainable", {
            "description": (
                "true makes the selected parameters trainable, false freezes them. Optional, as "
                "the SparseML recipe guide documents it (default true, with warning M013: "
                "SparseML's code required it)."
            ),
            "type": "boolean",
            "default": True,
        }),
        Arg("params_strict", {
            "description": (
                "Require every exact name and 're:' pattern in params to match at least one "
                "parameter."
            ),
            "type": "boolean",
            "default": True,
        }),
        Arg("start_epoch", {
            "description": (
                "Epoch (fractions allowed) at which the change is applied; -1 means at "
                "initialization."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        Arg("end_epoch", {
            "description": (
                "Epoch (fractions allowed) at which the original trainable state is restored; -1 "
                "never restores it."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        LOG_TYPES,
    ),
    schema_extra={
        "required": ["params"],
        "additionalProperties": False,
        "$defs": {"param_name": PARAM_NAME_DEF, "params": PARAMS_DEF},
    },
    example={
        "params": ["re:.*embeddings.*"],
        "trainable": False,
        "params_strict": True,
        "start_epoch": 0.0,
        "end_epoch": 2.0,
    },
    look=Look("Freeze", phase="parameters frozen", colour="tab:olive"),
    schedule="trainable",
    emits=frozenset({"trainable"}),
    needs=frozenset({"trainable"}),
    rules=(rules.trainable_default,),
)

SPECS: tuple[ModifierSpec, ...] = (EPOCH_RANGE, SET_WEIGHT_DECAY, TRAINABLE_PARAMS)
