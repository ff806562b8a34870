"""llm-compressor 0.14's own SmoothQuant and AWQ runs on a tiny Llama
(``tests/fixtures/smoothing``, written by its ``make_reference.py``), read for
tests/test_smoothquant.py and tests/test_awq.py."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "smoothing"


@functools.cache
def cases() -> dict[str, Any]:
    """``cases.json``: model config, calibration token ids, per case the recipe and events."""
    return json.loads((FIXTURES / "cases.json").read_text())


def tensors(name: str) -> dict[str, Any]:
    """A case's tensors (``final.*``, ``smoothquant.*``, ``awq.*``) as torch tensors."""
    safetensors_torch = pytest.importorskip("safetensors.torch")
    return safetensors_torch.load_file(str(FIXTURES / f"{name}.safetensors"))


def model() -> Any:
    """The tiny LlamaForCausalLM with the reference's initial weights (fp32, eval)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.set_num_threads(1)
    net = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cases()["model_config"])).float().eval()
    net.load_state_dict(tensors("initial"))
    return net


def samples() -> list[dict[str, list[int]]]:
    """The calibration samples, in dataset order."""
    return [{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in cases()["token_ids"]]


def relative_error(got: Any, want: Any) -> float:
    """``max |got - want| / max |want|``."""
    return float((got.double() - want.double()).abs().max() / want.double().abs().max())
