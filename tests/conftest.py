"""Shared fixtures: where the repository and its test data (``tests/data``) are."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from testdata import CORPUS, DATA, missing

REPO = Path(__file__).resolve().parent.parent
# no test reaches the network: a dataset or checkpoint not on disk fails at once, not after retries
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

#: The scripts that made the reference fixtures (``tests/fixtures/*/make_reference.py``) run the
#: original tools in their own environments; they are not collected (several share a name), nor
#: is ``tests/data`` (copies of other projects' files and the script that refreshes them).
collect_ignore_glob = ["fixtures/*", "data/*"]


def corpus_rows() -> list[dict[str, str]]:
    """The rows of the corpus INDEX.tsv, with ``path`` resolved to the file."""
    index = CORPUS / "INDEX.tsv"
    if not index.exists():
        raise missing(index)
    with index.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    for row in rows:
        row["path"] = str(DATA / row["stored_at"].split("/", 1)[1])  # shared/corpus/... -> data/corpus/...
    return rows


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put ``test_keras_backends.py``'s tests last (their reruns start at collection and run
    beside everything before them: :func:`pytest_collection_finish`), and skip ``cuda`` tests
    where torch sees no CUDA device (checked only if one is collected)."""
    items.sort(key=lambda item: item.path.name == "test_keras_backends.py")  # stable: order kept otherwise
    cuda_items = [item for item in items if "cuda" in item.keywords]
    if not cuda_items:
        return
    try:
        import torch

        available = torch.cuda.is_available()
    except ImportError:
        available = False
    if not available:
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in cuda_items:
            item.add_marker(skip)


#: test_keras_backends.py, when its reruns were started at collection (stopped at the end)
_EARLY: list[Any] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start ``test_keras_backends.py``'s reruns on JAX and torch as soon as one of its tests
    is selected, so that they run beside the rest of the suite (most of which keeps one core
    busy) rather than after it. Its tests then read their results."""
    if session.config.option.collectonly or hasattr(session.config, "workerinput"):
        return  # nothing runs, or an xdist worker: the module starts them itself
    for item in session.items:
        if item.path.name == "test_keras_backends.py" and hasattr(item, "module"):
            item.module.start_runs()
            _EARLY.append(item.module)
            return


def pytest_sessionfinish(session: pytest.Session) -> None:
    for module in _EARLY:
        module.stop_runs()  # runs the suite stopped before reading (-x, Ctrl-C)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(autouse=True)
def _full_float32_on_gpus(request: pytest.FixtureRequest) -> Any:
    """A ``cuda`` test compares the GPU's run with the CPU's: float32 products and convolutions
    in full float32 there (torch lets cuDNN use TF32, ~1e-3 relative, by default)."""
    if "cuda" not in request.keywords or "torch" not in sys.modules:
        yield
        return
    import torch

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.fixture()
def saliencies(monkeypatch: pytest.MonkeyPatch) -> list[list[float]]:
    """REAP's mean saliency each decision reads, in decision order (``reap.run.kept`` recorded)."""
    from recipe_spec.oneshot.reap import run as reap_run

    seen: list[list[float]] = []
    decide = reap_run.kept

    def recording(saliency: Any, *args: Any) -> list[int]:
        seen.append([float(v) for v in saliency])
        return decide(saliency, *args)

    monkeypatch.setattr(reap_run, "kept", recording)
    return seen
