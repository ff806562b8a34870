"""Reading a stage/group recipe into the common object model.

The dialect of SparseML 1.6-1.9 (``sparseml.core``) and llm-compressor: top-level
``<name>_stage:`` mappings hold ``<name>_modifiers:`` groups, and a group *maps* modifier class
names to their arguments::

    sparsity_stage:
      run_type: oneshot
      sparsity_modifiers:
        SparseGPTModifier: {sparsity: 0.5, mask_structure: "2:4"}

:func:`is_stage` tells the dialect of a document's root; :func:`build_stage` makes the same
:class:`~recipe_spec.recipe.Recipe` (``dialect="stage"``) as the ``!Modifier`` reader: stages,
groups, modifiers with the position of every value. SparseML's other spellings are read too:
a bare top-level ``*_modifiers`` group (its "default" stage) and ``stages: {name: stage}``.
Top-level scalars are variables and ``eval(...)`` strings are evaluated by the safe evaluator,
as SparseML did; what each tool version ignores or rejects in this layout is reported by the
validator (:mod:`recipe_spec.stage_dialect.layout`), which knows the ``--compat`` choice. The
reader reports only what no version reads: a group or arguments that are not a mapping, a
modifier with no arguments, ``!Modifier`` lists in the same file.
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Mapping
from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import Severity, Span
from ..recipe.build import Builder, with_args
from ..recipe.model import Group, Modifier, Recipe, Stage
from ..text.frozen import FrozenDict, freeze
from ..text.nodes import Tagged
from ..text.variables import VariableEvaluator

__all__ = ["is_stage", "build_stage", "stage_parts", "STAGE_KEYS", "numbered_stage"]

Path = tuple[Any, ...]

#: Keys a stage may hold besides its groups (SparseML's ``RecipeStage`` fields).
STAGE_KEYS = ("run_type", "args", "enabled", "exclude_default", "group")
#: Top-level keys that are not variables.
META_KEYS = ("version", "metadata")

_new = object.__new__
_NUMBERED = re.compile(r"(.*)_stage_(\d+)")


def is_group_key(key: Any) -> bool:
    """``<name>_modifiers``, and the plain ``modifiers`` (which SparseML breaks on and
    llm-compressor drops: the validator says so)."""
    return isinstance(key, str) and (key.endswith("_modifiers") or key == "modifiers")


def is_stage_key(key: Any) -> bool:
    """``<name>_stage``, and the numbered ``<name>_stage_<n>`` (read as a stage so that its
    modifiers are checked; no released tool reads it: :func:`numbered_stage`)."""
    return isinstance(key, str) and (key.endswith("_stage") or numbered_stage(key) is not None)


def numbered_stage(key: Any) -> tuple[str, str] | None:
    r"""``(name, n)`` of a numbered stage key ``<name>_stage_<n>``, else None. llm-compressor
    0.14 and every release before it read a stage key only when it ends in ``_stage`` and drop
    any other; its nightly after 0.14 (0.14.1a20261020) reads ``re.fullmatch(r"(.*)_stage(_\d+)?",
    key)``, so that ``quant_stage_1`` and ``quant_stage_2`` are both stage ``quant``.

    >>> numbered_stage("quant_stage_2"), numbered_stage("quant_stage")
    (('quant', '2'), None)
    """
    if not isinstance(key, str):
        return None
    m = _NUMBERED.fullmatch(key)
    return (m.group(1), m.group(2)) if m else None


def is_stage(root: FrozenDict) -> bool:
    """Whether a document's root is a stage/group recipe: some group (at the top level, in a
    ``*_stage`` mapping or under ``stages:``) maps modifier names to arguments, or a
    ``*_stage`` key holds a mapping with a ``*_modifiers`` key."""
    for key, value in root.items():
        if is_group_key(key) and isinstance(value, FrozenDict):
            return True
        if not isinstance(value, FrozenDict):
            continue
        bodies = value.values() if key == "stages" else (value,)
        for body in bodies:
            if not isinstance(body, FrozenDict):
                continue
            for k, v in body.items():
                if is_group_key(k) and isinstance(v, FrozenDict):
                    return True
    return False


def stage_parts(root: FrozenDict) -> list[tuple[str, FrozenDict | None, Path]]:
    """The stages of a stage/group recipe as written, in file order: ``(name, body, path)``. A bare
    top-level group is SparseML's ``"default"`` stage (body None: its groups are the root's)."""
    parts: list[tuple[str, FrozenDict | None, Path]] = []
    if any(is_group_key(k) for k in root):
        parts.append(("default", None, ()))
    for key, value in root.items():
        if is_stage_key(key) and isinstance(value, FrozenDict):
            parts.append((key, value, (key,)))
        elif key == "stages" and isinstance(value, FrozenDict):
            for name, body in value.items():
                if isinstance(body, FrozenDict):
                    parts.append((str(name), body, ("stages", name)))
    return parts


class _StageBuilder:
    def __init__(self, b: Builder):
        self.b = b

    def entry(self, name: Any, raw: Any, path: Path, group: str, stage: str) -> Modifier | None:
        b = self.b
        span = b.key_span(path)
        if not isinstance(name, str):
            b.diagnostics.append(codes.S004(
                f"'{name}' in '{group}' is not a modifier name",
                "Each key of a group is a modifier class name, e.g. 'GPTQModifier:'.", span))
            return None
        if raw is None:
            b.diagnostics.append(codes.S006(
                f"{name} has no arguments: SparseML stops with 'args must be set before "
                "evaluating' and llm-compressor with an AttributeError",
                f"Give {name} its arguments as a mapping below it (at least its required ones).",
                span))
            return None
        if isinstance(raw, Tagged) or not isinstance(raw, FrozenDict):
            b.diagnostics.append(codes.S006(
                f"the arguments of {name} must be a mapping of 'key: value' pairs",
                f"Write the arguments of {name} indented below it, one 'key: value' per line.",
                b.value_span(path)))
            return None
        m = _new(Modifier)
        m.__dict__.update(
            type=name, args=raw, raw_args=raw, group=group, stage=stage, span=span, path=path,
            args_path=path, document=b.doc, file=b.source.path,
        )
        return m

    def group(self, key: str, value: Any, path: Path, stage: str) -> Group | None:
        b = self.b
        if isinstance(value, FrozenDict):
            mods = [self.entry(n, v, path + (n,), key, stage) for n, v in value.items()]
            return Group(key, tuple(m for m in mods if m is not None), b.key_span(path))
        if isinstance(value, tuple) and any(isinstance(v, Tagged) for v in value):
            b.diagnostics.append(codes.S003(
                f"'{key}' lists '!Modifier' items in a stage/group recipe",
                "Write one dialect per file: here, map each modifier name to its arguments "
                f"('{key}:' then 'GPTQModifier: {{...}}'), without '- !'.",
                b.value_span(path)))
            return None
        b.diagnostics.append(codes.S005(
            f"'{key}' must map modifier names to their arguments, not hold "
            f"{'a list' if isinstance(value, tuple) else 'a single value'}: SparseML stops with "
            "an AttributeError and llm-compressor skips the group without a word",
            f"Write '{key}:' followed by 'ModifierName:' keys with their arguments indented "
            "below them.", b.value_span(path)))
        return None

    def stage(self, name: str, body: FrozenDict, base: Path) -> tuple[list[Group], dict[str, tuple[Any, Path]]]:
        groups: list[Group] = []
        variables: dict[str, tuple[Any, Path]] = {}
        for key, value in body.items():
            path = base + (key,)
            if is_group_key(key):
                g = self.group(key, value, path, name)
                if g is not None:
                    groups.append(g)
            elif key == "args" and isinstance(value, FrozenDict):
                for k, v in value.items():
                    variables[str(k)] = (v, path + (k,))
        return groups, variables


def build_stage(b: Builder, root: FrozenDict, overrides: Mapping[str, Any] | None) -> Recipe | None:
    """The :class:`Recipe` (``dialect="stage"``) of a stage/group document; diagnostics go to
    the loader's list. None when nothing could be built."""
    core = _StageBuilder(b)
    global_raw: dict[str, tuple[Any, Path]] = {}
    for key, value in root.items():
        if is_group_key(key) or is_stage_key(key) or key == "stages" or key in META_KEYS:
            continue
        if isinstance(value, (FrozenDict, tuple, Tagged)):
            continue  # not a variable; the validator reports what each tool makes of it
        global_raw[str(key)] = (value, (key,))
    parts: list[tuple[str, list[Group], dict[str, tuple[Any, Path]], Span]] = []
    for name, body, path in stage_parts(root):
        if body is None:
            groups = [g for k, v in root.items() if is_group_key(k)
                      for g in [core.group(k, v, (k,), name)] if g is not None]
            parts.append((name, groups, {}, b.key_span(next((k,) for k in root if is_group_key(k)))))
            continue
        groups, stage_vars = core.stage(name, body, path)
        parts.append((name, groups, stage_vars, b.key_span(path)))
    if not any(g.modifiers for _, groups, _, _ in parts for g in groups) and not b.diagnostics:
        b.diagnostics.append(codes.S001(
            "no modifiers: no '<name>_stage:' holds a '<name>_modifiers:' group with a modifier",
            "Put 'ModifierName: {...}' entries under a '<name>_modifiers:' key inside a "
            "'<name>_stage:' mapping.", Span.point(1 + b.doc.line_offset)))

    b.apply_overrides(overrides or {}, global_raw, [p[2] for p in parts])
    evaluator = VariableEvaluator(b.doc)
    evaluator.known_names([*global_raw, *(n for p in parts for n in p[2])])
    global_values = evaluator.resolve_scope(global_raw)
    has_eval = "eval(" in b.source.yaml_text or "\\" in b.source.yaml_text
    stages: list[Stage] = []
    for name, groups, raw, span in parts:
        values = evaluator.resolve_scope(raw, outer=global_values, scope_name=name) if raw else {}
        visible = ChainMap(values, global_values)
        if has_eval:
            groups = [Group(g.name, tuple(with_args(m, evaluator.evaluate_tree(m.raw_args, m.args_path, visible))
                                          for m in g.modifiers), g.span) for g in groups]
        stages.append(Stage(
            name, tuple(groups), variables=freeze(values),
            raw_variables=FrozenDict({k: v for k, (v, _) in raw.items()}), span=span,
        ))
    b.diagnostics.extend(evaluator.diagnostics)
    metadata = root.get("metadata")
    return Recipe(
        stages=tuple(stages),
        variables=freeze(global_values),
        raw_variables=FrozenDict({k: v for k, (v, _) in global_raw.items()}),
        version=root.get("version"),
        metadata=metadata if isinstance(metadata, FrozenDict) else None,
        staged=True,
        path=b.source.path,
        source=b.source,
        document=b.doc,
        warnings=tuple(d.in_file(b.source.path) for d in b.diagnostics if d.severity is not Severity.ERROR),
        dialect="stage",
    )
