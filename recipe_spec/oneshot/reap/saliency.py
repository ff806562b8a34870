"""REAP's statistic and decision, written once for every backend: each expert's saliency
``S_j = mean over the tokens routed to j of (g_j · ||f_j||)`` (``g_j``: the router's weight of
expert ``j`` for the token, the coefficient of its output; ``||f_j||``: the L2 norm of the
expert's output for the token), accumulated in float64 as llm-compressor 0.14 accumulates it
(``REAPSaliencyTracker``: a sum and a count per expert, added token by token in its order), and
the experts a layer keeps: all but the ``drop`` of lowest saliency, or, for a group-limited
router (DeepSeek-V3's ``n_group``), all but the lowest ``drop / n_group`` of each group.

A host hands :meth:`Saliency.add` one call of a mixture-of-experts block: the router's choice
(``indices`` and ``weights``, ``[tokens, top_k]``) and each expert's output norms, as NumPy
arrays: one per token of the call when every expert ran on every token
(``moe_calibrate_all_experts``), else one per token routed to it, in the order the block gives
them (slot by slot, each slot's tokens in order).

>>> s = Saliency(3)
>>> s.add(np.array([[0, 1], [2, 0]]), np.array([[0.75, 0.25], [0.5, 0.5]]),
...       [np.array([2.0, 4.0]), np.array([8.0, 1.0]), np.array([1.0, 6.0])], every_token=True)
>>> s.mean().tolist()  # expert 0: (0.75·2 + 0.5·4) / 2; expert 1: 0.25·8; expert 2: 0.5·6
[1.75, 2.0, 3.0]
>>> kept(s.mean(), 1)
[1, 2]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ExpertLayer", "Saliency", "kept", "drop_counts"]


@dataclass(frozen=True)
class ExpertLayer:
    """One mixture-of-experts block as a host describes it: ``name`` (the block, e.g.
    ``model.layers.0.mlp``, which holds the router and the experts), ``experts`` (the experts
    module, whose calls the host reports), its expert count, the router's ``top_k``, and for a
    group-limited router its ``n_group`` and ``topk_group`` (None otherwise)."""

    name: str
    experts: str
    count: int
    top_k: int
    n_group: int | None = None
    topk_group: int | None = None


class Saliency:
    """One layer's REAP statistic: a float64 sum of ``g_j · ||f_j||`` and a count per expert."""

    def __init__(self, count: int) -> None:
        self.total = np.zeros(count, dtype=np.float64)
        self.tokens = np.zeros(count, dtype=np.float64)

    def add(self, indices: Any, weights: Any, norms: Sequence[Any], every_token: bool) -> None:
        """One call of the block (see the module docstring): ``indices``, ``weights``
        ``[tokens, top_k]``; ``norms[j]``: expert ``j``'s output norms (float32)."""
        indices = np.asarray(indices, dtype=np.int64)
        weights = np.asarray(weights).astype(np.float64)
        if every_token:  # each routed slot reads its token's norm; token by token, slot by slot
            table = np.stack([np.asarray(n) for n in norms], axis=1)
            chosen = np.take_along_axis(table, indices, axis=1).astype(np.float64)
            flat, contribution = indices.reshape(-1), (weights * chosen).reshape(-1)
        else:  # each expert's norms come in its routed slots' order: slot by slot, token by token
            flat = indices.T.reshape(-1)
            slot_weights = weights.T.reshape(-1)
            values = np.zeros_like(slot_weights)
            for j, n in enumerate(norms):
                where = flat == j
                n = np.asarray(n)
                if int(where.sum()) != n.shape[0]:
                    raise RuntimeError(f"expert {j} reported {n.shape[0]} output norms for {int(where.sum())} routed "
                                       "tokens")
                values[where] = n.astype(np.float64)
            contribution = slot_weights * values
        np.add.at(self.total, flat, contribution)
        np.add.at(self.tokens, flat, 1.0)

    def mean(self) -> np.ndarray:
        """Each expert's mean saliency (0 for an expert no token was routed to)."""
        return self.total / np.maximum(self.tokens, 1.0)

    @property
    def seen(self) -> float:
        """The routed token slots counted."""
        return float(self.tokens.sum())

    def combine(self, collective: Any) -> None:
        """The sums of every process's calls, added in rank order (:mod:`..distributed`)."""
        parts = collective.gather((self.total, self.tokens))
        self.total = np.sum(np.stack([p[0] for p in parts]), axis=0)
        self.tokens = np.sum(np.stack([p[1] for p in parts]), axis=0)


def drop_counts(layer: ExpertLayer, sparsity: float) -> tuple[int, int | None]:
    """``(experts dropped per layer, per group)`` for ``sparsity`` (``int(count · sparsity)``;
    a group-limited router drops ``round(that / n_group)`` of each group, so the total is a
    multiple of ``n_group``, as llm-compressor 0.14); a ValueError that says what to change when
    nothing would be dropped, when the groups do not divide the experts, when a group would keep
    fewer than the two experts DeepSeek-V3's router scores it by (llm-compressor prunes the
    first layer and then fails), or when fewer than ``top_k`` experts would stay reachable."""
    drop = int(layer.count * sparsity)
    if drop == 0:
        raise ValueError(f"sparsity {sparsity} drops no expert of {layer.count} (int({layer.count} x {sparsity}) = 0): "
                         f"give a sparsity of at least {1 / layer.count:.4g}")
    per_group = None
    available = layer.count - drop
    if layer.n_group is not None and layer.topk_group is not None:
        if layer.count % layer.n_group:
            raise ValueError(f"{layer.name}: {layer.count} experts do not divide into n_group={layer.n_group} groups")
        size = layer.count // layer.n_group
        per_group = round(drop / layer.n_group)
        if per_group == 0:
            raise ValueError(f"sparsity {sparsity} drops no expert of each group of {size} (n_group={layer.n_group}): "
                             f"give a sparsity of at least {layer.n_group / (2 * layer.count):.4g}")
        drop = per_group * layer.n_group
        if size - per_group < 2:  # DeepSeek-V3's router scores a group by its two best experts
            raise ValueError(f"sparsity {sparsity} leaves {size - per_group} expert of each group of {size} "
                             f"(n_group={layer.n_group}), and the router scores each group by its two best: "
                             "lower the sparsity")
        available = layer.topk_group * (size - per_group)
    if layer.top_k > available:
        raise ValueError(f"sparsity {sparsity} leaves {available} experts a token can reach in {layer.name}, fewer "
                         f"than the router's top_k={layer.top_k}: lower the sparsity")
    return drop, per_group


def kept(saliency: np.ndarray, drop: int, per_group: int | None = None, n_group: int | None = None) -> list[int]:
    """The experts kept, in order: all but the ``drop`` of lowest saliency (an equal saliency
    drops the lower index first), or with ``per_group``, all but the ``per_group`` lowest of
    each of the ``n_group`` consecutive groups."""
    if per_group is None or n_group is None:
        return _kept(saliency, drop, 0)
    size = len(saliency) // n_group
    return [i for g in range(n_group) for i in _kept(saliency[g * size:(g + 1) * size], per_group, g * size)]


def _kept(saliency: np.ndarray, drop: int, offset: int) -> list[int]:
    order = np.argsort(saliency, kind="stable")
    dropped = {int(i) for i in order[:drop]}
    return [offset + i for i in range(len(saliency)) if i not in dropped]
