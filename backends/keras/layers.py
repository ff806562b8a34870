"""LayerPruningModifier on Keras 3: the named layers act as identity from the start step and
get their own ``call`` back at the end step, if the modifier has one.

The layer objects, names and variables stay in the model (a functional graph cannot have a
layer swapped out): the layer's ``call`` is replaced *on the instance* by one that returns its
input unchanged, and the manager traces ``model.fit``'s train function again. While removed,
its variables are not trainable, as a PyTorch ``Identity`` has no parameters: the optimizer
leaves them as they are (and Keras does not warn that they got no gradient); their flags come
back with the layer. A layer whose output cannot have its input's shape (a Dense from 16 to
32 units, a strided convolution) is refused at ``modify()`` (:func:`reshaping_layers`, P010);
one the model's graph does not show (a subclassed model) is a ``ValueError`` at its start step.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Any

from recipe_spec.recipe.findings import Finding
from recipe_spec.runtime.structure import reshaping_layer_findings

from .quantization import layer_paths

__all__ = ["LayerSwap", "reshaping", "reshaping_layers"]


def _shape(tensor: Any) -> tuple | None:
    try:
        return tuple(tensor.shape)
    except Exception:
        return None


def reshaping(layer: Any) -> str | None:
    """Why ``layer``'s output never has its input's shape (so an identity cannot stand in for
    it), or None when it may have (or the model does not show it)."""
    import keras

    kind = type(layer).__name__
    if isinstance(layer, keras.layers.Embedding):
        return f"an {kind}: indices in, {layer.output_dim}-vectors out"
    kernel = getattr(layer, "kernel", None) if getattr(layer, "built", False) else None
    if isinstance(layer, keras.layers.Dense) and kernel is not None and kernel.shape[0] != kernel.shape[-1]:
        return f"a {kind} from {kernel.shape[0]} to {kernel.shape[-1]} units"
    if kernel is not None and hasattr(layer, "filters") and hasattr(layer, "strides"):
        if kernel.shape[-2] != kernel.shape[-1]:
            return f"a {kind} from {kernel.shape[-2]} to {kernel.shape[-1]} channels"
        if any(s != 1 for s in layer.strides):
            return f"a {kind} of strides {tuple(layer.strides)}"
        if layer.padding == "valid" and any(k > 1 for k in layer.kernel_size):
            return f"a {kind} of kernel {tuple(layer.kernel_size)} without padding, which changes the spatial size"
    try:
        inputs, outputs = layer.input, layer.output
    except Exception:  # no single inbound node (subclassed model): checked when traced
        return None
    if isinstance(inputs, (list, tuple, dict)) or isinstance(outputs, (list, tuple, dict)):
        return None
    if _shape(inputs) != _shape(outputs):
        return f"a {kind} from shape {_shape(inputs)} to {_shape(outputs)}"
    return None


def reshaping_layers(model: Any, modifiers: Any) -> Iterator[Finding]:
    """P010 for each layer a layer-removing modifier names whose output cannot have the shape of
    its input (``modifiers``: the recipe's; names the model lacks are P006's)."""
    known = dict(layer_paths(model))
    by_name = {layer.name: layer for layer in known.values()}

    def why(name: str) -> str | None:
        layer = known.get(name.replace(".", "/")) or by_name.get(name)
        return reshaping(layer) if layer is not None else None

    return reshaping_layer_findings(modifiers, why)


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
