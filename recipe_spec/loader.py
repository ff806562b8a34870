"""``recipe_spec.load``: from a file or a string to a :class:`~recipe_spec.recipe.Recipe`.

Layout (SPEC, "Structure"):

- any top-level key whose name contains ``modifiers`` holds a list of modifiers (group names
  carry no meaning); a modifier anywhere else is an error that says where it must go;
- a top-level mapping that itself has ``*modifiers*`` keys is a stage; its other keys are
  stage variables;
- ``version`` and ``__metadata__`` are metadata; every other top-level key is a variable;
- SparseML's later stage/group dialect (``ModifierName: {...}`` mappings in ``*_stage`` groups,
  as llm-compressor reads them) is read by :mod:`recipe_spec.stage_dialect.reader` into the
  same object model (``recipe.dialect == "stage"``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .diagnostics.base import Diagnostic, RecipeError, Severity
from .recipe.build import METADATA_KEYS, Builder
from .recipe.model import Recipe
from .stage_dialect.reader import build_stage, is_stage
from .text.reader import read_yaml
from .text.source import Source, from_text, read_source

__all__ = ["load", "loads", "check", "METADATA_KEYS"]

RecipeInput = str | os.PathLike[str] | Source


def _source_of(recipe: RecipeInput) -> Source:
    if isinstance(recipe, Source):
        return recipe
    if isinstance(recipe, os.PathLike):
        return read_source(recipe)
    if isinstance(recipe, str):
        if "\n" in recipe or "\r" in recipe:
            return from_text(recipe)
        if os.path.exists(recipe) or recipe.lower().endswith(
            (".yaml", ".yml", ".json", ".md")
        ):
            return read_source(recipe)
        return from_text(recipe)
    raise TypeError(
        f"load() takes a path or recipe text, not {type(recipe).__name__}"
    )


def check(
    recipe: RecipeInput, variables: Mapping[str, Any] | None = None
) -> tuple[Recipe | None, list[Diagnostic]]:
    """Load ``recipe`` and return it with every diagnostic found, raising nothing.

    The recipe is None when errors prevented building it.
    """
    try:
        source = _source_of(recipe)
    except RecipeError as exc:
        return None, list(exc.diagnostics)
    try:
        document = read_yaml(source.yaml_text, source.line_offset)
    except RecipeError as exc:
        return None, [d.in_file(source.path) for d in exc.diagnostics]
    builder = Builder(source, document)
    root = builder.root()
    result = None
    if root is not None:
        result = build_stage(builder, root, variables) if is_stage(root) else builder.build(root, variables)
    diagnostics = [d.in_file(source.path) for d in builder.diagnostics]
    if any(d.severity is Severity.ERROR for d in diagnostics):
        return None, diagnostics
    return result, diagnostics


def load(recipe: RecipeInput, variables: Mapping[str, Any] | None = None) -> Recipe:
    """Load a recipe from a path (``.yaml``, ``.yml``, ``.json``, ``.md``) or from YAML text.

    ``variables`` overrides variables the recipe defines (top-level and same-named stage
    variables); naming one it does not define is an error. Raises :class:`RecipeError`
    with every problem found, each with its file, line and column.

    >>> recipe = load('''
    ... num_epochs: 10
    ... modifiers:
    ...   - !EpochRangeModifier
    ...     start_epoch: 0
    ...     end_epoch: eval(num_epochs)
    ... ''', variables={"num_epochs": 20})
    >>> recipe.modifiers[0].args["end_epoch"]
    20
    """
    result, diagnostics = check(recipe, variables)
    if result is None:
        raise RecipeError([d for d in diagnostics if d.severity is Severity.ERROR] or diagnostics)
    return result


def loads(text: str, variables: Mapping[str, Any] | None = None) -> Recipe:
    """Load a recipe from YAML (or Markdown recipe card) text, never from a path."""
    return load(from_text(text), variables)
