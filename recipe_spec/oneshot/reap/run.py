"""REAP in the sequential pipeline (:mod:`..pipeline`): the layers each modifier prunes (checked
before any weight changes, :func:`layers_pruned`), the statistic of the layers inside one
calibrated part of the model (:class:`ExpertWatch`: the ``routes`` observers a host's
``run_block`` / ``run_model`` feeds), and the pruning at the part's end
(:meth:`ExpertWatch.prune`), before the part runs again for the next one's inputs.

A host that prunes experts supplies ``expert_layers()`` (every mixture-of-experts block, as
:class:`~.saliency.ExpertLayer`, a ValueError saying what is missing when its model has none or
its config does not say the expert count and ``top_k``), ``routes=`` on its runs, and
``prune_experts(layer, kept)`` (the block's experts, router rows and counts, and the model's
config).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...atomic import write_text
from ..algorithm import OneShotModifier
from . import skipped
from .saliency import ExpertLayer, Saliency, drop_counts, kept

__all__ = ["layers_pruned", "report_problem", "ExpertWatch", "write_report", "RouteObserver"]

#: Called by a host with one call of a mixture-of-experts block: ``(indices, weights, norms,
#: every_token)`` (:meth:`~.saliency.Saliency.add`).
RouteObserver = Callable[[Any, Any, Sequence[Any], bool], None]


def layers_pruned(host: Any, mod: OneShotModifier) -> list[ExpertLayer]:
    """The mixture-of-experts layers ``mod`` prunes, each with a drop count that leaves its router
    ``top_k`` experts (:func:`~.saliency.drop_counts`); a ValueError saying what to change when
    the host cannot prune experts, the model has none, ``ignore`` leaves none or only some of
    them (the config holds one expert count for all), or the sparsity does not fit a layer."""
    find = getattr(host, "expert_layers", None)
    if not callable(find):
        raise ValueError("this backend cannot prune experts (no mixture-of-experts blocks it can split): "
                         "run REAPPruningModifier on PyTorch")
    every = list(find())
    plan = mod.experts
    chosen = [layer for layer in every if not skipped(layer.name, plan.ignore)]
    if not chosen:
        raise ValueError(f"ignore {list(plan.ignore)} leaves no mixture-of-experts layer to prune: remove the "
                         "patterns that match every layer")
    left = [layer.name for layer in every if layer not in chosen and layer.count == chosen[0].count]
    if left:
        raise ValueError(f"ignore {list(plan.ignore)} leaves {', '.join(left)} with {chosen[0].count} experts while "
                         f"the layers pruned keep fewer, and the config holds one expert count for all of them (a "
                         "saved checkpoint would not load): prune every layer, or run without REAP")
    for layer in chosen:
        drop_counts(layer, plan.sparsity)
    return chosen


def report_problem(path: str | None) -> str | None:
    """Why ``report_path`` could not be written at the end of the run (checked before it
    starts, nothing created), or None."""
    if not path:
        return None
    target = os.path.abspath(path)
    if os.path.isdir(target):
        return f"report_path {path!r} is a folder"
    parent = os.path.dirname(target)
    while not os.path.exists(parent):  # the folders the report will create
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        return f"report_path {path!r} cannot be written ({parent} is not a folder this process may write in)"
    return None


class ExpertWatch:
    """The REAP statistics of the layers of ``layers`` (``{modifier index: its layers}``) for
    which ``here(name)`` holds, for one calibration pass."""

    def __init__(self, mods: Sequence[OneShotModifier], layers: Mapping[int, Sequence[ExpertLayer]],
                 here: Callable[[str], bool]) -> None:
        self._entries = [(mods[i], layer, Saliency(layer.count))
                         for i, found in layers.items() for layer in found if here(layer.name)]

    def __bool__(self) -> bool:
        return bool(self._entries)

    def routes(self) -> dict[str, RouteObserver]:
        """One observer per experts module, feeding each statistic of its layer."""
        by_experts: dict[str, list[Saliency]] = {}
        for _, layer, stats in self._entries:
            by_experts.setdefault(layer.experts, []).append(stats)

        def feed(all_stats: list[Saliency]) -> RouteObserver:
            def observe(indices: Any, weights: Any, norms: Sequence[Any], every_token: bool) -> None:
                for s in all_stats:
                    s.add(indices, weights, norms, every_token)
            return observe

        return {name: feed(s) for name, s in by_experts.items()}

    def prune(self, host: Any, collective: Any, kept_by_layer: dict[str, list[int]]) -> None:
        """Each layer pruned to the experts its statistic keeps (joined over the processes
        first), recorded in ``kept_by_layer``; a layer no token reached is a ValueError."""
        for mod, layer, stats in self._entries:
            if collective is not None:
                stats.combine(collective)
            if stats.seen == 0:
                raise ValueError(f"{mod.type} ({mod.where}): no calibration token reached {layer.name}'s experts")
            drop, per_group = drop_counts(layer, mod.experts.sparsity)
            keep = kept(stats.mean(), drop, per_group, layer.n_group)
            host.prune_experts(layer, keep)
            kept_by_layer[layer.name] = keep


def write_report(mods: Sequence[OneShotModifier], kept_by_layer: Mapping[str, list[int]],
                 layers: Mapping[int, Sequence[ExpertLayer]]) -> None:
    """Each ``report_path`` given: ``{layer: kept experts}`` of its modifier's layers, as JSON."""
    for i, mod in enumerate(mods):
        path = mod.experts.report_path if mod.experts is not None else None
        if path:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            mine = {layer.name: kept_by_layer[layer.name] for layer in layers.get(i, ()) if layer.name in kept_by_layer}
            write_text(path, json.dumps(mine))
