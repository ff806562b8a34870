"""Learning-rate modifiers: a step-style class schedule, a function of the epoch, and a single
fixed value."""

from __future__ import annotations

from . import rules
from .common import CONSTANT_LOGGING, LOG_TYPES, PARAM_GROUPS, PARAM_GROUPS_DEF, update_frequency
from .spec import Arg, Look, ModifierSpec

__all__ = ["SPECS"]

LEARNING_RATE = ModifierSpec(
    name="LearningRateModifier",
    description=(
        "Schedules the learning rate from init_lr with a step-style class (StepLR, MultiStepLR, "
        "ExponentialLR, CosineAnnealingWarmRestarts) between start_epoch and end_epoch; after "
        "end_epoch the last value is kept."
    ),
    category="learning_rate",
    args=(
        Arg("lr_class", {
            "description": "Schedule family, with its arguments in lr_kwargs.",
            "type": "string",
            "enum": ["StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingWarmRestarts"],
        }),
        Arg("lr_kwargs", {
            "description": (
                "Arguments of lr_class, in epochs: StepLR {gamma, step_size}; MultiStepLR {gamma, "
                "milestones (absolute epochs)}; ExponentialLR {gamma} (decays once per epoch); "
                "CosineAnnealingWarmRestarts {lr_min, cycle_epochs}."
            ),
            "type": "object",
            "properties": {
                "gamma": {
                    "description": (
                        "Multiplicative decay factor applied at each step / milestone / epoch."
                    ),
                    "type": "number",
                    "exclusiveMinimum": 0,
                },
                "step_size": {
                    "description": "StepLR: epochs between two decays.",
                    "type": "number",
                    "exclusiveMinimum": 0,
                },
                "milestones": {
                    "description": (
                        "MultiStepLR: absolute epochs at which the rate is multiplied by gamma; "
                        "each must be after start_epoch and before end_epoch (when set)."
                    ),
                    "type": "array",
                    "items": {"type": "number", "minimum": 0},
                    "minItems": 1,
                },
                "lr_min": {
                    "description": (
                        "CosineAnnealingWarmRestarts: minimum learning rate (torch eta_min)."
                    ),
                    "type": "number",
                    "minimum": 0,
                },
                "cycle_epochs": {
                    "description": (
                        "CosineAnnealingWarmRestarts: epochs in the first cosine cycle (torch "
                        "T_0)."
                    ),
                    "type": "number",
                    "exclusiveMinimum": 0,
                },
            },
            "additionalProperties": False,
        }),
        Arg("init_lr", {
            "description": (
                "Learning rate set at start_epoch, the base of the schedule; SparseML accepted "
                "(0, 1]."
            ),
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1,
        }),
        Arg("start_epoch", {
            "description": (
                "Epoch (fractions allowed) at which init_lr is set and the schedule starts; -1 "
                "means from the start of training."
            ),
            "type": "number",
            "minimum": -1,
        }),
        Arg("end_epoch", {
            "description": (
                "Epoch (fractions allowed) at which the schedule stops stepping (the last value "
                "is kept); -1 means it never stops."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        update_frequency(
            "Ignored: SparseML accepted it and forced -1 (the schedule is evaluated at every "
            "step); kept so old recipes load; -1, 0 or a positive number.",
            zero=True, default=-1,
        ),
        CONSTANT_LOGGING,
        LOG_TYPES,
    ),
    schema_extra={
        "required": ["lr_class", "lr_kwargs", "init_lr", "start_epoch"],
        "additionalProperties": False,
        "allOf": [
            {
                "if": {"required": ["lr_class"], "properties": {"lr_class": {"const": "StepLR"}}},
                "then": {"properties": {"lr_kwargs": {"required": ["gamma", "step_size"]}}},
            },
            {
                "if": {
                    "required": ["lr_class"],
                    "properties": {"lr_class": {"const": "MultiStepLR"}},
                },
                "then": {"properties": {"lr_kwargs": {"required": ["gamma", "milestones"]}}},
            },
            {
                "if": {
                    "required": ["lr_class"],
                    "properties": {"lr_class": {"const": "ExponentialLR"}},
                },
                "then": {"properties": {"lr_kwargs": {"required": ["gamma"]}}},
            },
            {
                "if": {
                    "required": ["lr_class"],
                    "properties": {"lr_class": {"const": "CosineAnnealingWarmRestarts"}},
                },
                "then": {"properties": {"lr_kwargs": {"required": ["lr_min", "cycle_epochs"]}}},
            },
        ],
    },
    example={
        "lr_class": "MultiStepLR",
        "lr_kwargs": {"milestones": [43, 60], "gamma": 0.1},
        "init_lr": 0.005,
        "start_epoch": 0.0,
        "end_epoch": -1.0,
    },
    look=Look("LR"),
    schedule="lr_class",
    emits=frozenset({"lr"}),
    needs=frozenset({"lr"}),
    rules=(rules.milestones,),
)

LEARNING_RATE_FUNCTION = ModifierSpec(
    name="LearningRateFunctionModifier",
    description=(
        "Sets the learning rate at every step from a function of the epoch going from init_lr to "
        "final_lr between start_epoch and end_epoch: linear, cosine, or cyclic_linear (restarting "
        "every cycle_epochs)."
    ),
    category="learning_rate",
    args=(
        Arg("lr_func", {
            "description": "Shape of the curve from init_lr to final_lr.",
            "type": "string",
            "enum": ["linear", "cosine", "cyclic_linear"],
        }),
        Arg("init_lr", {
            "description": (
                "Learning rate at start_epoch (and at the start of each cycle for cyclic_linear); "
                "0 to 1."
            ),
            "type": "number",
            "minimum": 0,
            "maximum": 1,
        }),
        Arg("final_lr", {
            "description": (
                "Learning rate reached at end_epoch (and at the end of each cycle for "
                "cyclic_linear); 0 to 1."
            ),
            "type": "number",
            "minimum": 0,
            "maximum": 1,
        }),
        Arg("start_epoch", {
            "description": (
                "Epoch (fractions allowed) at which the curve starts; -1 means from the start of "
                "training (treated as 0)."
            ),
            "type": "number",
            "minimum": -1,
        }),
        Arg("end_epoch", {
            "description": (
                "Epoch (fractions allowed) at which the curve ends; must be greater than "
                "start_epoch (so never -1)."
            ),
            "type": "number",
            "exclusiveMinimum": 0,
        }),
        Arg("cycle_epochs", {
            "description": (
                "cyclic_linear: length of one cycle in epochs (the last cycle may be shorter)."
            ),
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 1.0,
        }),
        PARAM_GROUPS,
        update_frequency(
            "Ignored: SparseML accepted it and forced -1 (the rate is updated at every step); "
            "kept so old recipes load; -1, 0 or a positive number.",
            zero=True, default=-1,
        ),
        LOG_TYPES,
    ),
    schema_extra={
        "required": ["lr_func", "init_lr", "final_lr", "start_epoch", "end_epoch"],
        "additionalProperties": False,
        "$defs": {"param_groups": PARAM_GROUPS_DEF},
    },
    example={
        "lr_func": "cosine",
        "init_lr": 5e-05,
        "final_lr": 1e-06,
        "start_epoch": 0.0,
        "end_epoch": 10.0,
    },
    look=Look("LR"),
    schedule="lr_function",
    emits=frozenset({"lr"}),
    needs=frozenset({"lr"}),
    rules=(rules.function_range,),
)

SET_LEARNING_RATE = ModifierSpec(
    name="SetLearningRateModifier",
    description="Sets the optimizer's learning rate to a fixed value once, at start_epoch.",
    category="learning_rate",
    args=(
        Arg("learning_rate", {
            "description": (
                "Learning rate written into the optimizer (all or the listed param groups) at "
                "start_epoch; SparseML accepted (0, 1]."
            ),
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1,
        }),
        PARAM_GROUPS,
        Arg("start_epoch", {
            "description": (
                "Epoch (fractions allowed) at which the learning rate is set; -1 means at "
                "initialization."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        Arg("end_epoch", {
            "description": (
                "Ignored: SparseML accepted it and always used -1 (the rate is set once and never "
                "reverted); kept so old recipes load."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        CONSTANT_LOGGING,
        LOG_TYPES,
    ),
    schema_extra={
        "required": ["learning_rate"],
        "additionalProperties": False,
        "$defs": {"param_groups": PARAM_GROUPS_DEF},
    },
    example={"learning_rate": 0.008, "start_epoch": 0.0},
    look=Look("LR"),
    schedule="set_lr",
    emits=frozenset({"lr"}),
    needs=frozenset({"lr"}),
)

SPECS: tuple[ModifierSpec, ...] = (LEARNING_RATE, LEARNING_RATE_FUNCTION, SET_LEARNING_RATE)
