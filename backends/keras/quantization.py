"""QuantizationModifier on Keras 3: quantization-aware training with the torch backend's scheme.

At the start step every ``Dense`` and ``Conv1D``/``Conv2D``/``Conv3D`` layer inside
``submodules`` (layer names or layer paths such as ``block/dense``; default: the whole model),
minus the layers and layer class names in ``ignore``, gets:

- fake quantization of its kernel: 8-bit symmetric, per tensor (range = the kernel's min/max);
- fake quantization of its inputs: 8-bit asymmetric, moving-average min/max observer
  (averaging constant 0.01); outputs are not quantized;
- straight-through gradients: ``x + stop_gradient(fake_quant(x) - x)`` (keras.ops only).

How. The layer's ``call`` is replaced *on the instance* by a wrapper that computes the same
thing as Dense/BaseConv ``call`` with the fake-quantized input and kernel; the original is kept
(:meth:`QuantizationState.remove` puts it back). Keras traces ``call`` when it builds the train
function, so the manager traces ``model.fit``'s train function again after the change. The
observers live in two small non-trainable sub-layers, ``input_fake_quant`` and
``kernel_fake_quant``, attached to the layer (variables ``min_val``, ``max_val``, ``observed``,
``observer_enabled``): they are part of ``model.weights`` and of saved weights (recipe name
``conv1/input_fake_quant/min_val``; Keras' own ``variable.path`` is ``input_fake_quant/min_val``,
the scope they were created in), and no layer or existing variable is renamed.

Observers update only in training calls (``model.fit``; not in ``predict``/``evaluate``); at
``disable_quantization_observer_epoch`` their ``observer_enabled`` variables are set to 0 and
the ranges stay frozen. At ``freeze_bn_stats_epoch`` the BatchNormalization layers folded into
a quantized conv (below) get ``momentum = 1.0`` (Keras: ``moving = moving * momentum + batch *
(1 - momentum)``), so their moving statistics stop changing; the train function is traced
again because Keras reads ``momentum`` at trace time.

Conv-BN fold (the torch backend's ``_conv_forward``, unless ``model_fuse_fn_name: no_fuse``). A
conv whose output feeds a ``BatchNormalization`` directly (functional graph; for subclassed
models, the BN listed right after it) is trained with that BN folded into its quantized kernel,
so the quantization grid is the one the deployed, folded conv will have::

    factor = gamma / sqrt(moving_variance + epsilon)      # gamma = 1 when scale=False
    y = conv(x, fake_quant(kernel * factor)) / factor + bias

(``factor`` on the output-channel axis: the last kernel axis in Keras; read from the BN's
variables at every call). The BN itself still runs afterwards as usual, and its moving
statistics keep updating until ``freeze_bn_stats_epoch``. Only these folded BNs are frozen
(with ``no_fuse`` none is, as in torch). A conv is not folded when it has a non-linear
activation between it and the BN (a deployed conv could not absorb the BN through it) or when
the BN normalizes another axis than the conv's channels. The pairs are recorded (``QuantizationState.folded``, conv path -> BN
path) so that a resumed run folds the same BNs. The BN is held by the wrapper's closure, not
as an attribute of the conv: Keras' saving walks a layer's attributes, and a BN reached
through the conv would be saved under the conv's path instead of its own.

Resume with ``keras.saving.load_model``. The .keras file does hold the observer variables
(under the layer's group), but ``load_model`` rebuilds the layers from their config, which has
no observers, and Keras silently skips entries of the file that no variable asks for. So the
observer values also travel in the recipe state (:meth:`QuantizationState.state`, floats, exact
for float32) and :meth:`QuantizationState.restore` assigns them after re-attaching the
observers; loading the weights again afterwards (``model.load_weights``) gives the same values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import keras
from keras import ops
from recipe_spec.recipe.findings import Finding
from recipe_spec.runtime.structure import nothing_to_quantize_findings

from .params import numpy_value

if TYPE_CHECKING:
    from recipe_spec.recipe import Modifier

__all__ = ["FakeQuant", "QuantizationState", "qat_layers", "layer_paths"]

_QUANTIZABLE = ("Dense", "Conv1D", "Conv2D", "Conv3D")
_EPS = 1.1920929e-07  # float32 eps, as torch


def _is_quantizable(layer: Any) -> bool:
    dense = isinstance(layer, keras.layers.Dense)
    conv = isinstance(layer, (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)) and not isinstance(
        layer, (keras.layers.Conv1DTranspose, keras.layers.Conv2DTranspose, keras.layers.Conv3DTranspose)
    )
    return (dense or conv) and getattr(layer, "quantization_mode", None) is None


class FakeQuant(keras.layers.Layer):
    """Observer + fake quantizer for one tensor (not called as a layer: see :meth:`quantize`)."""

    def __init__(self, bits: int = 8, symmetric: bool = False, averaging: float = 0.01, **kwargs: Any):
        super().__init__(trainable=False, **kwargs)
        self.bits, self.symmetric, self.averaging = bits, symmetric, averaging
        if symmetric:
            self.qmin, self.qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        else:
            self.qmin, self.qmax = 0, 2**bits - 1
        var = dict(shape=(), dtype="float32", trainable=False)
        self.min_val = self.add_weight(name="min_val", initializer="zeros", **var)
        self.max_val = self.add_weight(name="max_val", initializer="zeros", **var)
        self.observed = self.add_weight(name="observed", initializer="zeros", **var)
        self.observer_enabled = self.add_weight(name="observer_enabled", initializer="ones", **var)
        self.built = True

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "bits": self.bits, "symmetric": self.symmetric, "averaging": self.averaging}

    def call(self, x: Any) -> Any:
        return self.fake_quant(x, observe=True)

    def fake_quant(self, x: Any, observe: bool = True) -> Any:
        """Fake-quantized ``x`` with straight-through gradient; updates the observer first
        when ``observe`` and the observer is enabled."""
        x32 = ops.cast(x, "float32")
        lo, hi = self.min_val, self.max_val
        if observe:
            seen = ops.stop_gradient(x32)
            new_lo, new_hi = ops.min(seen), ops.max(seen)
            if self.averaging:
                first = ops.equal(self.observed, 0.0)
                new_lo = ops.where(first, new_lo, self.min_val + self.averaging * (new_lo - self.min_val))
                new_hi = ops.where(first, new_hi, self.max_val + self.averaging * (new_hi - self.max_val))
            on = self.observer_enabled
            lo = on * new_lo + (1.0 - on) * self.min_val
            hi = on * new_hi + (1.0 - on) * self.max_val
            self.min_val.assign(lo)
            self.max_val.assign(hi)
            self.observed.assign(ops.maximum(self.observed, on))
        lo, hi = ops.minimum(lo, 0.0), ops.maximum(hi, 0.0)
        if self.symmetric:
            scale = ops.maximum(ops.maximum(-lo, hi) / ((self.qmax - self.qmin) / 2), _EPS)
            zero = 0.0
        else:
            scale = ops.maximum((hi - lo) / (self.qmax - self.qmin), _EPS)
            zero = ops.clip(self.qmin - ops.round(lo / scale), self.qmin, self.qmax)
        q = ops.clip(ops.round(x32 / scale) + zero, self.qmin, self.qmax)
        fq = (q - zero) * scale
        out = x32 + ops.stop_gradient(fq - x32)
        return ops.cast(out, x.dtype)


def layer_paths(model: Any) -> list[tuple[str, Any]]:
    """``(path, layer)`` for every layer under ``model`` (``block/dense`` for nested layers),
    depth first, observers excluded."""
    out: list[tuple[str, Any]] = []
    seen: set[int] = set()

    def walk(layer: Any, prefix: str) -> None:
        for child in layer._flatten_layers(include_self=False, recursive=False):
            if id(child) in seen or isinstance(child, FakeQuant):
                continue
            seen.add(id(child))
            path = f"{prefix}{child.name}"
            out.append((path, child))
            walk(child, path + "/")

    walk(model, "")
    return out


def qat_layers(model: Any) -> list[Any]:
    """The layers that carry fake quantization (in model order)."""
    return [layer for _, layer in layer_paths(model) if "_qat_original_call" in layer.__dict__]


def _training_call() -> bool:
    """Whether the current layer call is a training one (``None`` counts as training, as in
    torch where the observers run whenever they are enabled)."""
    try:
        from keras.src.backend.common import global_state

        ctx = global_state.get_global_attribute("current_call_ctx")
        return getattr(ctx, "training", None) is not False
    except Exception:  # pragma: no cover - private API moved
        return True


def _attach(layer: Any, name: str, child: Any) -> None:
    tracker = getattr(layer, "_tracker", None)
    if tracker is not None:
        tracker.unlock()
    try:
        setattr(layer, name, child)
    finally:
        if tracker is not None:
            tracker.lock()


def _fold_factor(bn: Any, dtype: Any) -> Any:
    """``gamma / sqrt(moving_variance + epsilon)`` of ``bn`` (``gamma`` = 1 without scale), one
    value per channel, read when the layer is called (the moving variance keeps changing). A
    channel whose ``gamma`` is 0 (pruned) gets 1: its conv output is divided by the factor
    again, and 0 / 0 would make every gradient NaN; the BN sees that channel's real output."""
    std = ops.sqrt(ops.cast(bn.moving_variance, "float32") + bn.epsilon)
    gamma = ops.cast(bn.gamma, "float32") if bn.gamma is not None else ops.ones_like(std)
    factor = gamma / std
    return ops.cast(ops.where(ops.equal(factor, 0.0), 1.0, factor), dtype)


