"""The llm-compressor one-shot reference runs (tests/data/conformance/llmcompressor), read for the
solver tests: each case's tensors, events and zero bitmasks, and the two array backends."""

from __future__ import annotations

import base64
import functools
import json
from typing import Any

import numpy as np
import pytest
from testdata import LLMCOMPRESSOR, missing

from recipe_spec.masks.numpy_ops import NUMPY_OPS

ROOT = LLMCOMPRESSOR


@functools.cache
def case(name: str) -> dict[str, Any]:
    """``case.json``, ``masks.json`` (layers; empty where the case has none) and the three tensor files of one case."""
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    folder = ROOT / name
    if not folder.is_dir():
        raise missing(folder)
    out: dict[str, Any] = json.loads((folder / "case.json").read_text())
    masks = folder / "masks.json"  # pruning cases only
    out["masks"] = json.loads(masks.read_text())["layers"] if masks.is_file() else {}
    for part in ("initial", "final", "intermediates"):
        out[part] = safetensors_numpy.load_file(str(folder / f"{part}.safetensors"))
    return out


def events(name: str, kind: str) -> list[dict[str, Any]]:
    """The case's compression events of one kind (``"sparsegpt.sparsify_weight"``, ...)."""
    return [e for e in case(name)["compression_events_in_order"] if e["event"] == kind]


def zeros_bitmask(weight: np.ndarray) -> str:
    """The ``zeros_bitmask_b64`` of ``masks.json``: the weight's exact zeros, packed row-major."""
    return base64.b64encode(np.packbits((weight == 0).reshape(-1), bitorder="big")).decode()


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """``max |got - want| / max |want|``: the weights' error relative to the layer's scale."""
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def backends(keras_ops: bool = True) -> list[Any]:
    """``(ops, to_array)`` parameters for PyTorch (where installed), NumPy and, with
    ``keras_ops``, Keras's own tensors (:class:`recipe_spec_keras.solver_ops.KerasOps` on this
    process's Keras backend, where Keras is installed)."""
    out: list[Any] = [pytest.param(NUMPY_OPS, np.array, id="numpy")]
    if keras_ops:
        try:
            import keras
            from recipe_spec_keras.solver_ops import KERAS_OPS
        except ImportError:
            pass
        else:
            out.append(pytest.param(KERAS_OPS, lambda a: keras.ops.convert_to_tensor(np.array(a)), id="keras"))
    try:
        import torch
        from recipe_spec_torch.masks import TORCH_OPS
    except ImportError:
        return out
    return [pytest.param(TORCH_OPS, lambda a: torch.from_numpy(np.array(a)), id="torch"), *out]


@pytest.fixture(autouse=True)
def one_torch_thread() -> Any:
    """Torch on one thread during a test (its float32 sums then come out the same on every
    run, as in the reference runs), restored afterwards."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
