"""LayerPruningModifier on PyTorch: named layers are replaced by ``Identity`` from the start
step (SparseML's behaviour) and put back at the end step, if the modifier has one."""

from __future__ import annotations

import torch

__all__ = ["LayerSwap"]


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