def _qat_call(layer: Any, bn: Any = None) -> Any:
    """The fake-quantizing ``call`` of ``layer``; with ``bn``, the conv-BN fold (module docstring)."""

    def call(inputs: Any, *args: Any, **kwargs: Any) -> Any:
        observe = _training_call()
        x = layer.input_fake_quant.fake_quant(inputs, observe=observe)
        kernel = layer.kernel
        if isinstance(layer, keras.layers.Dense):
            w = layer.kernel_fake_quant.fake_quant(kernel, observe=observe)
            y = ops.matmul(x, w)
            if layer.bias is not None:
                y = ops.add(y, layer.bias)
        else:
            if layer.data_format == "channels_last":
                channels = (1,) * (layer.rank + 1) + (layer.filters,)
            else:
                channels = (1, layer.filters) + (1,) * layer.rank
            if bn is None:
                y = layer.convolution_op(x, layer.kernel_fake_quant.fake_quant(kernel, observe=observe))
            else:
                factor = _fold_factor(bn, kernel.dtype)  # (filters,): the kernel's last axis
                folded = layer.kernel_fake_quant.fake_quant(kernel * factor, observe=observe)
                y = ops.divide(layer.convolution_op(x, folded), ops.reshape(ops.cast(factor, x.dtype), channels))
            if layer.use_bias:
                y = ops.add(y, ops.reshape(layer.bias, channels))
        if layer.activation is not None:
            y = layer.activation(y)
        return y

    return call


