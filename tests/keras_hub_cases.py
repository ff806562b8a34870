"""What the Keras one-shot tests share: llm-compressor's conformance cases
(``tests/data/conformance/llmcompressor``) as Hugging Face checkpoints a keras-hub Llama loads, and
the plain functional model (Embedding, Dense, EinsumDense, Dense head) with its samples."""

from __future__ import annotations

import json
import pathlib
import shutil
from typing import Any

import numpy as np
import pytest
from testdata import LLMCOMPRESSOR

ROOT = pathlib.Path(__file__).resolve().parent.parent
CASES = LLMCOMPRESSOR
try:
    import keras_hub
except ImportError:  # the keras-hub extra: pip install --no-deps keras-hub sentencepiece
    keras_hub = None
needs_hub = pytest.mark.skipif(keras_hub is None, reason="needs keras-hub")


def case(name: str) -> dict[str, Any]:
    """A case's ``case.json``."""
    return json.loads((CASES / name / "case.json").read_text())


def hf_folder(folder: pathlib.Path, name: str) -> pathlib.Path:
    """The case's initial weights and config written as a Hugging Face checkpoint in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(dict(case(name)["model_config"], architectures=["LlamaForCausalLM"])))
    shutil.copy(CASES / name / "initial.safetensors", folder / "model.safetensors")
    return folder


def llama(folder: pathlib.Path) -> Any:
    """The keras-hub Llama of a checkpoint folder, without a preprocessor."""
    return keras_hub.models.LlamaCausalLM.from_preset(str(folder), preprocessor=None)


def samples(name: str) -> list[dict[str, list[int]]]:
    """The case's calibration sequences as input dicts."""
    return [{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in case(name)["calibration"]["token_ids"]]


def plain_model() -> Any:
    """Embedding(40, 16), Dense 24 (``fc1``), EinsumDense to 2 x 8 heads, Dense head (``head``)."""
    import keras

    keras.utils.set_random_seed(3)
    ids = keras.Input(shape=(None,), dtype="int32", name="ids")
    x = keras.layers.Embedding(40, 16, name="embed")(ids)
    x = keras.layers.Dense(24, activation="relu", name="fc1")(x)
    x = keras.layers.EinsumDense("btd,dhk->bthk", output_shape=(None, 2, 8), name="heads")(x)
    x = keras.layers.Reshape((-1, 16))(x)
    out = keras.layers.Dense(40, name="head")(x)
    return keras.Model(ids, out)


def plain_samples(n: int = 6, length: int = 10) -> list[dict[str, list[int]]]:
    rng = np.random.default_rng(0)
    return [{"input_ids": rng.integers(0, 40, length).tolist(), "attention_mask": [1] * length} for _ in range(n)]
