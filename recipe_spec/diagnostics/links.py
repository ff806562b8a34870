"""Where the documentation site lives, and the address of each code's page on it.

The one place the address is written is ``[project.urls] Documentation`` in ``pyproject.toml``;
the installed package's metadata carries it, read here with :mod:`importlib.metadata` (no
other import). :data:`DOCS_URL` is the same address for a source tree run without installing
(a test checks that the two agree, and that ``mkdocs.yml``'s ``site_url`` does too).
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["DOCS_URL", "docs_url", "rule_url", "page_url"]

#: ``[project.urls] Documentation`` of ``pyproject.toml``, used when the package metadata
#: does not say (a source checkout on ``PYTHONPATH``).
DOCS_URL = "https://recipe-spec.readthedocs.io/en/latest/"


@lru_cache(maxsize=1)
def docs_url() -> str:
    """The documentation site's base address, ending in ``/``.

    >>> docs_url().startswith("https://") and docs_url().endswith("/")
    True
    """
    from importlib import metadata

    try:
        urls = metadata.metadata("recipe-spec").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "documentation" and url.strip():
            url = url.strip()
            return url if url.endswith("/") else url + "/"
    return DOCS_URL


def page_url(page: str) -> str:
    """The address of the site's page built from ``docs/<page>`` (a ``.md`` path).

    >>> page_url("rules/Y002.md").removeprefix(docs_url())
    'rules/Y002/'
    >>> page_url("index.md") == docs_url()
    True
    """
    stem = page.removesuffix(".md")
    if stem == "index" or stem.endswith("/index"):
        stem = stem.removesuffix("index")
        return docs_url() + stem
    return f"{docs_url()}{stem}/"


def rule_url(code: str) -> str:
    """The address of ``code``'s page (``docs/rules/CODE.md`` on the site).

    >>> rule_url("Y002").endswith("/rules/Y002/")
    True
    """
    return page_url(f"rules/{code}.md")