def quantize_layer(layer: Any, bn: Any = None) -> None:
    """Give ``layer`` (Dense/ConvND, built) fake quantization in place, with ``bn`` folded into
    its kernel when given (a conv only); idempotent."""
    if "_qat_original_call" in layer.__dict__:
        return
    if bn is not None and isinstance(layer, keras.layers.Dense):
        raise ValueError(f"cannot fold BatchNormalization {bn.name!r} into Dense layer {layer.name!r}: only convs fold")
    if "input_fake_quant" not in layer.__dict__:
        _attach(layer, "input_fake_quant", FakeQuant(8, symmetric=False, averaging=0.01, name="input_fake_quant"))
        _attach(layer, "kernel_fake_quant", FakeQuant(8, symmetric=True, averaging=0.0, name="kernel_fake_quant"))
    layer.__dict__["_qat_original_call"] = layer.call
    object.__setattr__(layer, "call", _qat_call(layer, bn))


def unquantize_layer(layer: Any) -> None:
    """Put the original ``call`` back (the observer sub-layers stay, with their values)."""
    original = layer.__dict__.pop("_qat_original_call", None)
    if original is not None:
        layer.__dict__.pop("call", None)


def _targets(model: Any, modifier: Modifier) -> list[tuple[str, Any]]:
    submodules = [str(s).replace(".", "/") for s in modifier.args.get("submodules") or () if s != ""]
    ignore = {str(i).replace(".", "/") for i in modifier.args.get("ignore") or ()}
    found = []
    for path, layer in layer_paths(model):
        if not _is_quantizable(layer):
            continue
        names = {path, layer.name}
        if submodules and not any(n == s or n.startswith(s + "/") for s in submodules for n in names):
            continue
        if names & ignore or type(layer).__name__ in ignore or any(path.startswith(i + "/") for i in ignore):
            continue
        found.append((path, layer))
    return found


