"""Shared fixtures: where the repository and the shared reference material are."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpus"


def corpus_rows() -> list[dict[str, str]]:
    """The rows of the corpus INDEX.tsv, with ``path`` resolved to the file."""
    index = CORPUS / "INDEX.tsv"
    if not index.exists():
        raise RuntimeError(f"the shared corpus is missing: {index} (../shared must sit beside the repo)")
    with index.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    for row in rows:
        row["path"] = str(SHARED / row["stored_at"].split("/", 1)[1])
    return rows


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
