"""LayerPruningModifier on PyTorch: named layers are replaced by ``Identity`` from the start
step (SparseML's behaviour) and put back at the end step, if the modifier has one. A layer
whose output cannot have the shape of its input (a Linear from 16 to 32 features, a 3x3
convolution without padding) is refused at ``modify()`` (:func:`reshaping_layers`, P010):
replaced by ``Identity`` it would break the forward pass at its start step, mid-training."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from recipe_spec.recipe.findings import Finding
from recipe_spec.runtime.structure import reshaping_layer_findings

__all__ = ["LayerSwap", "reshaping", "reshaping_layers"]


def reshaping(module: torch.nn.Module) -> str | None:
    """Why ``module``'s output never has its input's shape (so ``Identity`` cannot stand in for
    it), or None when it may have (a container, a norm, a square Linear ...)."""
    kind = type(module).__name__
    if isinstance(module, torch.nn.Linear) and module.in_features != module.out_features:
        return f"a {kind} from {module.in_features} to {module.out_features} features"
    if isinstance(module, torch.nn.Embedding):
        return f"an {kind}: indices in, {module.embedding_dim}-vectors out"
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        if module.in_channels != module.out_channels:
            return f"a {kind} from {module.in_channels} to {module.out_channels} channels"
        if any(s != 1 for s in module.stride):
            return f"a {kind} of stride {tuple(module.stride)}"
        if not isinstance(module.padding, str):
            for k, p, d in zip(module.kernel_size, module.padding, module.dilation, strict=False):
                if 2 * p != d * (k - 1):
                    return f"a {kind} of kernel {tuple(module.kernel_size)} and padding {tuple(module.padding)}, which changes the spatial size"
        elif module.padding == "valid" and any(k > 1 for k in module.kernel_size):
            return f"a {kind} of kernel {tuple(module.kernel_size)} without padding, which changes the spatial size"
    return None


def reshaping_layers(model: torch.nn.Module, modifiers: Any) -> Iterator[Finding]:
    """P010 for each layer a layer-removing modifier names whose output cannot have the shape of
    its input (``modifiers``: the recipe's; names the model lacks are P006's)."""
    known = dict(model.named_modules())
    return reshaping_layer_findings(modifiers, lambda name: reshaping(known[name]) if name in known else None)


def _parent(model: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    parts = name.split(".")
    parent = model
    for part in parts[:-1]:
        parent = getattr(parent, part)
    return parent, parts[-1]


class LayerSwap:
    """The layers a recipe removed, so they can be restored and saved."""

    def __init__(self) -> None:
        self.removed: dict[int, dict[str, torch.nn.Module]] = {}

    def remove(self, model: torch.nn.Module, modifier: int, names: list[str]) -> None:
        known = dict(model.named_modules())
        missing = [n for n in names if n not in known]
        if missing:
            import difflib

            close = difflib.get_close_matches(missing[0], list(known), n=3)
            raise ValueError(
                f"LayerPruningModifier: layer(s) {missing} not in the model"
                + (f"; closest: {', '.join(close)}" if close else "")
            )
        saved = self.removed.setdefault(modifier, {})
        for name in names:
            parent, attr = _parent(model, name)
            saved[name] = getattr(parent, attr)
            setattr(parent, attr, torch.nn.Identity())

    def restore(self, model: torch.nn.Module, modifier: int) -> None:
        for name, layer in self.removed.pop(modifier, {}).items():
            parent, attr = _parent(model, name)
            setattr(parent, attr, layer)

    def state(self) -> dict[int, list[str]]:
        return {k: list(v) for k, v in self.removed.items()}
