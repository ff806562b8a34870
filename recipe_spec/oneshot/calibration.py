"""Calibration data: which samples, in which order, in which batches (llm-compressor 0.14's
rules, ``datasets/utils.py``).

- ``dataset``: an iterable of input dicts (``input_ids`` and optionally ``attention_mask``,
  tensors or lists, or the model's own input names such as keras-hub's
  ``token_ids``/``padding_mask``), batched dicts, arrays, a ``tf.data.Dataset``, text for a
  model with a preprocessor (:mod:`.calibration_inputs`), a tokenised ``datasets.Dataset``
  (read by index; ``datasets`` is never imported here), or a DataLoader (its batches are used
  as they come, up to ``num_calibration_samples`` samples).
- The first ``num_calibration_samples`` samples are taken (after a seeded shuffle when
  ``shuffle_calibration_samples``); without shuffling they are fed longest first
  (``LengthAwareSampler``: ``torch.argsort(lengths, descending=True)``), with it in the
  shuffled order.
- Batches of ``batch_size`` consecutive samples, cut to the batch's shortest sample
  (``DataCollatorWithTruncation``).

>>> order_samples([3, 5, 4], shuffle=False, seed=42, longest_first=lambda l: sorted(range(len(l)), key=lambda i: -l[i]))
[1, 2, 0]
"""

from __future__ import annotations

import hashlib
import logging
import numbers
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .calibration_inputs import canonical_batch, canonical_samples, to_numpy

__all__ = ["Calibration", "bounded", "order_samples", "is_dataloader", "read_samples", "prepare"]


@dataclass
class Calibration:
    """The batches to run (host arrays) and where they came from: ``order`` holds the indices
    of the samples fed, in the order fed (None for a DataLoader's own batches)."""

    batches: list[Any]
    order: list[int] | None
    batch_rows: list[list[int]] = field(default_factory=list)
    #: A digest of the token ids fed, in order: over several processes, equal digests mean
    #: every process was given the same data (then shared out), different ones that each was
    #: given its own part (llm-compressor's ``get_rank_partition``; then used as it is).
    fingerprint: str = ""

    @property
    def num_samples(self) -> int:
        return sum(len(rows) for rows in self.batch_rows)


def is_dataloader(dataset: Any) -> bool:
    """A DataLoader (told by its attributes: ``batch_size``, ``dataset`` and ``sampler``)."""
    return all(hasattr(dataset, a) for a in ("batch_size", "dataset", "sampler"))


def read_samples(dataset: Any, host: Any = None) -> list[Mapping[str, Any]]:
    """Every sample of ``dataset`` as a dict with ``input_ids`` (and ``attention_mask`` where
    given): dicts under llm-compressor's names or the model's own (keras-hub's
    ``token_ids``/``padding_mask``), batched dicts split into rows, arrays and framework
    tensors, ``(x, y)`` tuples, a ``tf.data.Dataset``, a datasets-like table, and text through
    ``host``'s optional ``preprocess`` (:mod:`.calibration_inputs`). ``host``'s optional
    ``input_keys()`` names the model's inputs."""
    keys = getattr(host, "input_keys", None)
    return list(canonical_samples(dataset, input_keys=keys() if callable(keys) else None,
                                  preprocess=getattr(host, "preprocess", None)))


def bounded(dataset: Any, limit: int) -> Any:
    """``dataset`` itself when it has a length (a list, a ``datasets.Dataset``, an array, a
    DataLoader); otherwise (a generator, an iterator, a streamed dataset, a ``tf.data.Dataset``
    of unknown length) its first ``limit`` elements as a list, so that an endless source is
    not read forever: ``shuffle_calibration_samples`` then orders those."""
    if dataset is None or is_dataloader(dataset) or isinstance(dataset, (str, bytes, Mapping)) \
            or not hasattr(dataset, "__iter__"):
        return dataset
    try:
        len(dataset)
        return dataset
    except (TypeError, ValueError, NotImplementedError):
        pass
    import itertools

    taken = list(itertools.islice(iter(dataset), limit))
    logging.getLogger("recipe_spec.oneshot").info(
        "calibration: the dataset has no length; its first %d element(s) are read", len(taken))
    return taken


