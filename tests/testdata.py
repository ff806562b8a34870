"""Where the tests' data lives: ``tests/data/`` in the repository (its README says where each
set came from and how it was made; ``tests/data/refresh.py`` takes in new copies). Nothing
under ``tests/`` reads a folder outside the repository."""

from __future__ import annotations

import os
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
#: 314 real recipes and their INDEX.tsv
CORPUS = DATA / "corpus"
#: the documents the project grew from (their recipe examples)
SEEDS = DATA / "seeds"
CONFORMANCE = DATA / "conformance"
#: SparseML 1.8's per-step runs
SPARSEML = CONFORMANCE / "sparseml"
#: SparseML 1.8's M-FAC / OBS runs
SPARSEML_MFAC = CONFORMANCE / "sparseml-mfac"
#: Sparsify's ``create.initialize``
SPARSIFY_CREATE = CONFORMANCE / "sparsify-create"
#: llm-compressor 0.14's one-shot runs on tiny Llama models
LLMCOMPRESSOR = CONFORMANCE / "llmcompressor"
#: a slice of llm-compressor's quality anchor: its recipes, results, perplexity script and first
#: calibration samples (the trained checkpoint and its evaluation stay benchmark inputs)
QUALITY = LLMCOMPRESSOR / "quality"
#: llm-compressor 0.14's runs on a tiny Qwen3-MoE (fused experts): the cases, the GPTQ run's
#: saved folder and the SparseGPT run's final tensors
MOE = LLMCOMPRESSOR / "moe"


def llmcompressor_python() -> str | None:
    """A Python interpreter with llm-compressor 0.14 installed, for the few tests that run it
    beside ours: ``$LLMCOMPRESSOR_PYTHON``, or None (those tests are then skipped: the tool
    itself is not a requirement of this project)."""
    path = os.environ.get("LLMCOMPRESSOR_PYTHON")
    return path if path and Path(path).exists() else None


def missing(path: Path) -> RuntimeError:
    """The error for a data file that is not in the checkout (a partial clone, a moved tree)."""
    return RuntimeError(f"the test data is missing: {path} (it ships with the repository under tests/data; "
                        "restore it with `git checkout -- tests/data`)")
