"""Calibration data in the forms a model's own training loop takes, made into the samples the
one-shot pipeline uses: one dict per sequence with ``input_ids`` and optionally
``attention_mask`` (llm-compressor's names), plus any other input the model takes by name.

What :func:`canonical_samples` reads, element by element of ``dataset``:

- **dicts** under llm-compressor's names, or under the model's own input names: keras-hub's
  ``token_ids``/``padding_mask`` (always known), or those of any functional model, given by the
  host's ``input_keys()`` (``{model input name: sample key}``), e.g. ``{"ids": "input_ids"}``
  for a model whose only input is named ``ids``;
- **batched dicts**: a dict of arrays with a leading batch axis (what ``model.fit`` takes),
  as one element or as the whole dataset; each row becomes one sample;
- **arrays**: NumPy arrays, lists of ints and TensorFlow, JAX or torch tensors (``input_ids``;
  a 2-D array is a batch of rows), as elements or as the whole dataset;
- ``(x, y)`` or ``(x, y, sample_weight)`` tuples: ``x`` is read, ``y`` is left out;
- a **tf.data.Dataset** of any of these, batched or not (read with ``as_numpy_iterator``);
- **text** (``str``, ``bytes``, arrays of strings, a table's ``text`` column): tokenised by the
  host's ``preprocess(texts)`` (the Keras host: the model's keras-hub ``preprocessor``); a host
  without one refuses text by sample.

Framework tensors become NumPy arrays (lists and NumPy arrays stay as given); nothing here
imports a framework, and NumPy only when samples are read (a plain install has none): tensors are told by their methods (``numpy``, ``detach``, ``__array__``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["ALIASES", "canonical_samples", "canonical_batch", "to_numpy", "is_text"]

#: Sample keys read as llm-compressor's (keras-hub's input names).
ALIASES = {"token_ids": "input_ids", "padding_mask": "attention_mask"}
_CANONICAL = ("input_ids", "attention_mask")
_GIVE = ("give each sample as {'input_ids': [...], 'attention_mask': [...]} (or under the model's "
         "input names, e.g. keras-hub's {'token_ids': ..., 'padding_mask': ...})")


def to_numpy(value: Any) -> Any:
    """``value`` as a NumPy array when it is a framework tensor (torch: detached, on the CPU);
    lists, NumPy arrays and scalars are returned as they are."""
    import numpy as np  # calibration only: ``recipe-spec validate`` runs without NumPy

    if isinstance(value, (np.ndarray, list, tuple, int, float, str, bytes)) or value is None:
        return value
    try:
        if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch
            return value.detach().cpu().numpy()
        numpy = getattr(value, "numpy", None)
        if callable(numpy):  # TensorFlow eager tensors
            return np.asarray(numpy())
        if hasattr(value, "__array__") or hasattr(value, "shape"):  # JAX arrays and other array-likes
            return np.asarray(value)
    except (TypeError, RuntimeError, ValueError):  # a dtype NumPy lacks (torch bfloat16): left to the host
        return value
    return value


def is_text(value: Any) -> bool:
    """Whether ``value`` is a string, or an array (or list) of strings."""
    import numpy as np

    if isinstance(value, (str, bytes, np.str_, np.bytes_)):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "US" or (value.dtype.kind == "O" and value.size > 0
                                            and isinstance(value.flat[0], (str, bytes)))
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, (str, bytes)) for v in value)


def _texts(value: Any) -> list[str]:
    import numpy as np

    items = [value] if isinstance(value, (str, bytes, np.str_, np.bytes_)) else list(np.asarray(value, dtype=object).reshape(-1))
    return [v.decode("utf-8") if isinstance(v, (bytes, np.bytes_)) else str(v) for v in items]


def _ndim(value: Any) -> int:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return len(shape)
    if isinstance(value, (list, tuple)):
        return 1 + (_ndim(value[0]) if value else 0)
    return 0


def _rename(sample: Mapping[str, Any], aliases: Mapping[str, str], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in sample.items():
        name = key if key in _CANONICAL else aliases.get(str(key), key)
        if name in out:
            raise ValueError(f"{where} has both {name!r} and {key!r} (the same input under two names): give one")
        out[name] = to_numpy(value)
    if "input_ids" not in out:
        known = sorted({"input_ids", *(k for k, v in aliases.items() if v == "input_ids")})
        raise TypeError(f"{where} is a dict with {', '.join(map(repr, sample)) or 'no key'}, none of them the "
                        f"token ids ({' or '.join(map(repr, known))}): {_GIVE}")
    return out


def _rows(sample: dict[str, Any], where: str, given: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The samples of a dict: itself (1-D token ids) or one per row (a leading batch axis)."""
    ids = sample["input_ids"]
    rank = _ndim(ids)
    if rank == 1:
        return [sample]
    if rank != 2:
        raise ValueError(f"{where} has token ids of {rank} dimensions ({getattr(ids, 'shape', '')}); "
                         "a sample is one sequence (1-D) or a batch of them (2-D: batch, tokens)")
    size = len(ids)
    for key, value in sample.items():
        if _ndim(value) == 0 or len(value) != size:
            raise ValueError(f"{where} is a batch of {size} rows (its token ids), but {(given or {}).get(key, key)!r} has "
                             f"{len(value) if _ndim(value) else 'no'} leading rows: give every input "
                             "with the same leading batch axis")
    return [{key: value[r] for key, value in sample.items()} for r in range(size)]