def order_samples(lengths: Sequence[int], *, shuffle: bool, seed: int,
                  longest_first: Callable[[Sequence[int]], list[int]]) -> list[int]:
    """The indices of the samples fed, in order: shuffled with ``random.Random(seed)``, or
    longest first by ``longest_first`` (the framework's descending argsort)."""
    if shuffle:
        order = list(range(len(lengths)))
        random.Random(seed).shuffle(order)
        return order
    return [int(i) for i in longest_first(list(lengths))]


def prepare(host: Any, dataset: Any, *, num_calibration_samples: int, shuffle: bool,
            batch_size: int, seed: int = 42) -> Calibration:
    """The calibration batches for ``host`` (:class:`~.host.CalibrationHost`)."""
    if isinstance(num_calibration_samples, bool) or not isinstance(num_calibration_samples, numbers.Integral) \
            or isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
        raise TypeError(f"num_calibration_samples ({num_calibration_samples!r}) and batch_size ({batch_size!r}) "
                        "must be ints")
    num_calibration_samples, batch_size = int(num_calibration_samples), int(batch_size)
    if num_calibration_samples < 1 or batch_size < 1:
        raise ValueError(f"num_calibration_samples ({num_calibration_samples}) and batch_size "
                         f"({batch_size}) must be at least 1")
    from .data_checks import check_batches, check_samples

    if is_dataloader(dataset):
        if batch_size not in (1, getattr(dataset, "batch_size", None)):
            raise ValueError(f"batch_size={batch_size} with a DataLoader: the DataLoader makes its own batches "
                             f"(its batch_size {getattr(dataset, 'batch_size', None)}); leave batch_size out, or "
                             "pass the dataset itself")
        logging.getLogger("recipe_spec.oneshot").info(
            "calibration: the DataLoader's batches are fed as it gives them (its sampler's order); "
            "shuffle_calibration_samples and seed order a dataset, not a DataLoader")
        loaded = _from_loader(dataset, num_calibration_samples)
        check_batches(host, loaded.batches)
        return loaded
    samples = read_samples(dataset, host)
    if not samples:
        raise ValueError("the calibration dataset is empty")
    check_samples(host, samples)
    if shuffle:
        picked = order_samples(range(len(samples)), shuffle=True, seed=seed,  # type: ignore[arg-type]
                               longest_first=host.order_longest_first)[:num_calibration_samples]
        order = picked
    else:
        chosen = samples[:num_calibration_samples]
        order = order_samples(host.lengths(chosen), shuffle=False, seed=seed,
                              longest_first=host.order_longest_first)
    lengths = host.lengths(samples)
    batches, rows = [], []
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        batches.append(host.collate([samples[i] for i in idx], min(lengths[i] for i in idx)))
        rows.append(idx)
    return Calibration(batches, order, rows, fingerprint([samples[i]["input_ids"] for i in order]))


def fingerprint(ids: Iterable[Any]) -> str:
    """A digest of a sequence of token-id rows (lists or arrays)."""
    import numpy as np  # calibration only: ``recipe-spec validate`` runs without NumPy

    digest = hashlib.sha256()
    for row in ids:
        values = np.asarray(to_numpy(row), dtype=np.int64)
        digest.update(str(values.shape).encode())
        digest.update(values.tobytes())
    return digest.hexdigest()


def _from_loader(loader: Iterable[Any], limit: int) -> Calibration:
    batches, rows, seen = [], [], 0
    for i, batch in enumerate(loader):
        if seen >= limit:
            break
        batch = canonical_batch(batch)
        if not isinstance(batch, Mapping) or "input_ids" not in batch:
            raise TypeError(f"calibration batch {i} of the DataLoader is {type(batch).__name__}"
                            f"{'' if not isinstance(batch, Mapping) else ' without input_ids'}, not a dict of "
                            "arrays with input_ids; give a DataLoader of {'input_ids': ..., 'attention_mask': ...} "
                            "batches (a collate_fn that returns a dict)")
        ids = batch["input_ids"]
        size = len(ids)
        batches.append(batch)
        rows.append(list(range(seen, seen + size)))
        seen += size
    if not batches:
        raise ValueError("the calibration DataLoader gave no batch")
    return Calibration(batches, None, rows, fingerprint(b["input_ids"] for b in batches))