def nothing_to_quantize(model: Any, modifiers: Any) -> Iterator[Finding]:
    """P007, an error here, for each quantization modifier that would find no Dense or Conv
    layer of ``model`` to quantize at its start (refused at ``modify()``)."""
    return nothing_to_quantize_findings(modifiers, lambda m: [p for p, _ in _targets(model, m)], "Dense or Conv")


def _foldable(conv: Any, bn: Any) -> bool:
    """Whether ``bn`` can be folded into ``conv``: nothing non-linear between them, and the BN
    normalizes the conv's channel axis (one statistic per filter)."""
    activation = getattr(conv, "activation", None)
    if activation is not None and activation is not keras.activations.linear:
        return False
    ndim = conv.rank + 2
    channel = ndim - 1 if conv.data_format == "channels_last" else 1
    axis = bn.axis[0] if isinstance(bn.axis, (list, tuple)) and len(bn.axis) == 1 else bn.axis
    if not isinstance(axis, int) or axis % ndim != channel:
        return False
    return tuple(bn.moving_variance.shape) == (conv.filters,)


def _bns_after(model: Any, convs: list[Any]) -> list[tuple[str, Any, str, Any]]:
    """``(bn_path, bn, conv_path, conv)`` for the BatchNormalization layers fed directly by one
    of ``convs`` (functional graph), or, where the graph is unknown (subclassed models), listed
    right after one."""
    by_id = {id(c): c for c in convs}
    listed = layer_paths(model)
    path_of = {id(layer): path for path, layer in listed}
    found = []
    for i, (path, layer) in enumerate(listed):
        if not isinstance(layer, keras.layers.BatchNormalization):
            continue
        sources = []
        for node in getattr(layer, "_inbound_nodes", None) or []:
            for tensor in getattr(node, "input_tensors", None) or []:
                history = getattr(tensor, "_keras_history", None)
                if history is not None:
                    sources.append(history[0])
        if not sources and i > 0:
            sources = [listed[i - 1][1]]
        conv = next((s for s in sources if id(s) in by_id), None)
        if conv is not None:
            found.append((path, layer, path_of[id(conv)], conv))
    return found


def _fold_pairs(model: Any, convs: list[Any]) -> dict[str, str]:
    """conv path -> BN path for the convs to train with their BN folded in (the first
    foldable BN a conv feeds, in model order)."""
    pairs: dict[str, str] = {}
    for bn_path, bn, conv_path, conv in _bns_after(model, convs):
        if conv_path not in pairs and _foldable(conv, bn):
            pairs[conv_path] = bn_path
    return pairs


_OBSERVERS = ("input_fake_quant", "kernel_fake_quant")
_OBSERVER_VARS = ("min_val", "max_val", "observed", "observer_enabled")


