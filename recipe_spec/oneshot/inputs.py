"""Calibration data as llm-compressor 0.14 reads it (``datasets/utils.py``,
``transformers/data/base.py``: ``TextGenerationDataset``), before :mod:`.calibration` orders
and batches it. The tokenizer is an object called here (nothing is imported).

- Tokenised data (a ``datasets.Dataset`` with an ``input_ids`` column, or dicts holding
  ``input_ids`` or another of the processor's ``model_input_names``) is used as it is; with
  ``max_seq_length`` each sequence is cut to it (llm-compressor cuts each batch to
  ``min(shortest sample, max_seq_length)``: the same tokens). A DataLoader is used as it is.
- Text (a list of strings, a list of dicts or a ``datasets.Dataset`` holding ``text_column``,
  a ``DatasetDict``'s ``train`` split) is tokenised as ``TextGenerationDataset`` does:
  ``preprocessing_func`` on each row; ``text_column`` renamed ``text``; the columns the
  processor's ``__call__`` does not take dropped; ``processor(text=..., padding=...,
  max_length=..., truncation=True)`` (special tokens added: the tokenizer's default), with
  ``max_length = min(max_seq_length, model_max_length)`` (``model_max_length`` when
  ``max_seq_length`` is None) and ``padding = "max_length"`` when ``pad_to_max_length`` and not
  ``concatenate_data``; a tokenizer without a pad token gets its eos token as pad token (as
  there); the tokenizer's truncation and padding state is restored afterwards (llm-compressor
  #1418). ``concatenate_data``: each run of 1000 rows (``Dataset.map``'s batch) is joined and
  cut into ``max_length`` chunks, the remainder dropped. llm-compressor adds ``labels`` too;
  they change no calibration statistic and are left out.
- A dataset name (``"open_platypus"``, a hub id, a local file) is loaded first by
  :mod:`.named_data`, its template applied; what it returns is text, tokenised as above.
"""

from __future__ import annotations

import contextlib
import inspect
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .calibration import is_dataloader

__all__ = ["TextOptions", "calibration_input", "is_text", "tokenize_rows", "group_rows"]

#: The sequence keys llm-compressor's collator cuts.
_SEQUENCE_KEYS = ("input_ids", "labels", "attention_mask", "loss_mask")
#: The rows ``Dataset.map(batched=True)`` hands over at once (``concatenate_data``'s runs).
_MAP_BATCH = 1000
_PROMPT = "prompt"


