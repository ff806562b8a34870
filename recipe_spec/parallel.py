"""``recipe-spec validate --jobs N``: validating many files in worker processes.

The files are cut into chunks in their sorted order; each worker validates whole chunks and
the results are put back in that order, so the output is the same as in one process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .diagnostics.base import Diagnostic
from .validation import validate

__all__ = ["validate_files", "MIN_FILES_PER_JOB"]

#: Worker processes are started only when each would get at least this many files: a
#: process costs about as much as validating a few dozen recipes.
MIN_FILES_PER_JOB = 25


def _validate_chunk(
    paths: Sequence[str], variables: Mapping[str, Any] | None, backend: str | None, compat: Any = None
) -> list[list[Diagnostic]]:
    return [validate(Path(p), variables, backend=backend, compat=compat) for p in paths]


def validate_files(
    paths: Sequence[str],
    variables: Mapping[str, Any] | None = None,
    backend: str | None = None,
    jobs: int | None = None,
    compat: Any = None,
) -> list[list[Diagnostic]]:
    """The diagnostics of each file of ``paths``, in order, using up to ``jobs`` processes
    (default: the number of CPUs); ``compat`` as in
    :func:`recipe_spec.validation.validate_recipe`."""
    jobs = min(jobs or os.cpu_count() or 1, len(paths) // MIN_FILES_PER_JOB)
    if jobs <= 1:
        return _validate_chunk(paths, variables, backend, compat)
    from concurrent.futures import ProcessPoolExecutor

    size = max(MIN_FILES_PER_JOB // 2, -(-len(paths) // (jobs * 8)))
    chunks = [paths[i: i + size] for i in range(0, len(paths), size)]
    out: list[list[Diagnostic]] = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for part in pool.map(
            _validate_chunk, chunks, [variables] * len(chunks), [backend] * len(chunks),
            [compat] * len(chunks),
        ):
            out.extend(part)
    return out
