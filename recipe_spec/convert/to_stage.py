"""A ``!Modifier`` training recipe written in the stage/group dialect.

Every modifier must have an exact stage/group twin (:func:`.twins.stage_twin`); the recipe
becomes one training stage, ``train_stage`` (SparseML runs a stage whose name holds no
"oneshot" as a training stage; the backends run one training stage). Its groups keep the
source's group names (``pruning_modifiers:``), split where a group would name the same
modifier twice (a group maps names to arguments, so SparseML's 73 per-layer
``GMPruningModifier`` s of a BERT recipe become 73 groups, in order); a plain ``modifiers:``
list becomes groups named by what the modifiers do (``pruning_modifiers``).

Refused: a modifier without an exact twin, a recipe of several stages (SparseML shifts each
later ``!Modifier`` stage by the earlier ones' end; a stage/group recipe's backends run one
training stage), and ``EpochRangeModifier`` unless ``drop_epoch_range`` (the stage/group
dialect has no training length: the trainer's number of epochs is then a :class:`~.result.Note`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..recipe.model import Recipe
from ..stage_dialect import Compat, stage_variants
from ..text.frozen import thaw
from .result import Note, Refusal
from .text import (
    Lines,
    Text,
    argument_lines,
    comments_above,
    copy_variables,
    header_lines,
    trailing_comment,
    value_lines,
)
from .twins import NoTwin, StageTwin, stage_twin

__all__ = ["StagePlan", "plan_stage", "write_stage", "STAGE_NAME"]

#: The stage the converted modifiers run in.
STAGE_NAME = "train_stage"


@dataclass
class StagePlan:
    """The twins in file order, each with its output group, and the notes."""

    twins: list[StageTwin]
    groups: list[str]
    notes: list[Note]

    @property
    def expected(self) -> list[tuple[str, dict[str, Any]]]:
        """(stage/group type, arguments evaluated) of every modifier the output must hold."""
        return [(tw.stage_type, dict(tw.args)) for tw in self.twins]


def _refuse(found: NoTwin) -> Refusal:
    m = found.source
    span = m.key_span(found.key) if found.key else m.span
    return Refusal(span.line, span.column, found.what, found.how)


def plan_stage(recipe: Recipe, compat: Compat | None,
               drop_epoch_range: bool = False) -> StagePlan | list[Refusal]:
    """The twins of every modifier of a ``!Modifier`` recipe, or every refusal."""
    refused: list[Refusal] = []
    if len(recipe.stages) > 1:
        s = recipe.stages[1]
        refused.append(Refusal(
            s.span.line, s.span.column,
            f"stage '{s.name}' is a second stage: SparseML shifts a later !Modifier stage by "
            "the earlier ones' end, and a stage/group recipe's backends run one training stage",
            "Convert each stage as a recipe of its own (its epochs counted from 0)."))
    twins: list[StageTwin] = []
    notes: list[Note] = []
    left_out: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for m in recipe.modifiers:
        if m.type == "EpochRangeModifier" and drop_epoch_range:
            notes.append(Note(m.span.line, f"EpochRangeModifier left out: train for "
                                           f"{m.args.get('end_epoch')} epochs (the trainer's "
                                           "num_train_epochs); the stage/group dialect has no "
                                           "training length"))
            continue
        found = stage_twin(m, compat)
        if isinstance(found, NoTwin):
            refused.append(_refuse(found))
        else:
            twins.append(found)
            if found.dropped:
                left_out.setdefault((m.type, found.dropped), []).append(m.span.line)
    for (name, dropped), lines in left_out.items():
        more = f" (and {len(lines) - 1} more {name})" if len(lines) > 1 else ""
        notes.append(Note(lines[0], f"{name}: left out {', '.join(dropped)}, which has no "
                                    f"effect{more}"))
    notes.sort(key=lambda n: n.line)
    if refused:
        return refused
    if not twins:
        return [Refusal(1, 1, "no modifier to convert", "Add the modifiers to convert.")]
    return StagePlan(twins, _groups(twins), notes)


def _category(stage_type: str) -> str:
    variants = stage_variants(stage_type)
    return variants[0].spec.category if variants else "training"


def _groups(twins: list[StageTwin]) -> list[str]:
    """The output group of each twin: the source group where it ends in ``_modifiers``,
    else the category's; a new group where the current one has the modifier already."""
    out: list[str] = []
    used: set[str] = set()
    current, stem = "", ""
    names: set[str] = set()
    for tw in twins:
        source = tw.source.group
        want = source[:-len("_modifiers")] if source.endswith("_modifiers") else _category(tw.stage_type)
        if want != stem or tw.stage_type in names:
            stem, names = want, set()
            current = f"{stem}_modifiers"
            n = 1
            while current in used:
                n += 1
                current = f"{stem}_{n}_modifiers"
            used.add(current)
        names.add(tw.stage_type)
        out.append(current)
    return out


def write_stage(recipe: Recipe, t: Text, plan: StagePlan, mode: str) -> Lines:
    """The stage/group text of ``plan``, its values written as ``mode`` says
    (:data:`.text.MODES`)."""
    out = Lines()
    header, header_end = header_lines(t, recipe.document)
    out.extend(header)
    if mode == "written":
        copy_variables(recipe, t, out, header_end)
    out.add(f"{STAGE_NAME}:")
    group, seen_groups = None, set()
    for tw, name in zip(plan.twins, plan.groups, strict=True):
        m = tw.source
        if name != group:
            group = name
            source_group = (m.group, m.stage)
            if source_group not in seen_groups and m.document is not None:
                seen_groups.add(source_group)
                loc = m.document.locs.get(m.path[:-1])
                if loc is not None and loc.key_span is not None:
                    out.extend(comments_above(t, loc.key_span.line, 2, header_end))
            out.add(f"  {name}:")
        at = (m.span.line, m.span.column)
        out.extend(comments_above(t, m.span.line, 4, header_end), at)
        out.add(f"    {tw.stage_type}:" + trailing_comment(t, m.span.line, m.span.column + len(m.type) + 1), at)
        for key, stage_key in tw.renames.items():
            span = m.key_span(key)
            out.extend(argument_lines(t, m.document, (*m.args_path, key), stage_key, 6,
                                      raw=m.raw_args[key], value=m.args[key], mode=mode),
                       (span.line, span.column))
        for stage_key, value in tw.added.items():
            out.extend(value_lines(stage_key, thaw(value), 6), at)
    return out
