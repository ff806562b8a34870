"""Building a :class:`~recipe_spec.recipe.model.Recipe` of the ``!Modifier`` dialect from a read
YAML document (SPEC, "Structure"):

- any top-level key whose name contains ``modifiers`` holds a list of modifiers (group names
  carry no meaning); a modifier anywhere else is an error that says where it must go;
- a top-level mapping that itself has ``*modifiers*`` keys is a stage; its other keys are
  stage variables;
- ``version`` and ``__metadata__`` are metadata; every other top-level key is a variable.
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Mapping
from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic, Severity, Span
from ..text.frozen import FrozenDict, freeze
from ..text.nodes import Document, Tagged
from ..text.source import Source
from ..text.variables import VariableEvaluator, did_you_mean
from .model import Group, Modifier, Recipe, Stage

__all__ = ["Builder", "METADATA_KEYS", "with_args"]

#: Top-level keys that are metadata, not variables.
METADATA_KEYS = ("version", "__metadata__")
_FRAMEWORK_PREFIX = re.compile(r"^(?:pytorch|keras|tensorflow_v1|tensorflow)\.")
_TAG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Path = tuple[Any, ...]


def _is_group_key(key: Any) -> bool:
    return isinstance(key, str) and "modifiers" in key


_new = object.__new__

#: Values that hold no other value.
_LEAVES = frozenset({str, int, float, bool, type(None)})


def _contains_tagged(value: Any) -> Tagged | None:
    if value.__class__ in _LEAVES:
        return None
    if isinstance(value, Tagged):
        return value
    if isinstance(value, FrozenDict):
        for v in value._data.values():
            if v.__class__ in _LEAVES:
                continue
            found = _contains_tagged(v)
            if found:
                return found
    if isinstance(value, tuple):
        for v in value:
            if v.__class__ in _LEAVES:
                continue
            found = _contains_tagged(v)
            if found:
                return found
    return None


class Builder:
    """Builds a :class:`Recipe` of the ``!Modifier`` dialect from a read document, gathering every
    diagnostic (the stage/group dialect's reader, :mod:`recipe_spec.stage_dialect.reader`, uses
    its spans, scopes and diagnostics too)."""

    def __init__(self, source: Source, document: Document):
        self.source = source
        self.doc = document
        self.diagnostics: list[Diagnostic] = []

    def key_span(self, path: Path) -> Span:
        loc = self.doc.loc(path)
        if loc is None:
            return Span.point(1 + self.doc.line_offset)
        return loc.key_span or loc.span

    def value_span(self, path: Path) -> Span:
        loc = self.doc.loc(path)
        return loc.span if loc is not None else Span.point(1 + self.doc.line_offset)

    # -- layout ------------------------------------------------------------------------------
    def modifier(self, item: Any, path: Path, group: str, stage: str | None) -> Modifier | None:
        if isinstance(item, Tagged):
            name = _FRAMEWORK_PREFIX.sub("", item.tag) if "." in item.tag else item.tag
            args_path = path
            raw = item.value
            if not _TAG_NAME.match(name):
                self.diagnostics.append(
                    codes.S004(
                        f"'!{item.tag}' is not a modifier name",
                        "Modifier tags are names like !GMPruningModifier.",
                        item.span,
                    )
                )
                return None
            span = item.span
        elif (
            isinstance(item, FrozenDict)
            and len(item) == 1
            and isinstance(next(iter(item)), str)
            and isinstance(next(iter(item.values())), (FrozenDict, type(None)))
            and _TAG_NAME.match(next(iter(item)))
        ):
            name = next(iter(item))
            args_path = path + (name,)
            raw = item[name]
            span = self.key_span(args_path)
        else:
            hint = "Write each item as '- !ModifierName' followed by its arguments."
            if isinstance(item, FrozenDict) and any(
                k in item for k in ("start_epoch", "end_epoch", "params", "init_lr")
            ):
                hint = (
                    "This looks like a modifier's arguments without its tag: add a line "
                    "'- !ModifierName' (e.g. '- !GMPruningModifier') above them."
                )
            self.diagnostics.append(
                codes.S004(f"item {path[-1] + 1} of '{group}' is not a modifier", hint, self.value_span(path))
            )
            return None
        if raw is None:
            raw = FrozenDict()
        if not isinstance(raw, FrozenDict):
            self.diagnostics.append(
                codes.S006(
                    f"the arguments of {name} must be a mapping of 'key: value' pairs",
                    f"Write '- !{name}' and its arguments indented below it, or "
                    f"'- !{name} {{key: value}}'.",
                    self.value_span(args_path),
                )
            )
            return None
        for key, value in raw._data.items():
            if value.__class__ in _LEAVES:
                continue
            nested = _contains_tagged(value)
            if nested is not None:
                self.diagnostics.append(
                    codes.S002(
                        f"modifier !{nested.tag} is nested inside argument '{key}' of {name}",
                        "Modifiers go directly into a list under a key containing 'modifiers'.",
                        nested.span,
                    )
                )
        # Modifier(...) with every field given, without the frozen __init__'s per-field
        # object.__setattr__ calls (one modifier per list item of every recipe read).
        m = _new(Modifier)
        m.__dict__.update(
            type=name, args=raw, raw_args=raw, group=group, stage=stage, span=span, path=path,
            args_path=args_path, document=self.doc, file=self.source.path,
        )
        return m

    def group(self, key: str, value: Any, path: Path, stage: str | None) -> Group | None:
        if value is None:
            items: tuple[Any, ...] = ()
        elif isinstance(value, Tagged):
            items = (value,)
            path = path[:-1] + (path[-1],)
            mods = self.modifier(value, path, key, stage)
            return Group(key, (mods,) if mods else (), self.key_span(path))
        elif isinstance(value, tuple):
            items = value
        else:
            self.diagnostics.append(
                codes.S005(
                    f"'{key}' must be a list of modifiers",
                    "Keys whose name contains 'modifiers' hold lists: start each item with "
                    "'- !ModifierName'. Rename the key if it is a variable.",
                    self.value_span(path),
                )
            )
            return None
        mods = [self.modifier(item, path + (i,), key, stage) for i, item in enumerate(items)]
        return Group(key, tuple(m for m in mods if m is not None), self.key_span(path))

    def misplaced(self, value: Any, path: Path, where: str) -> None:
        nested = _contains_tagged(value)
        if nested is not None:
            self.diagnostics.append(
                codes.S002(
                    f"modifier !{nested.tag} is under '{where}', whose name does not contain "
                    "'modifiers', so it would never run",
                    f"Rename '{where}' to a name containing 'modifiers' (e.g. "
                    f"'{where}_modifiers'), or move the modifier into such a list.",
                    nested.span,
                )
            )

    def split_scope(
        self, mapping: FrozenDict, base: Path, stage: str | None
    ) -> tuple[FrozenDict | None, list[Group], dict[str, tuple[Any, Path]], list[tuple[str, FrozenDict]]]:
        """Sort the keys of the top level (or of a stage): metadata, modifier groups,
        variables (name -> (value as written, path)) and stages."""
        metadata: FrozenDict | None = None
        groups: list[Group] = []
        variables: dict[str, tuple[Any, Path]] = {}
        stages: list[tuple[str, FrozenDict]] = []
        for key, value in mapping.items():
            path = base + (key,)
            if key == "__metadata__":
                metadata = value if isinstance(value, FrozenDict) else FrozenDict({"value": value})
            elif key == "version" and stage is None:
                continue
            elif _is_group_key(key):
                g = self.group(key, value, path, stage)
                if g is not None:
                    groups.append(g)
            elif isinstance(value, FrozenDict) and any(_is_group_key(k) for k in value):
                stages.append((key, value))
            else:
                self.misplaced(value, path, ".".join(str(p) for p in path))
                variables[str(key)] = (value, path)
        return metadata, groups, variables, stages

    def root(self) -> FrozenDict | None:
        """The document's top-level mapping (a bare list of modifiers as ``modifiers:``), or None
        with S001/S005 when there is none."""
        root = self.doc.value
        if isinstance(root, (Tagged, tuple)):
            root = FrozenDict({"modifiers": root})
            self.doc.locs.setdefault(("modifiers",), self.doc.locs[()])
            if isinstance(self.doc.value, tuple):
                for i in range(len(self.doc.value)):
                    if (i,) in self.doc.locs:
                        self.doc.locs[("modifiers", i)] = self.doc.locs[(i,)]
        if root is None:
            self.diagnostics.append(
                codes.S001(
                    "the recipe is empty",
                    "Add a 'modifiers:' list of '- !ModifierName' items.",
                    Span.point(1 + self.doc.line_offset),
                )
            )
            return None
        if not isinstance(root, FrozenDict):
            self.diagnostics.append(
                codes.S005(
                    "a recipe must be a mapping of variables and modifier lists",
                    "Start with 'modifiers:' followed by '- !ModifierName' items.",
                    self.value_span(()),
                )
            )
            return None
        return root

    def build(self, root: FrozenDict, overrides: Mapping[str, Any] | None) -> Recipe | None:
        """The ``!Modifier`` recipe of ``root`` (from :meth:`root`), ``overrides`` applied."""
        version = root.get("version")
        metadata, groups, global_raw, stage_parts = self.split_scope(root, (), None)
        if groups and stage_parts:
            self.diagnostics.append(
                codes.S005(
                    f"the recipe mixes top-level modifier lists ('{groups[0].name}') with "
                    f"stages ('{stage_parts[0][0]}')",
                    f"Move '{groups[0].name}' into a stage of its own, or un-stage the recipe.",
                    groups[0].span,
                )
            )

        stages_raw: list[tuple[str, dict[str, tuple[Any, Path]], list[Group], FrozenDict | None]] = []
        for name, body in stage_parts:
            stage_meta, stage_groups, raw, nested = self.split_scope(body, (name,), name)
            for inner, _ in nested:
                self.diagnostics.append(
                    codes.S005(
                        f"stage '{name}' contains another stage '{inner}'; stages do not nest",
                        "Move the inner stage to the top level.",
                        self.key_span((name, inner)),
                    )
                )
            stages_raw.append((name, raw, stage_groups, stage_meta))

        flat = [k for k in root if isinstance(k, str) and k.endswith("Modifier")]
        if not groups and not stages_raw and not any(self.diagnostics) and flat:
            self.diagnostics.append(
                codes.S001(
                    f"no modifiers: '{flat[0]}' sits at the top level, outside any stage and group "
                    "(llm-compressor reads such a recipe as empty and runs nothing)",
                    f"Indent it under a stage and a group: 'sparsity_stage:' / 'sparsity_modifiers:' / "
                    f"'{flat[0]}: {{...}}'.",
                    self.key_span((flat[0],)),
                )
            )
        if not groups and not stages_raw and not any(self.diagnostics):
            self.diagnostics.append(
                codes.S001(
                    "no modifiers: no top-level key's name contains 'modifiers'",
                    "List the modifiers under 'modifiers:' (or any key containing "
                    "'modifiers', e.g. 'pruning_modifiers').",
                    Span.point(1 + self.doc.line_offset),
                )
            )

        # -- variables ---------------------------------------------------------------------
        self.apply_overrides(overrides or {}, global_raw, [s[1] for s in stages_raw])
        evaluator = VariableEvaluator(self.doc)
        evaluator.known_names([*global_raw, *(n for s in stages_raw for n in s[1])])
        global_values = evaluator.resolve_scope(global_raw)

        # A value is evaluated only when it is exactly "eval(...)": text without "eval(" (and
        # without escapes, the one way YAML joins what the text writes apart) has none.
        text = self.source.yaml_text
        has_eval = "eval(" in text or "\\" in text

        def evaluated(group_list: list[Group], visible: Mapping[str, Any]) -> tuple[Group, ...]:
            if not has_eval:
                return tuple(group_list)
            out = []
            for g in group_list:
                mods = tuple(
                    with_args(m, evaluator.evaluate_tree(m.raw_args, m.args_path, visible))
                    for m in g.modifiers
                )
                out.append(Group(g.name, mods, g.span))
            return tuple(out)

        stages: list[Stage] = []
        if not stages_raw:
            stages.append(
                Stage(None, evaluated(groups, global_values), span=Span.point(1 + self.doc.line_offset))
            )
        for name, raw, stage_groups, stage_meta in stages_raw:
            values = evaluator.resolve_scope(raw, outer=global_values, scope_name=name)
            visible = ChainMap(values, global_values)
            stages.append(
                Stage(
                    name,
                    evaluated(stage_groups, visible),
                    variables=freeze(values),
                    raw_variables=FrozenDict({k: v for k, (v, _) in raw.items()}),
                    metadata=stage_meta,
                    span=self.key_span((name,)),
                )
            )
        self.diagnostics.extend(evaluator.diagnostics)
        return Recipe(
            stages=tuple(stages),
            variables=freeze(global_values),
            raw_variables=FrozenDict({k: v for k, (v, _) in global_raw.items()}),
            version=version,
            metadata=metadata,
            staged=bool(stages_raw),
            path=self.source.path,
            source=self.source,
            document=self.doc,
            warnings=tuple(
                d.in_file(self.source.path) for d in self.diagnostics if d.severity is not Severity.ERROR
            ),
        )

    def apply_overrides(
        self,
        overrides: Mapping[str, Any],
        global_raw: dict[str, tuple[Any, Path]],
        stage_raws: list[dict[str, tuple[Any, Path]]],
    ) -> None:
        known = set(global_raw).union(*[set(s) for s in stage_raws])
        for name, value in overrides.items():
            found = False
            for scope in [global_raw, *stage_raws]:
                if name in scope:
                    scope[name] = (freeze(value), scope[name][1])
                    found = True
            if not found:
                hint = did_you_mean(name, known)
                defined = ", ".join(sorted(known)) if known else "none"
                self.diagnostics.append(
                    codes.V005(
                        f"cannot override variable '{name}': the recipe does not define it",
                        (hint + " " if hint else "") + f"Variables defined: {defined}.",
                        Span.point(1 + self.doc.line_offset),
                    )
                )


def with_args(m: Modifier, args: Any) -> Modifier:
    """``m`` with ``args`` (itself when they are its own)."""
    if args is m.args:
        return m  # nothing was evaluated: the modifier as read
    from dataclasses import replace

    return replace(m, args=args)