def _unpack(element: Any) -> Any:
    """``x`` of an ``(x, y)`` or ``(x, y, sample_weight)`` tuple, else the element itself."""
    if isinstance(element, tuple) and len(element) in (2, 3):
        first = element[0]
        if isinstance(first, Mapping) or is_text(first) or _ndim(first) >= 1:
            return first
    return element


def canonical_batch(batch: Any, aliases: Mapping[str, str] = ALIASES) -> Any:
    """A DataLoader's batch with its keys under llm-compressor's names (``token_ids`` read as
    ``input_ids``...); other batches are returned as they are."""
    if not isinstance(batch, Mapping) or "input_ids" in batch:
        return batch
    return {(aliases.get(str(k), k) if k not in _CANONICAL else k): v for k, v in batch.items()}


def canonical_samples(dataset: Any, *, input_keys: Mapping[str, str] | None = None,
                      preprocess: Callable[[Sequence[str]], list[dict[str, Any]]] | None = None
                      ) -> list[dict[str, Any]]:
    """Every sample of ``dataset`` (see the module docstring) as a dict with ``input_ids``.

    ``input_keys``: the model's input names and the sample keys they read (the host's
    ``input_keys()``), beside :data:`ALIASES`; ``preprocess``: the host's tokeniser of text,
    giving one sample per text, None when it has none. Raises ``TypeError``/``ValueError``
    naming the sample, what it is and what to give instead."""
    aliases = {**ALIASES, **{k: v for k, v in (input_keys or {}).items() if k not in _CANONICAL}}
    items: list[tuple[str, Any]] = []  # ("sample", dict) or ("text", str), in order
    for where, element in _elements(dataset):
        element = _unpack(element)
        if isinstance(element, Mapping):
            given = {(aliases.get(str(k), k) if k not in _CANONICAL else k): k for k in element}
            items += [("sample", s) for s in _rows(_rename(element, aliases, where), where, given)]
        elif is_text(element):
            items += [("text", t) for t in _texts(element)]
        else:
            value = to_numpy(element)
            rank = _ndim(value)
            if rank not in (1, 2) or (isinstance(value, (list, tuple)) and not _numbers(value)):
                raise TypeError(f"{where} is {_describe(element)}, not a calibration sample: {_GIVE}, "
                                "an array of token ids, or text for a model with a preprocessor")
            items += [("sample", s) for s in _rows({"input_ids": value}, where)]
    texts = [t for kind, t in items if kind == "text"]
    if not texts:
        return [s for _, s in items]
    done = preprocess(texts) if preprocess is not None else None
    if done is None:
        first = next(i for i, (kind, _) in enumerate(items) if kind == "text")
        raise TypeError(f"calibration sample {first} is text ({str(items[first][1])[:40]!r}) and the model has no "
                        "preprocessor to tokenise it: tokenise the text first and "
                        f"{_GIVE}, or give a keras-hub model with its preprocessor")
    if len(done) != len(texts):
        raise ValueError(f"the model's preprocessor gave {len(done)} samples for {len(texts)} texts")
    tokenised = iter(done)
    return [next(tokenised) if kind == "text" else s for kind, s in items]


def _numbers(value: Sequence[Any]) -> bool:
    import numpy as np

    flat = value[0] if value and isinstance(value[0], (list, tuple)) else value
    return all(isinstance(v, (int, np.integer, bool, np.bool_)) for v in flat)


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f"{type(value).__name__} of shape {tuple(shape)}" if shape is not None else type(value).__name__


def _elements(dataset: Any) -> Any:
    """``(where, element)`` for each element of ``dataset``."""
    if isinstance(dataset, Mapping):  # one batched dict: the whole dataset
        if _ndim(next(iter(dataset.values()), None)) < 2 and not is_text(next(iter(dataset.values()), None)):
            raise TypeError("dataset is one dict of 1-D values (one sample), not a dataset: wrap it in a list, "
                            "or give a batch with a leading batch axis (each input of shape [batch, tokens])")
        yield "the calibration batch (dataset)", dataset
        return
    if hasattr(dataset, "element_spec") and callable(getattr(dataset, "as_numpy_iterator", None)):  # tf.data
        for i, element in enumerate(dataset.as_numpy_iterator()):
            yield f"calibration element {i} (of the tf.data.Dataset)", element
        return
    if is_text(dataset) and not isinstance(dataset, (str, bytes)):
        yield "the calibration text", dataset
        return
    if isinstance(dataset, (str, bytes)):
        raise TypeError("dataset is one string, not a dataset: give a list of texts")
    if not isinstance(dataset, (list, tuple)) and hasattr(dataset, "shape") and not hasattr(dataset, "column_names"):
        array = to_numpy(dataset)
        if _ndim(array) != 2:
            raise TypeError(f"dataset is {_describe(dataset)}: an array of token ids is 2-D (samples, tokens)")
        for i, row in enumerate(array):
            yield f"calibration sample {i}", row
        return
    names = getattr(dataset, "column_names", None)
    if names is not None and hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
        for i in range(len(dataset)):
            row = dict(dataset[i])
            if "text" in row and not ({"input_ids", "token_ids"} & set(row)):
                yield f"calibration sample {i}", row["text"]
            else:
                yield f"calibration sample {i}", row
        return
    try:
        iterator = iter(dataset)
    except TypeError:
        raise TypeError(f"dataset is {type(dataset).__name__}, which is not iterable: give a list of samples, "
                        "a batched dict, a tf.data.Dataset, a tokenised datasets.Dataset or a DataLoader") from None
    for i, element in enumerate(iterator):
        yield f"calibration sample {i}", element
