"""Telling a recipe from the other YAML, JSON and Markdown files of a repository by its text.

``recipe-spec validate DIR`` and the pre-commit hook meet CI workflows, ``.pre-commit-config.yaml``,
``package.json`` and READMEs beside the recipes. A file is a recipe when its text (for a
Markdown card: its front matter) holds one of

- a modifier tag, ``!GMPruningModifier`` (the ``!Modifier`` dialect);
- a ``modifiers`` key or a ``<name>_modifiers`` key (both dialects, YAML or JSON);
- a ``<name>_stage`` key at the top level holding a mapping (the stage/group dialect).

The test reads lines, not YAML, so a recipe whose YAML is broken is still recognised (and then
reported), and a comment that mentions a modifier is not a recipe.
"""

from __future__ import annotations

import os
import re

from .source import MAX_BYTES

__all__ = ["is_recipe_text", "is_recipe_file"]

#: A ``!...Modifier`` tag with no ``#`` before it on its line.
_TAG = re.compile(r"^[^#\n]*?(?<![\w!])![\w.]*Modifier\b", re.M)
#: A ``modifiers`` / ``<name>_modifiers`` key: at a line's start (after indentation or a
#: ``- ``), or after ``{`` or ``,`` in a flow mapping or JSON; quoted or not.
_GROUP = re.compile(r"""(?:^[ \t]*(?:-[ \t]+)?|[{,][ \t]*)(["']?)(?:\w+_)?modifiers\1[ \t]*:""", re.M)
#: A top-level ``<name>_stage:`` holding a block or flow mapping (YAML), or ``"<name>_stage": {`` (JSON).
_STAGE = re.compile(
    r"""^(["']?)\w+_stage\1[ \t]*:[ \t]*(?:\{|\#|$)|["']\w+_stage["'][ \t]*:[ \t]*\{""", re.M
)
#: A Markdown card's front matter: after blank lines and HTML comments only, between two
#: ``---`` (or ``+++``) lines, as :mod:`recipe_spec.text.source` reads it.
_FRONT_MATTER = re.compile(
    r"\A\s*(?:<!--.*?-->\s*)*^(?:-{3,}|\+{3,})[ \t]*\n(?P<yaml>.*?)^(?:-{3,}|\+{3,})[ \t]*$", re.S | re.M
)


def is_recipe_text(text: str, markdown: bool = False) -> bool:
    """Whether ``text`` holds a recipe; ``markdown``: only its front matter counts.

    >>> is_recipe_text("modifiers:\\n  - !EpochRangeModifier {end_epoch: 1}")
    True
    >>> is_recipe_text("quant_stage:\\n  quant_modifiers:\\n    GPTQModifier: {}")
    True
    >>> is_recipe_text('{"version": "1.1", "modifiers": []}')
    True
    >>> is_recipe_text("repos:\\n  - repo: local\\n    hooks:\\n      - id: recipe-spec-validate")
    False
    >>> is_recipe_text("stages: [build, test]\\nbuild_stage: compile  # !GMPruningModifier")
    False
    >>> is_recipe_text("# Notes\\n\\n```yaml\\nmodifiers:\\n```", markdown=True)
    False
    >>> is_recipe_text("<!-- licence -->\\n---\\nmodifiers: []\\n---\\n# Card", markdown=True)
    True
    """
    if markdown:
        found = _FRONT_MATTER.match(text)
        if found is None:
            return False
        text = found.group("yaml")
    return bool(_GROUP.search(text) or _TAG.search(text) or _STAGE.search(text))


def is_recipe_file(path: str | os.PathLike[str]) -> bool:
    """Whether the file at ``path`` holds a recipe (:func:`is_recipe_text`); a file that
    cannot be read, or holds NUL bytes, does not."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read(MAX_BYTES)
    except OSError:
        return False
    if b"\x00" in data:
        return False
    text = data.decode("utf-8-sig", errors="replace").replace("\r\n", "\n")
    return is_recipe_text(text, markdown=name.lower().endswith(".md"))
