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
``observer_enabled``): they are part of ``model.weights`` and of saved weights
(``conv1/input_fake_quant/min_val``), and no layer or existing variable is renamed.

Observers update only in training calls (``model.fit``; not in ``predict``/``evaluate``); at
``disable_quantization_observer_epoch`` their ``observer_enabled`` variables are set to 0 and
the ranges stay frozen. At ``freeze_bn_stats_epoch`` the BatchNormalization layers fed directly
by a quantized conv get ``momentum = 1.0`` (Keras: ``moving = moving * momentum + batch *
(1 - momentum)``), so their moving statistics stop changing; the train function is traced
again because Keras reads ``momentum`` at trace time. Unlike the torch backend, the BN is not
folded into the quantized conv kernel (``model_fuse_fn_name`` is ignored).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import keras
from keras import ops

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


def _qat_call(layer: Any) -> Any:
    def call(inputs: Any, *args: Any, **kwargs: Any) -> Any:
        observe = _training_call()
        x = layer.input_fake_quant.fake_quant(inputs, observe=observe)
        w = layer.kernel_fake_quant.fake_quant(layer.kernel, observe=observe)
        if isinstance(layer, keras.layers.Dense):
            y = ops.matmul(x, w)
            if layer.bias is not None:
                y = ops.add(y, layer.bias)
        else:
            y = layer.convolution_op(x, w)
            if layer.use_bias:
                if layer.data_format == "channels_last":
                    shape = (1,) * (layer.rank + 1) + (layer.filters,)
                else:
                    shape = (1, layer.filters) + (1,) * layer.rank
                y = ops.add(y, ops.reshape(layer.bias, shape))
        if layer.activation is not None:
            y = layer.activation(y)
        return y

    return call


def quantize_layer(layer: Any) -> None:
    """Give ``layer`` (Dense/ConvND, built) fake quantization in place; idempotent."""
    if "_qat_original_call" in layer.__dict__:
        return
    if "input_fake_quant" not in layer.__dict__:
        _attach(layer, "input_fake_quant", FakeQuant(8, symmetric=False, averaging=0.01, name="input_fake_quant"))
        _attach(layer, "kernel_fake_quant", FakeQuant(8, symmetric=True, averaging=0.0, name="kernel_fake_quant"))
    layer.__dict__["_qat_original_call"] = layer.call
    object.__setattr__(layer, "call", _qat_call(layer))


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


def _bns_after(model: Any, convs: list[Any]) -> list[tuple[str, Any]]:
    """The BatchNormalization layers fed directly by one of ``convs`` (functional graph), or,
    where the graph is unknown (subclassed models), those listed right after one."""
    conv_ids = {id(c) for c in convs}
    found = []
    listed = layer_paths(model)
    for i, (path, layer) in enumerate(listed):
        if not isinstance(layer, keras.layers.BatchNormalization):
            continue
        sources = []
        for node in getattr(layer, "_inbound_nodes", None) or []:
            for tensor in getattr(node, "input_tensors", None) or []:
                history = getattr(tensor, "_keras_history", None)
                if history is not None:
                    sources.append(history[0])
        if sources:
            hit = any(id(s) in conv_ids for s in sources)
        else:
            hit = i > 0 and id(listed[i - 1][1]) in conv_ids
        if hit:
            found.append((path, layer))
    return found


class QuantizationState:
    """What QAT changed in a model, so it can be saved and applied again on resume."""

    def __init__(self, modifier: int, converted: list[str], bns: list[str]):
        self.modifier, self.converted, self.bns = modifier, converted, bns
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
        for _, layer in targets:
            quantize_layer(layer)
        convs = [layer for _, layer in targets if not isinstance(layer, keras.layers.Dense)]
        state = cls(index, [p for p, _ in targets], [p for p, _ in _bns_after(model, convs)])
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

    def state(self) -> dict[str, Any]:
        return {
            "converted": list(self.converted),
            "bns": list(self.bns),
            "observers_disabled": self.observers_disabled,
            "bn_frozen": self.bn_frozen,
            "bn_momentum": dict(self.bn_momentum),
        }

    @classmethod
    def restore(cls, model: Any, saved: Mapping[str, Any]) -> QuantizationState:
        """Apply the saved structure again to a fresh model (resume); load the weights after
        this so the observer values come back too."""
        layers = dict(layer_paths(model))
        for path in saved["converted"]:
            quantize_layer(layers[path])
        state = cls(-1, list(saved["converted"]), list(saved.get("bns", [])))
        state.model = model
        state.bn_momentum = dict(saved.get("bn_momentum", {}))
        if saved.get("observers_disabled"):
            state.disable_observers()
        if saved.get("bn_frozen"):
            for path in state.bns:
                layers[path].momentum = 1.0
            state.bn_frozen = True
        return state
