"""Pruning masks, written once over the array operations a backend supplies.

- :mod:`.ops`: the :class:`~.ops.ArrayOps` protocol a backend implements (and the limits of a
  selection);
- :mod:`.numpy_ops`: NumPy's implementation of it;
- :mod:`.selection`: the k-th smallest value and the n-th True entry, by chunks;
- :mod:`.layout`: canonical axes over an array as a framework stores it;
- :mod:`.types`: parsing a ``mask_type``;
- :mod:`.algorithms`: every mask algorithm (unstructured, blocks, N:M, channel, filter, global).
"""

from .algorithms import (
    NM_TOLERANCE,
    MaskArgs,
    MaskShapeError,
    block_mask,
    channel_mask,
    check_sparsity,
    compute_mask,
    filter_mask,
    four_block_mask,
    global_unstructured_masks,
    mask_args,
    mask_for,
    nm_mask,
    pairwise_sum,
    unstructured_mask,
)

__all__ = [
    "MaskShapeError",
    "MaskArgs",
    "NM_TOLERANCE",
    "check_sparsity",
    "mask_args",
    "mask_for",
    "compute_mask",
    "unstructured_mask",
    "global_unstructured_masks",
    "block_mask",
    "four_block_mask",
    "nm_mask",
    "channel_mask",
    "filter_mask",
    "pairwise_sum",
]