class TextOptions:
    """llm-compressor's dataset keywords that shape tokenisation (see the module docstring)."""

    def __init__(self, *, max_seq_length: int | None = None, pad_to_max_length: bool = True,
                 text_column: str = "text", concatenate_data: bool = False,
                 preprocessing_func: Callable[[Any], Any] | None = None,
                 preprocessing_num_workers: int | None = None) -> None:
        for name, value in (("max_seq_length", max_seq_length), ("preprocessing_num_workers", preprocessing_num_workers)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
                raise (ValueError if isinstance(value, numbers.Integral) and not isinstance(value, bool) else TypeError)(
                    f"{name} must be a positive int or None, not {type(value).__name__} {value!r}")
        for name, value in (("pad_to_max_length", pad_to_max_length), ("concatenate_data", concatenate_data)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, not {type(value).__name__} {value!r}")
        if not isinstance(text_column, str) or not text_column:
            raise TypeError(f"text_column must be the name of the dataset's text column, not "
                            f"{type(text_column).__name__} {text_column!r}")
        if preprocessing_func is not None and not callable(preprocessing_func):
            raise ValueError(f"preprocessing_func={preprocessing_func!r}: recipe_spec.oneshot takes a function "
                             "(import it and pass it), not a 'file.py:func' string")
        self.max_seq_length = None if max_seq_length is None else int(max_seq_length)
        self.pad_to_max_length = pad_to_max_length
        self.text_column = text_column
        self.concatenate_data = concatenate_data
        self.preprocessing_func = preprocessing_func
        self.preprocessing_num_workers = preprocessing_num_workers


def _columns(dataset: Any) -> list[str] | None:
    names = getattr(dataset, "column_names", None)
    if isinstance(names, Mapping):  # a DatasetDict: its splits' columns
        return [c for cols in names.values() for c in cols]
    return list(names) if names is not None else None


def _input_names(processor: Any) -> list[str]:
    return list(getattr(processor, "model_input_names", None) or ["input_ids"])


def is_text(dataset: Any, processor: Any = None) -> bool:
    """Whether ``dataset`` holds text to tokenise (no column or key of the processor's inputs)."""
    if dataset is None or is_dataloader(dataset) or isinstance(dataset, (str, bytes)):
        return False
    names = _input_names(processor) + ["input_ids"]
    columns = _columns(dataset)
    if columns is not None:
        return not any(c in names for c in columns)
    if isinstance(dataset, Mapping) or not isinstance(dataset, Sequence) or not dataset:
        return False
    first = dataset[0]
    # a dict of arrays under a model's own input names (keras-hub's token_ids) is not text
    return isinstance(first, str) or (isinstance(first, Mapping) and not any(k in first for k in names)
                                      and any(isinstance(v, str) for v in first.values()))


def calibration_input(dataset: Any, processor: Any, options: TextOptions) -> Any:
    """``dataset`` ready for :func:`.calibration.prepare` (see the module docstring)."""
    if dataset is None or is_dataloader(dataset):
        return dataset
    if isinstance(dataset, (str, bytes)):
        raise ValueError(
            f"dataset={dataset!r}: calibration_input reads loaded data; a dataset name or path is loaded first "
            "(recipe_spec.oneshot.named_data.load_named, as oneshot(dataset=...) does)")
    if _columns(dataset) is not None and isinstance(getattr(dataset, "column_names", None), Mapping):
        if "train" not in dataset:
            raise ValueError(f"dataset is a DatasetDict without a 'train' split (splits: {sorted(dataset)}): "
                             "pass the split to calibrate on, e.g. dataset=ds['validation']")
        dataset = dataset["train"]  # llm-compressor's fallback when no split is named
    if not is_text(dataset, processor):
        return _cut(dataset, options.max_seq_length) if options.max_seq_length is not None else dataset
    if processor is None:
        raise ValueError("dataset holds text, and no tokenizer: pass tokenizer= (or processor=), or give model= as "
                         "a checkpoint folder holding one")
    tokenizer = getattr(processor, "tokenizer", processor)
    if not getattr(tokenizer, "pad_token", None):
        tokenizer.pad_token = tokenizer.eos_token
    with _preserved(tokenizer):
        if hasattr(dataset, "map") and _columns(dataset) is not None:
            return _tokenize_table(dataset, processor, tokenizer, options)
        if options.preprocessing_num_workers not in (None, 0, 1):
            raise ValueError(f"preprocessing_num_workers={options.preprocessing_num_workers}: a list is tokenised in "
                             "this process; pass a datasets.Dataset to tokenise in several")
        rows = [{"text": r} if isinstance(r, str) else dict(r) for r in dataset]
        out = tokenize_rows(rows, processor, tokenizer, options)
        return group_rows(out, _max_length(tokenizer, options)) if options.concatenate_data else out


def _cut(dataset: Any, length: int) -> list[dict[str, Any]]:
    from .calibration import read_samples

    return [{k: (v[:length] if k in _SEQUENCE_KEYS else v) for k, v in s.items()} for s in read_samples(dataset)]


def _max_length(tokenizer: Any, options: TextOptions) -> int:
    model_max = int(getattr(tokenizer, "model_max_length", 0) or 0) or None
    if options.max_seq_length is None:
        if model_max is None or model_max > 10**7:
            raise ValueError("max_seq_length is None and the tokenizer sets no model_max_length: pass "
                             "max_seq_length= (llm-compressor pads and cuts text to it)")
        return model_max
    return min(int(options.max_seq_length), model_max) if model_max else int(options.max_seq_length)


def _padding(options: TextOptions) -> Any:
    return False if options.concatenate_data else ("max_length" if options.pad_to_max_length else False)


def _call_args(processor: Any) -> set[str]:
    try:
        params = inspect.signature(processor.__call__).parameters
    except (TypeError, ValueError):
        return {"text"}
    return {k for k, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _row_function(processor: Any, tokenizer: Any, options: TextOptions) -> Callable[[Mapping[str, Any]], dict]:
    keep = _call_args(processor)
    length = _max_length(tokenizer, options)
    padding = _padding(options)
    column = options.text_column

    def tokenize(row: Mapping[str, Any]) -> dict[str, Any]:
        row = dict(row)
        if options.preprocessing_func is not None:
            row = dict(options.preprocessing_func(row))
        if column in row and "text" not in row:
            row["text"] = row.pop(column)
        if "text" not in row:
            raise ValueError(f"a calibration row has no {column!r} column (text_column={column!r}); its keys: "
                             f"{sorted(row)}")
        row = {k: v for k, v in row.items() if k in keep}
        row.pop(_PROMPT, None)
        encoded = processor(**row, padding=padding, max_length=length, truncation=True)
        return {k: (list(v) if not isinstance(v, list) else v) for k, v in dict(encoded).items()}

    return tokenize


def tokenize_rows(rows: Sequence[Mapping[str, Any]], processor: Any, tokenizer: Any,
                  options: TextOptions) -> list[dict[str, Any]]:
    """Each row tokenised (see the module docstring), in this process."""
    tokenize = _row_function(processor, tokenizer, options)
    return [tokenize(r) for r in rows]


def group_rows(rows: Sequence[Mapping[str, Any]], length: int) -> list[dict[str, Any]]:
    """``concatenate_data``: each run of 1000 rows joined and cut into ``length`` chunks (the
    remainder of each run dropped), as llm-compressor's ``group_text`` under ``Dataset.map``."""
    out: list[dict[str, Any]] = []
    for start in range(0, len(rows), _MAP_BATCH):
        run = rows[start:start + _MAP_BATCH]
        joined = {k: [t for r in run for t in r[k]] for k in run[0]}
        total = (len(next(iter(joined.values()))) // length) * length
        out += [{k: v[i:i + length] for k, v in joined.items()} for i in range(0, total, length)]
    return out


def _tokenize_table(dataset: Any, processor: Any, tokenizer: Any, options: TextOptions) -> Any:
    """A ``datasets.Dataset`` tokenised with its own ``map`` (``num_proc`` =
    ``preprocessing_num_workers``), as llm-compressor does."""
    tokenize = _row_function(processor, tokenizer, options)
    workers = options.preprocessing_num_workers
    out = dataset.map(tokenize, batched=False, keep_in_memory=True, remove_columns=_columns(dataset),
                      num_proc=workers, desc="Tokenizing")
    if options.concatenate_data:
        length = _max_length(tokenizer, options)
        out = out.map(lambda batch: _group_batch(batch, length), batched=True, num_proc=workers,
                      desc="Concatenating data")
    return out


def _group_batch(batch: Mapping[str, list[Any]], length: int) -> dict[str, list[Any]]:
    joined = {k: [t for row in v for t in row] for k, v in batch.items()}
    total = (len(next(iter(joined.values()))) // length) * length
    return {k: [v[i:i + length] for i in range(0, total, length)] for k, v in joined.items()}


@contextlib.contextmanager
def _preserved(tokenizer: Any) -> Iterator[None]:
    """The fast tokenizer's truncation and padding state, restored after tokenising."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        yield
        return
    truncation, padding = backend.truncation, backend.padding
    try:
        yield
    finally:
        if truncation is None:
            backend.no_truncation()
        else:
            backend.enable_truncation(**truncation)
        if padding is None:
            backend.no_padding()
        else:
            backend.enable_padding(**padding)
