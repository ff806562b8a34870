"""One second-order pruning step, written once: scores from the inverse Fisher, the new masks,
and the Optimal Brain Surgeon correction of the remaining weights (SparseML 1.8's
``MFACPruningParamsScorer`` and ``OBSPruningParamsScorer``; reference sections 5 and 7).

Arrays are in canonical layout (:mod:`recipe_spec.masks.layout`: PyTorch's), so that the blocks
of consecutive coordinates, and therefore the masks, are the same on every backend.

- M-FAC: one Fisher over the concatenation of the modifier's *unpruned* weights (blocks
  straddle parameters); ``score = w² / (2·diag F⁻¹)`` (already pruned entries: the smallest
  score minus 1, so they stay pruned); the correction ``δ = F⁻¹ (−w_P ⊘ diag)`` from the
  newly pruned weights ``w_P`` only, added to every previously unpruned weight.
- OBS: one Fisher per parameter over its whole flat weight (masked gradients);
  ``score = w² / (2·diag + ε)`` with ε = float32's epsilon (pruned: −∞), or for ``block4``
  ``½ w_bᵀ (F_b⁻¹)⁻¹ w_b`` per group of 4 input channels; ``w ← w − F⁻¹ (w_P ⊘ (diag + ε))``
  (``block4``: ``w ← w − F⁻¹ (x ⊙ P)`` with ``x = (F_b⁻¹)⁻¹ w_b``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...masks import algorithms as core
from ...masks.ops import Array
from ...modifiers.second_order_args import EPS_F32
from .fisher import FisherInverse
from .ops import FisherOps

__all__ = ["mfac_step", "obs_step", "input_last", "from_input_last", "same_target", "StepResult"]


class StepResult:
    """What a pruning step produced: per parameter the new weights and masks (canonical
    shapes), the mask sparsity of all of them together, and the scores (for inspection)."""

    def __init__(self, weights: list[Array], masks: list[Array], scores: list[Array], sparsity: float):
        self.weights, self.masks, self.scores, self.sparsity = weights, masks, scores, sparsity


def same_target(targets: Sequence[float], what: str) -> float:
    """The one target of a global ranking (all equal), else ``ValueError``."""
    if len({float(t) for t in targets}) > 1:
        raise ValueError(
            f"{what} with global_sparsity ranks all parameters together, so they need one "
            f"target sparsity; got {sorted({float(t) for t in targets})}. Use one final_sparsity "
            "or set global_sparsity: false"
        )
    return float(targets[0])


def input_last(ops: FisherOps, x: Array) -> Array:
    """A canonical ``(out, in, k...)`` array with the input axis moved last, so that groups
    of 4 consecutive entries are 4 input channels (``block4``); 1-D and 2-D unchanged."""
    if len(x.shape) <= 2:
        return x
    n = len(x.shape)
    return ops.permute(x, (0, *range(2, n), 1))


def from_input_last(ops: FisherOps, x: Array, shape: Sequence[int]) -> Array:
    """The inverse of :func:`input_last` for a flat ``x`` of a parameter of ``shape``."""
    if len(shape) <= 2:
        return ops.reshape(x, tuple(shape))
    n = len(shape)
    moved = (shape[0], *shape[2:], shape[1])
    return ops.permute(ops.reshape(x, moved), (0, n - 1, *range(1, n - 1)))


def _sparsity(ops: FisherOps, masks: Sequence[Array]) -> float:
    total = sum(math.prod(m.shape) for m in masks)
    kept = sum(ops.count_nonzero(m) for m in masks)
    return (total - kept) / total if total else 0.0


def _split(ops: FisherOps, flat: Array, shapes: Sequence[Sequence[int]]) -> list[Array]:
    out, start = [], 0
    for shape in shapes:
        n = math.prod(shape)
        out.append(ops.reshape(flat[start:start + n], tuple(shape)))
        start += n
    return out


def mfac_step(ops: FisherOps, weights: Sequence[Array], masks: Sequence[Array], grads: Array,
              keep: Array, targets: Sequence[float], damp: float, block_size: int | None,
              mask_type: str, global_sparsity: bool, devices: Sequence[Any] | None = None) -> StepResult:
    """One M-FAC step. ``grads``: ``m x len(keep)`` gradients of the unpruned weights, whose
    flat positions in the concatenation of ``weights`` are ``keep``; ``targets``: the target
    sparsity of each parameter."""
    shapes = [tuple(w.shape) for w in weights]
    flat_w = ops.concat([ops.reshape(w, (-1,)) for w in weights], 0)
    w_u = ops.take(flat_w, keep)
    fisher = FisherInverse(ops, ops.cast(grads, w_u), damp, block_size, devices)
    diag = ops.cast(fisher.diag(), w_u)
    s_u = w_u * w_u / (diag * 2.0)
    floor = ops.min_value(s_u) - 1.0 if math.prod(s_u.shape) else 0.0
    scores_flat = ops.put(ops.zeros(flat_w.shape, flat_w) + floor, keep, s_u)
    scores = _split(ops, scores_flat, shapes)
    if global_sparsity:
        if mask_type != "unstructured":
            raise ValueError(f"M-FAC with global_sparsity ranks single weights; mask_type {mask_type!r} needs global_sparsity: false")
        new_masks = core.global_unstructured_masks(ops, scores, same_target(targets, "M-FAC"))
    elif mask_type == "block4":
        new_masks = [core.four_block_mask(ops, s, t, magnitude=False) for s, t in zip(scores, targets, strict=True)]
    else:
        new_masks = [core.unstructured_mask(ops, s, t) for s, t in zip(scores, targets, strict=True)]
    new_flat = ops.concat([ops.reshape(m, (-1,)) for m in new_masks], 0)
    newly = ~ops.take(new_flat, keep)  # among the previously unpruned
    w_p = ops.where(newly, w_u, 0.0)
    delta = ops.cast(fisher.mul(w_p / diag * -1.0), w_u)
    updated = ops.put(flat_w * 1.0, keep, w_u + delta)
    updated = ops.where(new_flat, updated, 0.0)
    return StepResult(_split(ops, updated, shapes), list(new_masks), scores, _sparsity(ops, new_masks))


def obs_scores(ops: FisherOps, weight: Array, mask: Array, fisher: FisherInverse, mask_type: str) -> tuple[Array, Array]:
    """OBS scores of one parameter (flat, in :func:`input_last` order for ``block4``) and
    what its update needs: for ``block4``, ``x = (F_b⁻¹)⁻¹ w_b`` per entry, else ``diag F⁻¹``."""
    w = ops.reshape(input_last(ops, weight) if mask_type == "block4" else weight, (-1,))
    keep = ops.reshape(input_last(ops, mask) if mask_type == "block4" else mask, (-1,))
    if mask_type == "block4":
        wb = ops.reshape(w, (-1, 4, 1))
        x = ops.cast(ops.solve(fisher.diag_blocks(4), ops.cast(wb, fisher.like)), w)
        group = ops.sum(ops.reshape(wb * x, (-1, 4)), 1) * 0.5
        scores = ops.reshape(ops.expand(ops.reshape(group, (-1, 1)), (group.shape[0], 4)), (-1,))
        return ops.where(keep, scores, -math.inf), ops.reshape(x, (-1,))
    diag = ops.cast(fisher.diag(), w)
    return ops.where(keep, w * w / (diag * 2.0 + EPS_F32), -math.inf), diag


def obs_step(ops: FisherOps, weights: Sequence[Array], masks: Sequence[Array], fishers: Sequence[FisherInverse],
             targets: Sequence[float], mask_type: str, global_sparsity: bool) -> StepResult:
    """One OBS (re)computation: ``fishers[i]`` is parameter i's inverse Fisher over its
    flat weight (in :func:`input_last` order for ``block4``)."""
    scored = [obs_scores(ops, w, m, f, mask_type) for w, m, f in zip(weights, masks, fishers, strict=True)]
    if mask_type == "block4":  # rank groups: one score per 4 entries
        units = [ops.reshape(s, (-1, 4))[:, 0] for s, _ in scored]
    else:
        units = [s for s, _ in scored]
    if global_sparsity:
        keeps = core.global_unstructured_masks(ops, units, same_target(targets, "OBS"))
    else:
        keeps = [core.unstructured_mask(ops, u, t) for u, t in zip(units, targets, strict=True)]
    new_weights, new_masks = [], []
    for (_, x), keep_units, w, m, f in zip(scored, keeps, weights, masks, fishers, strict=True):
        shape = tuple(w.shape)
        if mask_type == "block4":
            keep = ops.reshape(ops.expand(ops.reshape(keep_units, (-1, 1)), (keep_units.shape[0], 4)), (-1,))
            flat_w = ops.reshape(input_last(ops, w), (-1,))
            old = ops.reshape(input_last(ops, m), (-1,))
        else:
            keep = keep_units
            flat_w, old = ops.reshape(w, (-1,)), ops.reshape(m, (-1,))
        newly = old & ~keep
        if mask_type == "block4":
            delta = f.mul(ops.cast(ops.where(newly, x, 0.0), f.like))
        else:  # x is diag F⁻¹
            delta = f.mul(ops.cast(ops.where(newly, flat_w, 0.0) / (x + EPS_F32), f.like))
        updated = ops.where(keep, flat_w - ops.cast(delta, flat_w), 0.0)
        if mask_type == "block4":
            new_weights.append(from_input_last(ops, updated, shape))
            new_masks.append(from_input_last(ops, keep, shape))
        else:
            new_weights.append(ops.reshape(updated, shape))
            new_masks.append(ops.reshape(keep, shape))
    return StepResult(new_weights, new_masks, [s for s, _ in scored], _sparsity(ops, new_masks))
