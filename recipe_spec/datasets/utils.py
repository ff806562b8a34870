"""``llmcompressor.datasets.utils``'s helper for scripts run under ``torchrun``.

llm-compressor's distributed examples load each process's part of the calibration split::

    from recipe_spec.datasets.utils import get_rank_partition

    ds = load_dataset(DATASET_ID, split=get_rank_partition("train_sft", 512))

and pass it to :func:`recipe_spec.oneshot`, which then calibrates each process on its own part
(it shares the data out itself only when every process holds the same samples).

>>> get_rank_partition("train", 10, rank=1, world_size=3)
'train[3:6]'
"""

from __future__ import annotations

import math
import os

__all__ = ["get_rank_partition"]


def get_rank_partition(split: str, num_samples: int, *, rank: int | None = None,
                       world_size: int | None = None) -> str:
    """The ``datasets`` split string of this process's part of the first ``num_samples``
    samples of ``split``: ``f"{split}[{start}:{end}]"`` with ``start = floor(S·r/W)`` and
    ``end = floor(S·(r+1)/W)`` (llm-compressor's ``_get_partition_start_end``), so the parts
    are disjoint and together hold every sample. The process's rank and count come from
    ``torchrun``'s ``RANK`` and ``WORLD_SIZE`` (llm-compressor reads the initialised process
    group's, and gives every process the whole split before the group exists; under torchrun
    the two agree); ``rank``/``world_size`` override them (a process group started otherwise).

    Raises ValueError for a split that already has brackets or a count below 1."""
    if "[" in split:
        raise ValueError(f"split {split!r} already selects rows; give the split's name (e.g. 'train') and let "
                         "get_rank_partition add this process's rows")
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    env_rank, env_world = _process()
    rank = env_rank if rank is None else rank
    world_size = env_world if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not one of the {world_size} processes")
    start = math.floor(num_samples * rank / world_size)
    end = math.floor(num_samples * (rank + 1) / world_size)
    return f"{split}[{start}:{end}]"


def _process() -> tuple[int, int]:
    """This process's (rank, count) from ``torchrun``'s environment (``RANK``, ``WORLD_SIZE``),
    else (0, 1)."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1
