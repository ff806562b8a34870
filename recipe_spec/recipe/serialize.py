"""Writing a :class:`~recipe_spec.recipe.Recipe` back to YAML.

Three forms:

- as written (``evaluated=False``): variables, stages, group names and ``eval(...)`` kept;
  loading the text gives an equal recipe;
- evaluated (``evaluated=True``): every expression replaced by its value, no variables;
- SparseML's serialized form (``style="sparseml"``): ``version: 1.1.0`` first, one
  ``modifiers:`` list (per stage), evaluated values, no ``log_types``.

Text is quoted wherever either YAML 1.1 (SparseML, PyYAML) or YAML 1.2 (this project) would
read it as something else, and floats are written so that both read them as floats
(``1.0e-05``, never ``1e-05``), so the output means the same thing to every reader.
``re:`` patterns are written exactly once escaped, so they still match after a round trip.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import yaml

from ..text.frozen import FrozenDict, thaw
from ..text.nodes import Resolver12

if TYPE_CHECKING:
    from .model import Modifier, Recipe

__all__ = ["to_yaml", "dump_value"]


class _TaggedMapping:
    __slots__ = ("tag", "mapping")

    def __init__(self, tag: str, mapping: dict[str, Any]):
        self.tag, self.mapping = tag, mapping


class _Resolver(yaml.resolver.Resolver):
    """Resolves a plain scalar as every reader might: YAML 1.1 first, then 1.2.

    Used only to decide quoting: a string that either schema reads as a non-string is quoted.
    """


_Resolver.yaml_implicit_resolvers = {
    key: list(value) for key, value in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
}
for _first, _pairs in Resolver12.yaml_implicit_resolvers.items():
    _Resolver.yaml_implicit_resolvers.setdefault(_first, [])
    _Resolver.yaml_implicit_resolvers[_first].extend(_pairs)


class _Dumper(yaml.emitter.Emitter, yaml.serializer.Serializer, yaml.representer.SafeRepresenter, _Resolver):
    def __init__(self, stream: Any, **kwargs: Any):
        yaml.emitter.Emitter.__init__(
            self,
            stream,
            canonical=None,
            indent=kwargs.get("indent", 2),
            width=100,
            allow_unicode=True,
            line_break=None,
        )
        yaml.serializer.Serializer.__init__(self, explicit_start=False, explicit_end=False)
        yaml.representer.SafeRepresenter.__init__(
            self, default_style=None, default_flow_style=False, sort_keys=False
        )
        _Resolver.__init__(self)

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # Indent list items under their key ("modifiers:\n  - !X"), as recipes are written.
        super().increase_indent(flow, False)


def _represent_tagged(dumper: _Dumper, data: _TaggedMapping) -> Any:
    if not data.mapping:
        return dumper.represent_scalar("!" + data.tag, "")
    return dumper.represent_mapping("!" + data.tag, data.mapping)


def _represent_float(dumper: _Dumper, data: float) -> Any:
    node = yaml.representer.SafeRepresenter.represent_float(dumper, data)
    value = node.value
    # PyYAML writes 1e-05 as "1.0e-05" already; make sure every exponent form has a dot and
    # a signed exponent so that YAML 1.1 readers see a float too.
    m = re.fullmatch(r"([-+]?\d+)(?:\.(\d*))?[eE]([-+]?)(\d+)", value)
    if m:
        mantissa = m.group(1) + "." + (m.group(2) or "0")
        node.value = f"{mantissa}e{m.group(3) or '+'}{m.group(4)}"
    return node


_Dumper.add_representer(_TaggedMapping, _represent_tagged)
_Dumper.add_representer(float, _represent_float)
_Dumper.add_representer(FrozenDict, lambda d, v: d.represent_dict(dict(v.items())))
_Dumper.add_representer(tuple, lambda d, v: d.represent_list(list(v)))


def dump_value(value: Any, indent: int = 2) -> str:
    """YAML text for a plain value, quoted safely for YAML 1.1 and 1.2 readers.

    >>> print(dump_value({"lr": 1e-05, "mask_type": "2:4", "flag": "yes"}), end="")
    lr: 1.0e-05
    mask_type: '2:4'
    flag: 'yes'
    """
    return yaml.dump(value, Dumper=_Dumper, indent=indent)


def _modifier_node(m: Modifier, evaluated: bool, drop: tuple[str, ...] = ()) -> _TaggedMapping:
    args = m.args if evaluated else m.raw_args
    mapping = {k: thaw(v) for k, v in args.items() if k not in drop}
    return _TaggedMapping(m.type, mapping)


def to_yaml(recipe: Recipe, evaluated: bool = False, style: str = "recipe") -> str:
    """See :meth:`recipe_spec.recipe.Recipe.to_yaml`."""
    if style not in ("recipe", "sparseml"):
        raise ValueError(f"style must be 'recipe' or 'sparseml', not {style!r}")
    if style == "sparseml":
        return _sparseml(recipe)
    doc: dict[str, Any] = {}
    if recipe.version is not None:
        doc["version"] = recipe.version
    if recipe.metadata is not None:
        doc["__metadata__"] = thaw(recipe.metadata)
    if not evaluated:
        doc.update({k: thaw(v) for k, v in recipe.raw_variables.items()})
    for stage in recipe.stages:
        target = doc
        if stage.name is not None:
            target = doc.setdefault(stage.name, {})
            if stage.metadata is not None:
                target["__metadata__"] = thaw(stage.metadata)
            if not evaluated:
                target.update({k: thaw(v) for k, v in stage.raw_variables.items()})
        for group in stage.groups:
            target[group.name] = [_modifier_node(m, evaluated) for m in group.modifiers]
    return dump_value(doc)


def _sparseml(recipe: Recipe) -> str:
    """SparseML's ``str(manager)`` layout: version first, then one modifiers list per stage."""
    parts = ["version: 1.1.0\n"]

    def block(stage_mods: tuple[Modifier, ...], metadata: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if metadata is not None:
            out["__metadata__"] = thaw(metadata)
        out["modifiers"] = [
            _TaggedMapping(m.type, dict(sorted(_modifier_node(m, True, ("log_types",)).mapping.items())))
            for m in stage_mods
        ]
        return out

    if not recipe.staged:
        parts.append(dump_value(block(recipe.modifiers, recipe.metadata), indent=4))
    else:
        if recipe.metadata is not None:
            parts.append(dump_value({"__metadata__": thaw(recipe.metadata)}, indent=4))
        for stage in recipe.stages:
            inner = block(stage.modifiers, stage.metadata)
            inner[f"{stage.name}_modifiers"] = inner.pop("modifiers")
            parts.append(dump_value({stage.name: inner}, indent=4))
    return "\n".join(parts)
