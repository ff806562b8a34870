"""LayerPruningModifier on Keras 3: the named layers act as identity from the start step and
get their own ``call`` back at the end step, if the modifier has one.

The layer objects, names and variables stay in the model (a functional graph cannot have a
layer swapped out): the layer's ``call`` is replaced *on the instance* by one that returns its
input unchanged, and the manager traces ``model.fit``'s train function again. While removed,
its variables are not trainable, as a PyTorch ``Identity`` has no parameters: the optimizer
leaves them as they are (and Keras does not warn that they got no gradient); their flags come
back with the layer. A layer whose output shape differs from its input shape cannot be an
identity: that is a ``ValueError`` at the start step, naming the layer.
"""

from __future__ import annotations

import difflib
from typing import Any

from .quantization import layer_paths

__all__ = ["LayerSwap"]


def _shape(tensor: Any) -> tuple | None:
    try:
        return tuple(tensor.shape)
    except Exception:
        return None


def _identity_call(layer: Any, name: str) -> Any:
    def call(inputs: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            out_shape = tuple(layer.compute_output_shape(tuple(inputs.shape)))
        except Exception:
            out_shape = None
        if out_shape is not None and out_shape != tuple(inputs.shape):
            raise ValueError(
                f"LayerPruningModifier: layer {name!r} changes the shape {tuple(inputs.shape)} -> "
                f"{out_shape}; only shape-preserving layers can be removed"
            )
        return inputs

    return call


class LayerSwap:
    """The layers a recipe made identities, so they can be restored and saved."""

    def __init__(self) -> None:
        self.removed: dict[int, list[str]] = {}
        self.model: Any = None

    def remove(self, model: Any, modifier: int, names: list[str]) -> None:
        self.model = model
        known = dict(layer_paths(model))
        by_name = {layer.name: layer for _, layer in known.items()}
        missing = [n for n in names if n.replace(".", "/") not in known and n not in by_name]
        if missing:
            close = difflib.get_close_matches(missing[0], list(known), n=3)
            raise ValueError(
                f"LayerPruningModifier: layer(s) {missing} not in the model"
                + (f"; closest: {', '.join(close)}" if close else "")
            )
        layers = [(n, known.get(n.replace(".", "/")) or by_name[n]) for n in names]
        for name, layer in layers:  # check them all before changing any
            try:
                inputs, outputs = layer.input, layer.output
            except Exception:  # no single inbound node (subclassed model): checked when traced
                continue
            if not isinstance(inputs, (list, tuple, dict)) and not isinstance(outputs, (list, tuple, dict)):
                if _shape(inputs) != _shape(outputs):
                    raise ValueError(
                        f"LayerPruningModifier: layer {name!r} changes the shape {_shape(inputs)} -> "
                        f"{_shape(outputs)}; only shape-preserving layers can be removed"
                    )
        saved = self.removed.setdefault(modifier, [])
        for name, layer in layers:
            if "_pruned_original_call" in layer.__dict__:
                continue
            layer.__dict__["_pruned_original_call"] = layer.__dict__.get("call")
            layer.__dict__["_pruned_trainable"] = [(v, bool(v.trainable)) for v in layer.weights]
            for variable in layer.weights:
                variable.trainable = False
            object.__setattr__(layer, "call", _identity_call(layer, name))
            saved.append(name)

    def restore(self, model: Any, modifier: int) -> None:
        known = dict(layer_paths(model))
        by_name = {layer.name: layer for _, layer in known.items()}
        for name in self.removed.pop(modifier, []):
            layer = known.get(name.replace(".", "/")) or by_name[name]
            for variable, flag in layer.__dict__.pop("_pruned_trainable", []):
                variable.trainable = flag
            previous = layer.__dict__.pop("_pruned_original_call", None)
            if previous is None:
                layer.__dict__.pop("call", None)
            else:  # e.g. a QAT wrapper installed before
                object.__setattr__(layer, "call", previous)

    def state(self) -> dict[int, list[str]]:
        return {k: list(v) for k, v in self.removed.items()}
