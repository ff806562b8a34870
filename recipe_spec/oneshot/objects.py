"""``oneshot(recipe=GPTQModifier(...))``: llm-compressor's modifier objects
(:mod:`recipe_spec.modifiers.objects`) turned into a stage/group recipe, as llm-compressor's
``Recipe.from_modifiers`` does: one stage (``default_stage``), the modifiers in the order
given (nested lists flattened), each with the arguments it was made with (None left out, as
llm-compressor's recipe writer leaves them out).

The text is then read and checked like a YAML file (the same catalogue declarations, the same
``validate`` path), so every problem is located in it: its name says it was made from objects,
and a comment above each modifier says which object (``recipe[1]``) it came from. The text is
what ``recipe.yaml`` holds in the saved folder.

>>> from recipe_spec.modifiers.quantization import GPTQModifier
>>> print(recipe_text([GPTQModifier(scheme="W4A16", targets="Linear", ignore=["lm_head"])]), end="")
default_stage:
  default_modifiers:
    # recipe[0]: GPTQModifier
    GPTQModifier:
      scheme: "W4A16"
      targets: "Linear"
      ignore: ["lm_head"]
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..loader import load
from ..modifiers.objects import AWQMapping, ModifierObject
from ..recipe.model import Recipe
from ..stage_dialect.catalogue import stage_variants
from ..text.source import from_text

__all__ = ["SOURCE_NAME", "is_object_recipe", "flatten", "recipe_text", "object_recipe"]

#: The name the generated recipe's positions are given under.
SOURCE_NAME = "<recipe from modifier objects>"


def flatten(recipe: Any) -> list[Any]:
    """The leaves of a modifier or a (nested) list of them, in order."""
    if isinstance(recipe, (list, tuple)):
        return [leaf for item in recipe for leaf in flatten(item)]
    return [recipe]


def is_object_recipe(recipe: Any) -> bool:
    """Whether ``recipe`` is a modifier object or a list (llm-compressor reads every list as
    modifier objects: ``Recipe.from_modifiers``)."""
    return isinstance(recipe, (list, tuple, ModifierObject))


def _plain(value: Any, where: str) -> Any:
    """``value`` as YAML-ready data: mappings, lists, strings, numbers, booleans, None."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, enum.Enum):
        return _plain(value.value, where)
    if isinstance(value, AWQMapping):
        return value.as_dict()
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    dump = getattr(value, "model_dump", None)  # compressed-tensors' QuantizationScheme / Args
    if callable(dump):
        return _plain(dump(mode="json", exclude_none=True), where)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain({k: v for k, v in dataclasses.asdict(value).items() if v is not None}, where)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{where} is a {type(value).__name__}, which a recipe cannot hold: give strings, numbers, "
                    "lists and dicts (or compressed-tensors' QuantizationScheme / QuantizationArgs)")


def recipe_text(modifiers: Sequence[ModifierObject]) -> str:
    """The stage/group recipe holding ``modifiers`` (see the module docstring). A modifier type
    that repeats starts a new group (a group holds each type once)."""
    groups: list[list[tuple[int, ModifierObject]]] = [[]]
    for i, m in enumerate(modifiers):
        if any(other.type == m.type for _, other in groups[-1]):
            groups.append([])
        groups[-1].append((i, m))
    lines = ["default_stage:"]
    for g, group in enumerate(groups):
        lines.append("  default_modifiers:" if g == 0 else f"  default_{g}_modifiers:")
        for i, m in group:
            lines += [f"    # recipe[{i}]: {m.type}", f"    {m.type}:" + ("" if m.args else " {}")]
            for key, value in m.args.items():
                plain = _plain(value, f"recipe[{i}] {m.type}({key}=...)")
                if plain is not None:
                    lines.append(f"      {key}: {json.dumps(plain, ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def object_recipe(recipe: Any, recipe_args: Any = None) -> Recipe:
    """The loaded :class:`Recipe` for a modifier object or a (nested) list of them. Raises
    TypeError for a list mixing objects with anything else and for ``recipe_args`` (they set
    a YAML recipe's variables; objects have none)."""
    leaves = flatten(recipe)
    if not leaves:
        raise ValueError("the recipe is an empty list: it holds no modifier to run; give modifier objects "
                         "(recipe_spec.modifiers...), or a recipe path or YAML text")
    for i, m in enumerate(leaves):
        if not isinstance(m, ModifierObject):
            raise TypeError(
                f"recipe[{i}] is a {type(m).__name__}: a recipe list holds modifier objects only "
                "(recipe_spec.modifiers...), as llm-compressor's Recipe.from_modifiers; put YAML stages in one "
                "file or string instead")
        if not stage_variants(m.type):
            raise TypeError(f"recipe[{i}]: {m.type} is not a modifier of llm-compressor's stage/group dialect")
    if recipe_args:
        raise TypeError("recipe_args set the variables of a YAML recipe; a recipe made of modifier objects has none: "
                        "put the values into the objects' arguments")
    return load(from_text(recipe_text(leaves), SOURCE_NAME))
