"""Wanda's one-shot pruning (Sun et al. 2023), written once over :class:`~.ops.SolverOps`:
llm-compressor's ``wanda_sparsify.sparsify_weight``, in float32.

The score of a weight is ``|W| · sqrt(S)``, ``S`` the row scalars of its input column
(:class:`~.hessian.WandaStats`). Unstructured: in each output row the ``int(columns ·
sparsity)`` lowest scores are pruned (stable ascending sort: ties go to the lower column), so
every row reaches exactly that count. N:M: in each row's every group of ``M`` consecutive
columns the ``N`` lowest scores are pruned (ties: the lower column). Pruned weights are set to
zero; nothing else changes.

>>> import numpy as np
>>> from recipe_spec.masks.numpy_ops import NUMPY_OPS
>>> w = np.array([[1.0, -2.0, 0.5, 3.0]], dtype=np.float32)
>>> r = wanda_prune(NUMPY_OPS, w, np.array([4.0, 1.0, 1.0, 1.0], dtype=np.float32), sparsity=0.5)
>>> r.weight.tolist(), r.mask.tolist()
([[0.0, -2.0, 0.0, 3.0]], [[False, True, False, True]])
"""

from __future__ import annotations

from ...masks.ops import Array
from ...pruning.second_order.ops import SolverOps
from ..shared.obs import PruneResult, SolverError, check_prune_args

__all__ = ["wanda_prune"]


def wanda_prune(ops: SolverOps, weight: Array, row_scalars: Array, *, sparsity: float,
                prune_n: int = 0, prune_m: int = 0) -> PruneResult:
    """Prune one layer with Wanda (see the module docstring). ``weight``: ``(out, in)``;
    ``row_scalars``: ``(in,)``, from :class:`~.hessian.WandaStats` (neither is modified).
    ``prune_n > 0`` selects N:M (``sparsity`` is then not used, as in llm-compressor). The
    result's weight has the given weight's dtype; its ``loss`` and ``dampening_frac`` are
    None."""
    check_prune_args(tuple(weight.shape), sparsity, prune_n, prune_m)
    rows, cols = (int(d) for d in weight.shape)
    if tuple(row_scalars.shape) != (cols,):
        raise ValueError(f"the row scalars have shape {list(row_scalars.shape)}, but a weight with "
                         f"{cols} input columns needs [{cols}]")
    W = ops.astype(weight, "float32")
    S = ops.cast(row_scalars, W)
    for x, what in ((W, "weight"), (S, "row scalars")):
        if ops.count_nonzero(~ops.isfinite(x)):
            raise SolverError(f"the {what} of this layer hold NaN or infinite entries: check the layer's "
                             "weights and the calibration inputs (an overflow in half precision?)")
    if ops.count_nonzero(S < 0):
        raise ValueError("the row scalars hold negative entries; they are mean squared inputs "
                         "(recipe_spec.oneshot.shared.hessian.WandaStats)")
    score = ops.abs(W) * ops.sqrt(ops.reshape(S, (1, cols)))
    if prune_n:
        groups = (rows, cols // prune_m, prune_m)
        order = ops.argsort_last(ops.reshape(score, groups))[:, :, :prune_n]
        keep = ops.reshape(ops.scatter_last(ops.full(groups, True, W), order, False), (rows, cols))
    else:
        order = ops.argsort_last(score)[:, :int(cols * sparsity)]
        keep = ops.scatter_last(ops.full((rows, cols), True, W), order, False)
    return PruneResult(ops.cast(ops.where(keep, W, 0.0), weight), keep)
