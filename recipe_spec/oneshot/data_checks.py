"""The calibration data checked before a one-shot run touches the model, as the command line
checks its file (:mod:`.preflight` runs it with the other checks; :mod:`.calibration` calls it
on the samples before they are batched, so nothing is cut or stacked unchecked).

Every sample: token ids of an integer type, none negative, each below the model's vocabulary
size; no empty sample; an ``attention_mask`` of the ids' shape holding 0 and 1; no sequence
longer than the model's positions; no key that is not an array (a ``text`` column left in).
A DataLoader's batches: dicts of ``[batch, length]`` arrays, checked the same way. The host
describes each array (``describe`` -> :class:`ArrayFacts`) and the model's limits
(``input_limits``); the rules live here.

>>> class Host:
...     def input_limits(self): return 10, 8
...     def describe(self, v): return ArrayFacts((len(v),), "int", "int64", min(v), max(v))
>>> check_samples(Host(), [{"input_ids": [1, 2, 3]}])
>>> check_samples(Host(), [{"input_ids": [1, 12]}])
Traceback (most recent call last):
...
ValueError: calibration sample 0: token id 12 is outside the model's vocabulary of 10 tokens (ids 0 to 9); tokenise with the model's own tokenizer
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ArrayFacts", "check_samples", "check_batches"]

_MASK = "attention_mask"


@dataclass(frozen=True)
class ArrayFacts:
    """What the host read off one array of a sample: its ``shape``, its ``kind`` (``int``,
    ``float``, ``bool`` or ``other``), its ``dtype`` name, and the smallest and largest value
    (None when empty or not numeric)."""

    shape: tuple[int, ...]
    kind: str
    dtype: str
    low: float | None = None
    high: float | None = None


def _facts(host: Any, where: str, key: str, value: Any) -> ArrayFacts:
    facts = host.describe(value)
    if facts is None and key in ("input_ids", _MASK):
        raise TypeError(f"{where}: {key} is {type(value).__name__}{' ' + repr(value)[:40] if isinstance(value, str) else ''}, "
                        "not one sequence of integers (a list, NumPy array or tensor of one length; give one dict "
                        "per sequence)")
    if facts is None:
        raise TypeError(f"{where}: {key!r} is {type(value).__name__}, not an array of numbers; give the model's "
                        "inputs only (input_ids, attention_mask): drop other columns, e.g. "
                        "dataset.remove_columns([...])")
    return facts


def _check_one(host: Any, where: str, sample: Mapping[str, Any], limits: tuple[int | None, int | None],
               batched: bool) -> None:
    vocab, positions = limits
    if "input_ids" not in sample:
        raise TypeError(f"{where} has no 'input_ids' (it has {', '.join(map(repr, sample)) or 'nothing'}); "
                        "give tokenised samples: {'input_ids': [...], 'attention_mask': [...]}")
    ids = _facts(host, where, "input_ids", sample["input_ids"])
    rows_ok = len(ids.shape) == 1 or (len(ids.shape) == 2 and (batched or ids.shape[0] == 1))
    if not rows_ok:
        raise ValueError(f"{where}: input_ids has shape {list(ids.shape)}; a sample is one sequence "
                         "([length] or [1, length]): give one dict per sequence")
    length = ids.shape[-1]
    if length == 0 or (len(ids.shape) == 2 and ids.shape[0] == 0):
        raise ValueError(f"{where} is empty (no token ids): leave it out of the dataset")
    if ids.kind != "int":
        raise TypeError(f"{where}: input_ids are {ids.dtype} values; token ids are integers "
                        "(tokenise the text, or cast: ids.long() / np.asarray(ids, dtype=np.int64))")
    if ids.low is not None and ids.low < 0:
        raise ValueError(f"{where}: token id {int(ids.low)} is negative; ids run from 0 to the vocabulary size - 1")
    if vocab is not None and ids.high is not None and ids.high >= vocab:
        raise ValueError(f"{where}: token id {int(ids.high)} is outside the model's vocabulary of {vocab} "
                         "tokens (ids 0 to {last}); tokenise with the model's own tokenizer".replace(
                             "{last}", str(vocab - 1)))
    if positions is not None and length > positions:
        raise ValueError(f"{where} has {length} tokens, more than the model's {positions} positions "
                         f"(max_position_embeddings); cut the samples to at most {positions} tokens")
    for key, value in sample.items():
        if key == "input_ids":
            continue
        facts = _facts(host, where, key, value)
        if facts.shape != ids.shape and not (len(facts.shape) == 1 and facts.shape[-1:] == ids.shape[-1:]
                                             and len(ids.shape) == 2 and ids.shape[0] == 1):
            raise ValueError(f"{where}: {key} has shape {list(facts.shape)} and input_ids {list(ids.shape)}; "
                             f"give {key} one value per token")
        if key == _MASK and (facts.kind not in ("int", "bool") or (facts.low is not None and facts.low < 0)
                             or (facts.high is not None and facts.high > 1)):
            raise ValueError(f"{where}: attention_mask holds values other than 0 and 1 ({facts.dtype}, "
                             f"from {facts.low} to {facts.high}); 1 marks a token to attend to, 0 padding")


def check_samples(host: Any, samples: Sequence[Mapping[str, Any]]) -> None:
    """Refuse, naming the sample, what :func:`_check_one` finds in any of ``samples``."""
    limits = host.input_limits()
    for i, sample in enumerate(samples):
        _check_one(host, f"calibration sample {i}", sample, limits, batched=False)


def check_batches(host: Any, batches: Sequence[Any]) -> None:
    """The same for a DataLoader's batches (each a dict of ``[batch, length]`` arrays)."""
    limits = host.input_limits()
    for i, batch in enumerate(batches):
        if not isinstance(batch, Mapping):
            raise TypeError(f"calibration batch {i} of the DataLoader is {type(batch).__name__}, not a dict of "
                            "arrays; give a DataLoader of {'input_ids': ..., 'attention_mask': ...} batches "
                            "(a collate_fn that returns a dict)")
        _check_one(host, f"calibration batch {i}", batch, limits, batched=True)
