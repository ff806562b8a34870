"""Knowledge distillation from a teacher model."""

from __future__ import annotations

from .common import LOG_TYPES, update_frequency
from .spec import Arg, Look, ModifierSpec

__all__ = ["SPECS"]

DISTILLATION = ModifierSpec(
    name="DistillationModifier",
    description=(
        "Knowledge distillation: between start_epoch and end_epoch the loss becomes (1 - "
        "hardness) * loss + hardness * KL(student || teacher) at the given temperature."
    ),
    category="distillation",
    args=(
        Arg("start_epoch", {
            "description": (
                "Epoch (fractions allowed) at which distillation starts; -1 means from the start "
                "of training."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        Arg("end_epoch", {
            "description": (
                "Epoch (fractions allowed) before which the modifier stops: it is active on "
                "[start_epoch, end_epoch); -1 means it never ends."
            ),
            "type": "number",
            "minimum": -1,
            "default": -1,
        }),
        Arg("hardness", {
            "description": (
                "Weight of the distillation loss, 0 to 1 (the task loss gets 1 - hardness)."
            ),
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "default": 0.5,
        }),
        Arg("temperature", {
            "description": (
                "Softmax temperature applied to teacher and student logits (the KL term is scaled "
                "by its square)."
            ),
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 2.0,
        }),
        Arg("distill_output_keys", {
            "description": (
                "Keys (or indices) of the model outputs to distill; omitted or [] uses all "
                "outputs."
            ),
            "type": "array",
            "items": {"type": ["string", "integer"]},
        }),
        Arg("teacher_input_keys", {
            "description": (
                "Keys (or indices) of the inputs passed to the teacher; omitted or [] passes all "
                "inputs."
            ),
            "type": "array",
            "items": {"type": ["string", "integer"]},
        }),
        update_frequency(
            "Ignored: SparseML accepted it and forced -1 (the loss is changed at every step); "
            "kept so old recipes load; -1, 0 or a positive number.",
            zero=True, default=-1,
        ),
        LOG_TYPES,
    ),
    schema_extra={"required": [], "additionalProperties": False},
    example={
        "hardness": 1.0,
        "temperature": 2.0,
        "distill_output_keys": ["start_logits", "end_logits"],
        "start_epoch": 0.0,
        "end_epoch": -1,
    },
    look=Look("Distillation", phase="distillation", colour="tab:cyan"),
    schedule="distillation",
    emits=frozenset({"distillation"}),
    needs=frozenset({"loss", "teacher"}),
)

SPECS: tuple[ModifierSpec, ...] = (DISTILLATION,)
