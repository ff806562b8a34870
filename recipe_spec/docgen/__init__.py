"""Generate the reference documentation and the modifier schema files from the modifier
declarations and the code catalogue.

Every file is produced by a pure function that returns its text; :func:`generate` returns all
of them as ``{path relative to the repository root: text}``:

- ``docs/modifiers/<Name>.md``, one page per modifier, and ``docs/modifiers/index.md``
  (:mod:`.pages`);
- ``docs/modifiers/stage/<Name>.md``, one page per modifier name of the stage/group dialect,
  with ``index.md`` and ``quantization-arguments.md`` (:mod:`.stage_pages`);
- ``docs/rules/<CODE>.md``, one page per diagnostic code, and ``docs/rules/index.md``;
- ``docs/editors.md``, the editor set-up with the list of modifier tags, and ``docs/create.md``,
  automatic recipes, with the ``RecipeVariables`` table (:mod:`.guide_pages`);
- ``schemas/modifiers/<Name>.schema.json``, the JSON Schema of each modifier declaration
  (:func:`recipe_spec.modifiers.schema.schema_text`), shipped for editors and other tools.

:mod:`.markdown` holds the Markdown helpers they share; :mod:`.files` gathers, checks and writes
the files. The output is deterministic (sorted, no dates), so the files can be committed and
checked::

    python -m recipe_spec.docgen          # write the pages under docs/ and the schema files
    python -m recipe_spec.docgen --check  # exit 1 if a file is stale, missing or extra

The repository root is the parent of the ``recipe_spec`` package (a source checkout).
``docs/modifiers/``, ``docs/modifiers/stage/`` and ``docs/rules/`` hold generated pages only, and
``schemas/modifiers/`` generated schemas only: a ``.md`` (or ``.schema.json``) file there that is
not generated counts as extra (``--check``) and is removed when writing.
"""

from .files import (
    GENERATED_DIRS,
    REPO_ROOT,
    SCHEMA_DIR,
    backends_file,
    check,
    generate,
    main,
    schema_files,
    write,
)
from .guide_pages import create_page, custom_tags, editors_page
from .pages import FAMILIES, modifier_example, modifier_index, modifier_page, rule_index, rule_page

__all__ = [
    "FAMILIES", "GENERATED_DIRS", "SCHEMA_DIR", "REPO_ROOT", "generate", "schema_files", "backends_file",
    "modifier_page", "modifier_index", "modifier_example", "rule_page", "rule_index", "editors_page",
    "create_page", "custom_tags", "check", "write", "main",
]
