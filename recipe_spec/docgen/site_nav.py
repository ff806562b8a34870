"""The documentation site's navigation for the generated pages (an MkDocs hook).

``mkdocs.yml`` names each generated folder once, by its index page (``- Diagnostic codes:
rules/index.md``); :func:`on_config` turns that entry into a section holding the index and
every other page of the folder, in file-name order. So the navigation lists exactly the pages
``python -m recipe_spec.docgen`` wrote: a new modifier or code needs no edit of ``mkdocs.yml``,
and a removed one leaves no dead entry.

This module imports nothing from MkDocs: the hook receives the configuration as a mapping.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["expand_nav", "generated_folders", "on_config"]


def generated_folders() -> tuple[str, ...]:
    """The folders of generated pages, relative to ``docs/`` (``("modifiers", ...)``).

    >>> "rules" in generated_folders()
    True
    """
    from recipe_spec.docgen.files import GENERATED_DIRS

    return tuple(d.removeprefix("docs/") for d in GENERATED_DIRS)


def _folder_pages(docs_dir: Path, folder: str) -> list[str]:
    """The pages of ``folder`` (not of its sub-folders), its ``index.md`` first."""
    names = sorted(p.name for p in (docs_dir / folder).glob("*.md") if p.name != "index.md")
    return [f"{folder}/index.md"] + [f"{folder}/{name}" for name in names]


def expand_nav(nav: Any, docs_dir: Path, folders: Iterable[str]) -> Any:
    """``nav`` (the ``nav`` of ``mkdocs.yml``) with every entry that names
    ``<folder>/index.md`` of a generated folder replaced by a section of the folder's pages.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     for name in ("index.md", "B.md", "A.md"):
    ...         _ = (Path(d, "rules").mkdir(exist_ok=True), Path(d, "rules", name).write_text("# x"))
    ...     expand_nav([{"Home": "index.md"}, {"Codes": "rules/index.md"}], Path(d), ["rules"])
    [{'Home': 'index.md'}, {'Codes': ['rules/index.md', 'rules/A.md', 'rules/B.md']}]
    """
    indexes = {f"{folder}/index.md": folder for folder in folders}
    if isinstance(nav, list):
        return [expand_nav(item, docs_dir, indexes.values()) for item in nav]
    if isinstance(nav, dict):
        out = {}
        for title, value in nav.items():
            if isinstance(value, str) and value in indexes:
                out[title] = _folder_pages(docs_dir, indexes[value])
            else:
                out[title] = expand_nav(value, docs_dir, indexes.values())
        return out
    return nav


def on_config(config: Any) -> Any:
    """MkDocs hook (``hooks:`` in ``mkdocs.yml``): expand the generated folders' entries."""
    if config.get("nav"):
        config["nav"] = expand_nav(config["nav"], Path(config["docs_dir"]), generated_folders())
    return config
