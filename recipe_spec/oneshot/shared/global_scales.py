"""NVFP4's global weight scale (``tensor_group``), shared by the layers a serving kernel fuses,
as llm-compressor 0.14 links their observers (``fuse_weight_observers``): the siblings named in
one of :data:`FUSED_LAYER_NAMES` (``q_proj``/``k_proj``/``v_proj`` of one attention,
``gate_proj``/``up_proj`` of one MLP, ...), when their parent has every name of the set and
each of them is quantized with a ``tensor_group`` grid, get one global scale, made from the
largest magnitude over all their weights (:func:`recipe_spec.quantization.fp4.global_scale`).

It is made from the weights as they are when the first layer of the set is compressed, and kept
for the others: GPTQ changes ``q_proj``'s weight before ``k_proj``'s turn, and llm-compressor's
fused observers keep the statistics they took of the weights before any of them changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...quantization.fp4 import global_scale
from ..algorithm import OneShotModifier
from ..host import ModuleInfo

__all__ = ["FUSED_LAYER_NAMES", "fused_global_scale", "mixed_fused_sets"]

#: The layer names whose global scales are fused (llm-compressor 0.14's ``FUSED_LAYER_NAMES``).
FUSED_LAYER_NAMES = (("gate_proj", "up_proj"), ("q_proj", "k_proj", "v_proj"), ("q_a_proj", "kv_a_proj_with_mqa"),
                     ("w1", "w3"))


def _fused_set(name: str, infos: dict[str, ModuleInfo]) -> list[str] | None:
    """The fused set (:data:`FUSED_LAYER_NAMES`) module ``name`` belongs to, when its parent has
    every name of it; None otherwise."""
    parent, _, leaf = name.rpartition(".")
    prefix = f"{parent}." if parent else ""
    for names in FUSED_LAYER_NAMES:
        if leaf in names and all(prefix + n in infos for n in names):
            return [prefix + n for n in names]
    return None


def _tensor_group(plan: Any, info: ModuleInfo) -> bool:
    group = plan.group_of(info.name, info.classes) if info.prunable else None
    return group is not None and group.weights is not None and group.weights.strategy == "tensor_group"


def _fused_names(host: Any, mod: OneShotModifier, name: str) -> list[str]:
    """``name`` and the siblings it shares a global scale with, in the set's order."""
    infos = {i.name: i for i in host.modules()}
    members = _fused_set(name, infos)
    grouped = [n for n in members or () if _tensor_group(mod.quant, infos[n])]
    return grouped if name in grouped else [name]


def fused_global_scale(host: Any, mod: OneShotModifier, name: str, group: Any) -> Any:
    """The float32 global scale (shape ``(1,)``) module ``name`` is quantized with, None unless
    its group's weights are ``tensor_group``; made for its whole fused set when the first of it
    is compressed (see the module docstring) and kept in ``mod.global_scales``."""
    if group is None or group.weights is None or group.weights.strategy != "tensor_group":
        return None
    if name in mod.global_scales:
        return mod.global_scales[name]
    ops = host.ops
    low = high = None
    names = _fused_names(host, mod, name)
    for n in names:
        flat = ops.reshape(host.observed(n), (1, -1))  # in the model's dtype, as the observers
        lo, hi = ops.amin(flat, 1), ops.amax(flat, 1)
        low = lo if low is None else ops.minimum(low, lo)
        high = hi if high is None else ops.maximum(high, hi)
    scale = ops.astype(global_scale(ops, low, high), "float32")  # in the weights' dtype, kept in float32
    for n in names:
        mod.global_scales[n] = scale
    return scale


def mixed_fused_sets(plan: Any, modules: Sequence[ModuleInfo]) -> list[tuple[list[str], list[str]]]:
    """The fused sets (:data:`FUSED_LAYER_NAMES` under one parent) where ``plan`` quantizes some
    layers with a ``tensor_group`` grid and not the others: ``(the set, those left out)``.
    llm-compressor 0.14 stops on them with an AssertionError (a serving kernel fuses the set,
    one global scale for all of it); checked before any weight changes."""
    infos = {i.name: i for i in modules}
    out = []
    for info in modules:
        members = _fused_set(info.name, infos)
        if members is None or info.name != members[0]:  # each set once, at its first layer
            continue
        grouped = [n for n in members if _tensor_group(plan, infos[n])]
        if grouped and len(grouped) < len(members):
            out.append((members, [n for n in members if n not in grouped]))
    return out
