"""Where a model's mixture-of-experts layers are, read once for every reader: the expert count,
``top_k`` and group-limited routing from a model's config (a Hugging Face config object or its
``config.json`` as a dict; its ``text_config`` where it has one), under the names llm-compressor
0.14 reads (``reap/utils.py``), and the layers of a checkpoint read from its headers
(:func:`checkpoint_layers`, for ``lint --model``: **P015**, :func:`expert_findings`).

>>> routing({"num_local_experts": 8, "num_experts_per_tok": 2})
('num_local_experts', 8, 2, None, None)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...diagnostics import codes
from ...diagnostics.base import Diagnostic
from ...recipe.model import Recipe
from ..algorithm import OneShotModifier
from .saliency import ExpertLayer

__all__ = ["COUNT_KEYS", "TOP_K_KEYS", "routing", "checkpoint_layers", "expert_findings"]

#: The config's expert count, top_k and group-limited routing keys, first found first.
COUNT_KEYS = ("num_experts", "num_local_experts", "moe_num_experts")
TOP_K_KEYS = ("num_experts_per_tok", "top_k", "moe_top_k")
_GROUP_KEYS, _TOP_K_GROUP_KEYS = ("n_group",), ("topk_group", "top_k_group")
#: The block's router, as llm-compressor names it.
ROUTERS = ("router", "gate")


def _get(config: Any, key: str) -> tuple[bool, Any]:
    if isinstance(config, Mapping):
        return key in config and config[key] is not None, config.get(key)
    return hasattr(config, key) and getattr(config, key) is not None, getattr(config, key, None)


def _first(config: Any, keys: Sequence[str]) -> tuple[str | None, Any]:
    for key in keys:
        found, value = _get(config, key)
        if found:
            return key, value
    return None, None


def text_config(config: Any) -> Any:
    """The part of ``config`` that describes the language model (``text_config`` when present)."""
    found, inner = _get(config, "text_config")
    return inner if found else config


def routing(config: Any) -> tuple[str, int, int, int | None, int | None]:
    """``(the expert count's key, count, top_k, n_group, topk_group)`` of ``config`` (the last
    two None without group-limited routing); a ValueError saying what is missing."""
    config = text_config(config)
    count_key, count = _first(config, COUNT_KEYS)
    _, top_k = _first(config, TOP_K_KEYS)
    if count_key is None or top_k is None:
        raise ValueError(f"the model's config does not say its expert count ({' or '.join(COUNT_KEYS)}) and "
                         f"top_k ({' or '.join(TOP_K_KEYS)})")
    _, n_group = _first(config, _GROUP_KEYS)
    _, topk_group = _first(config, _TOP_K_GROUP_KEYS)
    if (n_group is None) != (topk_group is None):
        raise ValueError("the model's config gives one of n_group and topk_group without the other")
    return count_key, int(count), int(top_k), n_group, topk_group


_EXPERT = re.compile(r"^(.*)\.experts\.(\d+)\.")


def checkpoint_layers(config: Mapping[str, Any], modules: Sequence[Any]) -> list[ExpertLayer]:
    """The mixture-of-experts layers of a checkpoint (``modules``: its
    :class:`~..host.ModuleInfo`, fused experts already split as the run splits them): each
    module with numbered experts and a router weight beside them; a ValueError as
    :func:`routing`, or when there is none."""
    _, _, top_k, n_group, topk_group = routing(config)
    names = {m.name for m in modules}
    experts: dict[str, set[int]] = {}
    for m in modules:
        found = _EXPERT.match(m.name + ".")
        if found is not None:
            experts.setdefault(found.group(1), set()).add(int(found.group(2)))
    out = [ExpertLayer(block, f"{block}.experts", len(ids), top_k, n_group, topk_group)
           for block, ids in experts.items() if any(f"{block}.{r}" in names for r in ROUTERS)]
    if not out:
        raise ValueError("the model has no mixture-of-experts block (a module holding split experts and a "
                         "router named router or gate)")
    return out


class _Checkpoint:
    def __init__(self, config: Mapping[str, Any], modules: Sequence[Any]) -> None:
        self.config, self.modules = config, modules

    def expert_layers(self) -> list[ExpertLayer]:
        return checkpoint_layers(self.config, self.modules)


def expert_findings(recipe: Recipe, mods: Sequence[OneShotModifier], config: Mapping[str, Any],
                    modules: Sequence[Any]) -> list[Diagnostic]:
    """P015 for each REAP modifier of ``mods`` the checkpoint cannot take as written (no
    mixture-of-experts layer, a sparsity that drops none or leaves fewer than ``top_k``, an
    ``ignore`` that leaves some layers whole), as ``oneshot`` would refuse it."""
    from .run import layers_pruned

    out: list[Diagnostic] = []
    for mod in mods:
        if mod.experts is None:
            continue
        try:
            layers_pruned(_Checkpoint(config, modules), mod)
        except ValueError as exc:
            out.append(codes.P015(f"{mod.type} cannot prune this model's experts: {exc}",
                                  "Change the sparsity or ignore, or lint against a mixture-of-experts model.",
                                  mod.entry.span).in_file(recipe.path))
    return out