class QuantizationState:
    """What QAT changed in a model, so it can be saved and applied again on resume: the
    quantized layers, the folded conv -> BN pairs, the frozen flags and the observer values."""

    def __init__(self, modifier: int, converted: list[str], folded: dict[str, str]):
        self.modifier, self.converted, self.folded = modifier, converted, folded
        self.bns = list(dict.fromkeys(folded.values()))  # the BNs freeze_bn_stats freezes
        self.model: Any = None
        self.observers_disabled = False
        self.bn_frozen = False
        self.bn_momentum: dict[str, float] = {}

    @classmethod
    def start(cls, model: Any, modifier: Modifier, index: int = -1) -> QuantizationState:
        targets = _targets(model, modifier)
        if not targets:
            raise ValueError(
                f"QuantizationModifier (line {modifier.span.line}) found no Dense or Conv layer to "
                "quantize (check submodules / ignore)"
            )
        fuse = modifier.args.get("model_fuse_fn_name") not in ("no_fuse",)
        convs = [layer for _, layer in targets if not isinstance(layer, keras.layers.Dense)]
        folded = _fold_pairs(model, convs) if fuse else {}
        layers = dict(layer_paths(model))
        for path, layer in targets:
            quantize_layer(layer, layers[folded[path]] if path in folded else None)
        state = cls(index, [p for p, _ in targets], folded)
        state.model = model
        return state

    def _layer(self, path: str) -> Any:
        return dict(layer_paths(self.model))[path]

    def disable_observers(self) -> None:
        for layer in qat_layers(self.model):
            layer.input_fake_quant.observer_enabled.assign(0.0)
            layer.kernel_fake_quant.observer_enabled.assign(0.0)
        self.observers_disabled = True

    def freeze_bn_stats(self) -> None:
        for path in self.bns:
            bn = self._layer(path)
            self.bn_momentum.setdefault(path, float(bn.momentum))
            bn.momentum = 1.0  # moving = moving * 1.0 + batch * 0.0
        self.bn_frozen = True

    def remove(self) -> None:
        """Undo: original ``call``s back, BN momentum back (observer variables stay)."""
        for layer in qat_layers(self.model):
            unquantize_layer(layer)
        for path, momentum in self.bn_momentum.items():
            self._layer(path).momentum = momentum

    def observer_values(self) -> dict[str, dict[str, dict[str, float]]]:
        """``{layer path: {"input_fake_quant": {"min_val": ..., ...}, "kernel_fake_quant": ...}}``
        as Python floats (exact for the float32 variables)."""
        layers = dict(layer_paths(self.model))
        return {
            path: {
                fq: {v: float(numpy_value(getattr(getattr(layers[path], fq), v))) for v in _OBSERVER_VARS}
                for fq in _OBSERVERS
            }
            for path in self.converted
        }

    def state(self) -> dict[str, Any]:
        """JSON-safe: what :meth:`restore` needs to rebuild QAT on a model loaded from the
        .keras file, observer values included (``load_model`` does not bring them back)."""
        return {
            "converted": list(self.converted),
            "folded": dict(self.folded),
            "bns": list(self.bns),
            "observers_disabled": self.observers_disabled,
            "bn_frozen": self.bn_frozen,
            "bn_momentum": dict(self.bn_momentum),
            "observers": self.observer_values(),
        }

    @classmethod
    def restore(cls, model: Any, saved: Mapping[str, Any]) -> QuantizationState:
        """Apply the saved structure again to a fresh model (resume) and give the observers
        their saved values. A state saved before observer values were recorded has none: load
        the weights after this (``model.load_weights``) to get them back from the file."""
        layers = dict(layer_paths(model))
        # a state saved before the fold existed: its BNs were frozen but not folded
        folded = dict(saved["folded"]) if "folded" in saved else {}
        missing = [p for p in [*saved["converted"], *folded.values(), *saved.get("bns", [])] if p not in layers]
        if missing:
            raise ValueError(
                f"the saved QAT state names layers this model does not have: {', '.join(sorted(set(missing)))} "
                f"(model layers: {', '.join(layers)}); resume with the model the checkpoint was saved from "
                "(keras.saving.load_model on the .keras file next to the recipe state)"
            )
        for path in saved["converted"]:
            quantize_layer(layers[path], layers[folded[path]] if path in folded else None)
        state = cls(-1, list(saved["converted"]), folded)
        if "folded" not in saved:
            state.bns = list(saved.get("bns", []))
        state.model = model
        state.bn_momentum = dict(saved.get("bn_momentum", {}))
        if saved.get("observers_disabled"):
            state.disable_observers()
        for path, observers in (saved.get("observers") or {}).items():
            for fq, values in observers.items():
                for name, value in values.items():
                    getattr(getattr(layers[path], fq), name).assign(float(value))
        if saved.get("bn_frozen"):
            for path in state.bns:
                layers[path].momentum = 1.0
            state.bn_frozen = True
        return state
