"""A Keras model's inputs as the one-shot pipeline's calibration samples name them, and the
model's keras-hub preprocessor as the tokeniser of text calibration data
(:mod:`recipe_spec.oneshot.calibration_inputs` reads the data).

**Names.** A sample carries ``input_ids`` and ``attention_mask`` (llm-compressor's names).
:func:`input_keys` says which sample key each model input reads: keras-hub's ``token_ids`` and
``padding_mask`` read ``input_ids`` and ``attention_mask``; llm-compressor's names read
themselves; a functional model's only input, or its first input when none of its inputs is one
of those, reads ``input_ids`` under any name; any other input reads the sample key of its own
name. :func:`feed` builds the model's input from a batch by that table, in each input's
dtype; a ``padding_mask`` the batch lacks is all ones (as a Hugging Face model without an
``attention_mask``). Under a ``keras.distribution`` on JAX each input's batch axis is sharded
over the distribution's devices (:func:`on_devices`).

**Text.** :func:`preprocess` runs the model's ``preprocessor`` (a keras-hub
``CausalLMPreprocessor``) as for generation (``generate_preprocess``: the start token, no end
token, no label shift, as a Hugging Face Llama tokenizer gives ``input_ids``), packed to the
preprocessor's ``sequence_length`` (longer texts are cut there); each row keeps the tokens its
padding mask marks, so a sample is the text's tokens without padding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import keras
from recipe_spec.oneshot.calibration_inputs import ALIASES, to_numpy

__all__ = ["input_specs", "input_keys", "feed", "on_devices", "preprocess"]


def input_specs(model: Any) -> dict[str, Any] | None:
    """``{input name: KerasTensor}`` of a functional model, in input order; None for a model
    whose inputs are not known before it is called (a subclassed model)."""
    try:
        spec = model.input
    except (AttributeError, ValueError):
        return None
    if isinstance(spec, Mapping):
        return dict(spec)
    tensors = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    names = [str(getattr(t, "name", "") or f"input_{i}") for i, t in enumerate(tensors)]
    return dict(zip(names, tensors, strict=True)) if len(set(names)) == len(names) else None


def input_keys(model: Any) -> dict[str, str]:
    """``{model input name: sample key}`` (see the module docstring); {} when the model's
    inputs are not known."""
    specs = input_specs(model)
    if not specs:
        return {}
    keys = {name: name if name in ("input_ids", "attention_mask") else ALIASES.get(name, name) for name in specs}
    if "input_ids" not in keys.values():
        keys[next(iter(specs))] = "input_ids"
    return keys


def feed(model: Any, batch: Any) -> Any:
    """The model's input for ``batch`` (a dict of the samples' keys; anything else is fed as
    it is): a dict of named inputs, a list for a model of several unnamed-dict inputs, or the
    one array, each in its input's dtype. A missing input is refused by name."""
    if not isinstance(batch, Mapping):
        return batch
    specs = input_specs(model)
    if specs is None:
        return batch["input_ids"] if "input_ids" in batch else next(iter(batch.values()))
    keys = input_keys(model)
    out = {}
    for name, tensor in specs.items():
        key = name if name in batch else keys[name]
        dtype = keras.backend.standardize_dtype(tensor.dtype)
        if key in batch:
            out[name] = np.asarray(to_numpy(batch[key])).astype(dtype)
        elif key == "attention_mask" and "input_ids" in batch:
            out[name] = np.ones(np.shape(to_numpy(batch["input_ids"])), dtype)
        else:
            raise ValueError(f"the model takes an input {name!r}; the calibration samples have "
                             f"{', '.join(map(repr, batch))} (give each sample {key!r})")
    out = {name: on_devices(value) for name, value in out.items()}
    try:
        structure = model.input
    except (AttributeError, ValueError):
        structure = out
    if isinstance(structure, Mapping):
        return out
    return list(out.values()) if isinstance(structure, (list, tuple)) else next(iter(out.values()))


def on_devices(array: np.ndarray) -> Any:
    """``array`` laid out as the current ``keras.distribution`` lays out data: on JAX under
    ``keras.distribution.DataParallel(devices=...)``, its batch axis sharded over the devices,
    so each device runs its share of the batch's rows; ``array`` itself on another backend,
    without a distribution, or when the batch does not divide among the devices (the
    distribution's own refusal: a batch of 3 rows on 2 devices runs whole)."""
    if keras.backend.backend() != "jax":
        return array
    distribution = keras.distribution.distribution()
    if distribution is None or np.ndim(array) == 0:
        return array
    try:
        return keras.distribution.distribute_tensor(array, distribution.get_data_layout(np.shape(array)))
    except ValueError:
        return array


def preprocess(model: Any, texts: Sequence[str]) -> list[dict[str, np.ndarray]] | None:
    """``texts`` tokenised by ``model.preprocessor`` as samples (``input_ids`` and an
    all-ones ``attention_mask`` over each text's tokens); None for a model without one."""
    pre = getattr(model, "preprocessor", None)
    if pre is None:
        return None
    generate = getattr(pre, "generate_preprocess", None)
    if callable(generate):
        out = generate(list(texts))
    else:
        out = keras.utils.unpack_x_y_sample_weight(pre(list(texts)))[0]
    if not isinstance(out, Mapping) or "token_ids" not in out:
        raise TypeError(f"the model's preprocessor ({type(pre).__name__}) gave {type(out).__name__}, not "
                        "{'token_ids': ..., 'padding_mask': ...}: tokenise the text first and give "
                        "{'token_ids': [...], 'padding_mask': [...]} samples")
    ids = np.asarray(to_numpy(out["token_ids"]))
    mask = np.asarray(to_numpy(out["padding_mask"])) if "padding_mask" in out else np.ones(ids.shape, bool)
    samples = []
    for row_ids, row_mask in zip(ids.reshape(len(texts), -1), mask.reshape(len(texts), -1), strict=True):
        kept = np.flatnonzero(row_mask)
        length = int(kept[-1]) + 1 if kept.size else 0
        samples.append({"input_ids": row_ids[:length], "attention_mask": row_mask[:length].astype(np.int32)})
    return samples
