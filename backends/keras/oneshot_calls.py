"""What the Keras calibration host (:mod:`.oneshot`) adds for the smoothing transforms
(capabilities ``transform:smoothquant`` and ``transform:awq``), mirroring the PyTorch host's
methods of the same names: observers on a layer's input or output, calls of a layer recorded
and run again, and the weights a smoothing mapping scales.

**Observing** (``ModuleCalls._observing``) replaces a layer's ``call`` on the instance for the pass
(:func:`wrapped`): an *input* observer gets the layer's first argument as ``[tokens, in]``
float32 (a Linear layer's contracted axes, as the pruning observers see it; any other layer:
its last axis), an *output* observer the layer's output (the first element of a tuple) as
``[tokens, channels]`` (an ``EinsumDense``'s output axes in its kernel's order, so that the
channels are the rows of its ``(out, in)`` weight), and a *call recorder* each call's
arguments, as ``call`` receives them (kept as NumPy arrays in host memory with
``offload``).

**Running** (:meth:`ModuleCalls.run_module`) calls the layer again (``layer(*args,
**kwargs)``) on each recorded call with its current weights.

**Weights** (:meth:`ModuleCalls.weight`, ``bias`` and their setters): a Linear layer's
``(out, in)`` weight and its bias (a ``Dense`` bias, or an ``EinsumDense`` bias over the
kernel's output axes, in their order); a normalisation layer's vector: its ``scale``
(keras-hub's ``LlamaLayerNorm``, ``keras.layers.RMSNormalization``) or ``gamma``
(``LayerNormalization``, ``BatchNormalization``), and its ``beta`` as the bias. Such a vector
is what a Hugging Face norm calls ``weight``: keras-hub's converters load
``model.layers.0.input_layernorm.weight`` into ``LlamaLayerNorm.scale``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

import keras
from recipe_spec.oneshot.host import CallRecorder, Observer

from .params import assign_array, numpy_value

__all__ = ["ModuleCalls", "wrapped", "observe_input", "next_call", "shared_rows", "output_rows", "held", "is_held", "on_device"]

#: A normalisation layer's multiplier, then its shift, by attribute name.
_VECTOR = ("scale", "gamma")
_VECTOR_BIAS = ("beta",)


@contextlib.contextmanager
def wrapped(layer: Any, make: Callable[[Any], Any]) -> Iterator[None]:
    """``layer.call`` replaced on the instance by ``make(original)`` for the block's duration."""
    previous = layer.__dict__.get("call")
    original = layer.call
    object.__setattr__(layer, "call", make(original))
    try:
        yield
    finally:
        if previous is None:
            layer.__dict__.pop("call", None)
        else:
            object.__setattr__(layer, "call", previous)


class _Held(tuple):  # type: ignore[type-arg]
    """A cached call held in host memory (NumPy arrays)."""


def is_held(call: Any) -> bool:
    """Whether ``call`` was moved to host memory by :func:`held`."""
    return isinstance(call, _Held)


