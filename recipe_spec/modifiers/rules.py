"""Validation rules that belong to one modifier, beyond its schema. A declaration lists its
own (``ModifierSpec.rules``); :mod:`recipe_spec.validation` runs them with the rules that
look across modifiers. Each takes one modifier and yields findings about it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..diagnostics import codes
from ..masks.types import MOVEMENT_MASK_TYPES, movement_mask_type_ok
from ..recipe.findings import Finding
from .second_order_args import defaults_of, static_findings
from .spec import ModifierSpec

if TYPE_CHECKING:
    from ..recipe.model import Modifier

__all__ = [
    "function_range", "milestones", "no_end", "num_grads_from_zero", "second_order_static", "movement_mask_type",
    "trainable_default",
]


def number(value: Any) -> float | None:
    """``value`` as a float when it is a plain number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer beyond a float's range (M005)
        return None


def function_range(m: Modifier) -> Iterator[Finding]:
    """E001: a learning-rate function needs ``end_epoch`` after ``start_epoch`` (and after 0)."""
    start, end = number(m.args.get("start_epoch")), number(m.args.get("end_epoch"))
    if start is None or end is None or (end != -1 and end < start):
        return  # a missing value or a plain end-before-start is the general E001
    if end <= max(start, 0):
        yield Finding(
            codes.E001,
            f"a learning-rate function needs end_epoch after start_epoch; got {start:g} to {end:g}",
            "The function runs from start_epoch to end_epoch: give it a range.",
            m, ("end_epoch",),
        )


def milestones(m: Modifier) -> Iterator[Finding]:
    """E002: MultiStepLR milestones must lie strictly inside (start_epoch, end_epoch)."""
    if m.args.get("lr_class") != "MultiStepLR":
        return
    kwargs = m.args.get("lr_kwargs")
    marks = kwargs.get("milestones") if isinstance(kwargs, Mapping) else None
    if not isinstance(marks, tuple):
        return
    start, end = number(m.args.get("start_epoch")), number(m.args.get("end_epoch", -1))
    for i, ms in enumerate(marks):
        value = number(ms)
        if value is None:
            continue
        if start is not None and start >= 0 and value <= start:
            yield Finding(
                codes.E002, f"milestone {ms!r} is not after start_epoch {start:g}",
                "Milestones are absolute epochs: each must be greater than start_epoch.",
                m, ("lr_kwargs", "milestones", i),
            )
        elif end is not None and end >= 0 and value >= end:
            yield Finding(
                codes.E002, f"milestone {ms!r} is not before end_epoch {end:g}",
                "Milestones are absolute epochs: each must be less than end_epoch.",
                m, ("lr_kwargs", "milestones", i),
            )


def no_end(m: Modifier) -> Iterator[Finding]:
    """E003: a modifier that never ends (quantization) was given an ``end_epoch``."""
    if "end_epoch" in m.args and m.args["end_epoch"] != -1:
        yield Finding(
            codes.E003,
            f"{m.type} has no end, but end_epoch is {m.args['end_epoch']!r}",
            "Remove end_epoch: quantized modules stay quantized to the end of training.",
            m, ("end_epoch",),
        )


def num_grads_from_zero(m: Modifier) -> Iterator[Finding]:
    """M009: a ``{sparsity: count}`` ``num_grads`` needs an entry for sparsity 0.0."""
    for keys in (("num_grads",), ("mfac_options", "num_grads")):
        value: Any = m.args
        for k in keys:
            value = value.get(k) if isinstance(value, Mapping) else None
        if isinstance(value, Mapping) and 0 not in value:
            yield Finding(
                codes.M009,
                f"num_grads gives counts for sparsities {sorted(value)} but none for 0.0",
                "Add '0.0: COUNT', the number of gradients used until the first threshold.",
                m, keys,
            )


def second_order_static(declared: ModifierSpec) -> Callable[[Modifier], Iterator[Finding]]:
    """M012 for modifier ``declared``: what an M-FAC or OBS modifier asks for that cannot run,
    seen from the recipe alone (a mask type M-FAC cannot score, ``num_pages``); the checks that
    need the model, the steps per epoch or the grad sampler run at ``modify()``."""
    defaults = defaults_of(declared)

    def second_order_static(m: Modifier) -> Iterator[Finding]:
        try:
            found = [f for f in static_findings(m, defaults) if f.code is not codes.M009]  # M009: its own rule
        except (TypeError, ValueError, KeyError):
            return  # malformed arguments: the schema reports them
        yield from found

    return second_order_static


def trainable_default(m: Modifier) -> Iterator[Finding]:
    """M013: ``trainable`` omitted; it defaults to true, as the seed guide's example implies,
    but SparseML required it."""
    if "trainable" not in m.args:
        yield Finding(
            codes.M013,
            f"{m.type} without 'trainable' makes the selected parameters trainable (default "
            "true); SparseML required the argument and refused the recipe",
            "Write 'trainable: true' (or 'trainable: false' to freeze).",
            m, (),
        )


def movement_mask_type(m: Modifier) -> Iterator[Finding]:
    """M006: movement scores are signed, so only mask types that rank single scores or block
    means of them apply (not channel/filter norms or N:M magnitudes)."""
    mask_type = m.args.get("mask_type", "unstructured")
    if not movement_mask_type_ok(mask_type):
        yield Finding(
            codes.M006,
            f"{m.type} cannot rank mask_type {mask_type!r}: movement scores are signed, and that "
            "mask type ranks magnitudes",
            f"Use one of {', '.join(MOVEMENT_MASK_TYPES[:2])} or a block shape [a, b].",
            m, ("mask_type",),
        )
