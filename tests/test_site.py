"""The documentation site (mkdocs.yml): it builds in strict mode, every page is in its
navigation, and its address is the one of ``[project.urls]``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from recipe_spec.diagnostics import links

DOCS = REPO / "docs"


class _Loader(yaml.SafeLoader):
    """mkdocs.yml's own tags (``!!python/...``) read as plain values."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def _mkdocs_config() -> dict:
    return yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)


def _project_docs_url() -> str:
    """``[project.urls] Documentation`` of pyproject.toml (tomllib is Python 3.11+)."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[project\.urls\]\n(.*?)(?=^\[)", text, re.S | re.M)
    assert section, "pyproject.toml has no [project.urls]"
    found = re.search(r'^Documentation\s*=\s*"([^"]+)"', section.group(1), re.M)
    assert found, "[project.urls] has no Documentation"
    return found.group(1)


def test_the_site_address_is_written_once() -> None:
    url = _project_docs_url()
    assert url.startswith("https://") and url.endswith("/")
    assert _mkdocs_config()["site_url"] == url, "mkdocs.yml site_url must equal [project.urls] Documentation"
    assert links.DOCS_URL == url, "recipe_spec/diagnostics/links.py DOCS_URL must equal [project.urls] Documentation"


def test_reading_the_address_imports_nothing_heavy() -> None:
    code = (
        "import sys\nfrom recipe_spec.diagnostics.links import rule_url\nu = rule_url('Y002')\n"
        "heavy = {'torch', 'tensorflow', 'keras', 'jax', 'numpy', 'mkdocs'} & set(sys.modules)\n"
        "print(u, sorted(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [_project_docs_url() + "rules/Y002/", "[]"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
         "--site-dir", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=env,
    )
    assert result.returncode == 0, "mkdocs build --strict failed:\n" + result.stdout + result.stderr
    return out


def _page(site: Path, rel: str) -> str:
    """The built HTML of ``docs/<rel>``."""
    stem = rel.removesuffix(".md")
    path = site / (stem[: -len("index")] if stem.endswith("index") else stem + "/") / "index.html"
    assert path.is_file(), f"docs/{rel} was not built ({path})"
    return path.read_text(encoding="utf-8")


def test_home_page(site: Path) -> None:
    home = _page(site, "index.md")
    assert "<title>recipe-spec</title>" in home
    assert "Where to start" in home and "GMPruningModifier" in home
    # the navigation reaches every part: the guides, both dialects and the generated reference
    for href in ("getting-started/", "cli/", "stage-dialect/", "recipe-format/", "backends/",
                 "oneshot/", "modifiers/", "modifiers/stage/", "rules/", "rules/Y002/"):
        assert f'href="{href}"' in home, href
    assert (site / "search" / "search_index.json").is_file(), "search is part of the site"


def test_a_generated_modifier_page(site: Path) -> None:
    page = _page(site, "modifiers/GMPruningModifier.md")
    assert '<h1 id="gmpruningmodifier">GMPruningModifier<' in page
    for field in ("init_sparsity", "final_sparsity", "inter_func", "update_frequency"):
        assert field in page, field
    core = _page(site, "modifiers/stage/SparseGPTModifier.md")
    assert '<h1 id="sparsegptmodifier">SparseGPTModifier<' in core and "sparsity" in core


def test_every_page_is_in_the_navigation(site: Path) -> None:
    """Every Markdown file under docs/ is built and linked from the navigation of every page
    (strict mode already fails on a page left out of ``nav``; this says which)."""
    nav = re.search(r'<nav class="md-nav md-nav--primary".*?</nav>\s*</div>', _page(site, "index.md"), re.S)
    assert nav, "no primary navigation in the home page"
    hrefs = set(re.findall(r'href="([^"#]*)"', nav.group(0)))
    missing = []
    for path in sorted(DOCS.rglob("*.md")):
        rel = path.relative_to(DOCS).as_posix()
        _page(site, rel)
        stem = rel.removesuffix(".md")
        href = "." if stem == "index" else (stem[: -len("index")] if stem.endswith("/index") else stem + "/")
        if href not in hrefs and f"./{href}" not in hrefs:
            missing.append(rel)
    assert not missing, f"pages not in the navigation: {missing}"


def test_rule_addresses_are_built_pages(site: Path) -> None:
    """The helpUri of every code (SARIF, JSON) is a page of the built site."""
    from recipe_spec.diagnostics.codes import CODES

    for code in CODES:
        rel = links.rule_url(code).removeprefix(links.docs_url())
        assert (site / rel / "index.html").is_file(), code