def _map(x: Any, fn: Any) -> Any:
    if isinstance(x, (tuple, list)):
        return type(x)(_map(v, fn) for v in x) if not isinstance(x, _Held) else _Held(_map(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return fn(x)


def held(call: Any) -> _Held:
    """``(args, kwargs)`` with every tensor turned into a NumPy array."""
    return _Held(_map(tuple(call), lambda v: keras.ops.convert_to_numpy(v) if keras.ops.is_tensor(v) else v))


def on_device(call: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` of a cached call, its arrays back as tensors where :func:`held` moved them."""
    if not is_held(call):
        return call  # type: ignore[no-any-return]
    args, kwargs = _map(tuple(call), lambda v: keras.ops.convert_to_tensor(v) if isinstance(v, np.ndarray) else v)
    return tuple(args), dict(kwargs)


def _numpy(x: Any) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x), dtype=np.float32)


def _out_letters(equation: str) -> tuple[str, str]:
    """An einsum's output letters and its kernel's letters that reach the output, in kernel order."""
    left, out = equation.replace(" ", "").split("->")
    kernel = left.split(",")[1]
    return out.replace("...", ""), "".join(c for c in kernel if c in out)


def output_rows(layer: Any, y: Any) -> tuple[np.ndarray, int]:
    """A layer's output as ``[tokens, channels]`` float32 (see the module docstring) and its
    number of sequences."""
    a = _numpy(y)
    sequences = int(a.shape[0]) if a.ndim > 2 else 1
    equation = getattr(layer, "equation", None) if isinstance(layer, keras.layers.EinsumDense) else None
    if equation:
        out, channels = _out_letters(equation)
        lead = a.ndim - len(out)
        at = [lead + out.index(c) for c in channels]
        a = a.transpose([i for i in range(a.ndim) if i not in at] + at)
        return a.reshape(-1, int(np.prod([a.shape[i] for i in range(a.ndim - len(at), a.ndim)]))), sequences
    return a.reshape(-1, a.shape[-1]), sequences


def _input_call(entries: list[tuple[Any, Observer]], rows: dict[Any, Any], seen: Any = None,
                key: Any = None) -> Callable[[Any], Any]:
    """Observers of one layer's input; ``entries``: ``(Linear view or None, observer)``;
    ``rows``: the inputs already made rows in this pass (:func:`shared_rows`); ``seen``: the pass's
    :class:`~recipe_spec.oneshot.host.ObservedCalls` (told ``key`` once the input is observed;
    it may stop the call there)."""
    def make(original: Any) -> Any:
        reversible = any(lin is not None and lin.reverse for lin, _ in entries)

        def call(inputs: Any, *args: Any, **kwargs: Any) -> Any:
            reverse = reversible and bool(kwargs.get("reverse", args[0] if args else False))
            for lin, observe in entries:
                if lin is None or lin.reverse == reverse:
                    observe_input(lin, observe, inputs, rows)
            if seen is not None:
                seen.called(key)
            return original(inputs, *args, **kwargs)
        return call
    return make


def observe_input(lin: Any, observe: Observer, inputs: Any, rows: dict[Any, Any]) -> None:
    """Hand ``observe`` a layer's input: a Linear view's ``[tokens, in]`` rows
    (:func:`shared_rows`), any other layer's last axis as columns."""
    if lin is None:
        a = _numpy(inputs)
        observe(a.reshape(-1, a.shape[-1]), int(a.shape[0]) if a.ndim > 2 else 1)
        return
    rows_, sequences = shared_rows(lin, inputs, rows)
    if len(rows_):  # an expert no token of this call is routed to is not observed
        observe(rows_, sequences)


def next_call(call: Any, args: Sequence[Any], kwargs: dict[str, Any], hidden: Any) -> Any:
    """The next block's call after ``call`` (``args``/``kwargs`` on the device): ``hidden`` in
    place of the hidden states, held in host memory where ``call`` was."""
    nxt = ((hidden, *args[1:]), kwargs) if args else (args, {**kwargs, "decoder_sequence": hidden})
    return held(nxt) if is_held(call) else nxt


def shared_rows(lin: Any, inputs: Any, seen: dict[Any, Any]) -> tuple[Any, int]:
    """``lin.rows_of(inputs)``, the same array for layers fed one input the same way (q/k/v,
    gate/up), so that their statistics share its products (:class:`~recipe_spec.oneshot.shared.hessian.SharedInput`
    knows a NumPy input by its identity). The last input is held, so its id is not reused."""
    axes = getattr(lin, "explicit", None)
    if axes is None:  # an expert's rows: its own (routed tokens, its intermediate)
        return lin.rows_of(inputs)
    if seen.get("input") is not inputs:
        seen.clear()
        seen["input"] = inputs
    key = (lin.columns, axes, tuple(lin.batch), tuple(lin.contract))
    if key not in seen:
        seen[key] = lin.rows_of(inputs)
    return seen[key]


def _output_call(layer: Any, observe: Observer) -> Callable[[Any], Any]:
    def make(original: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            observe(*output_rows(layer, result[0] if isinstance(result, (tuple, list)) else result))
            return result
        return call
    return make


def _record_call(record: CallRecorder, offload: bool) -> Callable[[Any], Any]:
    def make(original: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            record(held((args, kwargs)) if offload else (args, dict(kwargs)))
            return original(*args, **kwargs)
        return call
    return make


class ModuleCalls:
    """The host methods of the smoothing transforms, over the host's ``_layers`` (name ->
    layer) and ``_linear`` (name -> Linear view of a kernel) maps."""

    _layers: dict[str, Any]
    _linear: dict[str, Any]

    def _layer(self, name: str) -> Any:
        if name not in self._layers:
            raise ValueError(f"{name!r} is not a layer of this Keras model that can be observed or run on its "
                             "own: name a layer (the host's modules() lists them)")
        return self._layers[name]

    @contextlib.contextmanager
    def _observing(self, observers: Mapping[str, Observer], outputs: Mapping[str, Observer] | None = None,
                   calls: Mapping[str, CallRecorder] | None = None, offload: bool = False,
                   seen: Callable[[list[int]], Any] | None = None) -> Iterator[Any]:
        """Observers on the named layers' inputs and ``outputs``, and ``calls`` recorded, for
        the ``with`` block (see the module docstring); with ``seen`` (made from the observed
        layers' ids), the :class:`~recipe_spec.oneshot.host.ObservedCalls` it makes is yielded,
        told of each observed layer's call."""
        with contextlib.ExitStack() as stack:
            by_layer: dict[int, tuple[Any, list[tuple[Any, Observer]]]] = {}
            for name, observe in observers.items():
                lin = self._linear.get(name)
                layer = lin.layer if lin is not None else self._layer(name)
                by_layer.setdefault(id(layer), (layer, []))[1].append((lin, observe))
            rows: dict[Any, Any] = {}
            calls_seen = seen(list(by_layer)) if seen is not None else None
            for key, (layer, entries) in by_layer.items():
                stack.enter_context(wrapped(layer, _input_call(entries, rows, calls_seen, key)))
            for name, observe in (outputs or {}).items():
                layer = self._layer(name)
                stack.enter_context(wrapped(layer, _output_call(layer, observe)))
            for name, record in (calls or {}).items():
                stack.enter_context(wrapped(self._layer(name), _record_call(record, offload)))
            yield calls_seen

    def run_module(self, name: str, calls: Sequence[Any]) -> list[np.ndarray]:
        """Layer ``name`` run on each recorded call with its current weights: each output (the
        first element of a tuple) as float32, in the layer's output shape."""
        layer = self._layer(name)
        out = []
        for call in calls:
            args, kwargs = on_device(call)
            result = layer(*args, **kwargs)
            out.append(_numpy(result[0] if isinstance(result, (tuple, list)) else result))
        return out

    # -- weights ----------------------------------------------------------------------------------
    def _vector(self, name: str, keys: Sequence[str]) -> Any:
        layer = self._layer(name)
        for key in keys:
            v = getattr(layer, key, None)
            if isinstance(v, keras.Variable) and len(v.shape) == 1:
                return v
        return None

    def observed(self, name: str) -> np.ndarray:
        """A Linear layer's ``(out, in)`` weight as observers read it: float32 (NumPy has no
        bfloat16; a bfloat16 Keras model's scales are computed from its float32 values)."""
        return self.weight(name)

    def weight(self, name: str) -> np.ndarray:
        """A Linear layer's ``(out, in)`` weight, or a normalisation layer's scale vector
        (float32 copies)."""
        if name in self._linear:
            return self._linear[name].weight()
        v = self._vector(name, _VECTOR)
        if v is None:
            raise ValueError(f"{name} has no weight to scale: it is neither a Dense/EinsumDense layer nor a "
                             f"normalisation layer with a {' or '.join(_VECTOR)} vector")
        return np.array(numpy_value(v), dtype=np.float32)

    def set_weight(self, name: str, value: np.ndarray) -> None:
        """Write ``value`` into the weight :meth:`weight` reads, in the variable's dtype."""
        if name in self._linear:
            self._linear[name].set_weight(value)
            return
        v = self._vector(name, _VECTOR)
        if v is None:
            raise ValueError(f"{name} has no weight to write (see weight())")
        assign_array(v, np.asarray(value).reshape(v.shape))

    def _bias_variable(self, name: str) -> tuple[Any, tuple[int, ...] | None]:
        """The bias variable of ``name`` (None: none) and, for an EinsumDense, the order that
        lays it out along the kernel's output axes."""
        lin = self._linear.get(name)
        if lin is None:
            return self._vector(name, _VECTOR_BIAS), None
        bias = None if lin.reverse else getattr(lin.layer, "bias", None)
        if bias is None or not isinstance(lin.layer, keras.layers.EinsumDense):
            return bias, None
        axes = (getattr(lin.layer, "bias_axes", None) or "").replace(" ", "")
        _, channels = _out_letters(lin.layer.equation)
        if sorted(axes) != sorted(channels) or int(np.prod(bias.shape)) != lin.rows:
            raise ValueError(f"{name}: its bias (axes {axes!r}) does not lie along every output axis of its "
                             f"kernel ({channels!r}), so it cannot be scaled per output row")
        return bias, tuple(axes.index(c) for c in channels)

    def bias(self, name: str) -> np.ndarray | None:
        """The bias of ``name`` as a float32 vector along its weight's rows; None when it has none."""
        bias, order = self._bias_variable(name)
        if bias is None:
            return None
        a = np.array(numpy_value(bias), dtype=np.float32)
        return (a.transpose(order) if order is not None else a).reshape(-1)

    def set_bias(self, name: str, value: np.ndarray) -> None:
        """Write ``value`` (a vector along the weight's rows) into ``name``'s bias."""
        bias, order = self._bias_variable(name)
        if bias is None:
            raise ValueError(f"{name} has no bias to write")
        a = np.asarray(value)
        if order is not None:
            a = a.reshape([bias.shape[i] for i in order]).transpose(np.argsort(order))
        assign_array(bias, a.reshape(bias.shape))
