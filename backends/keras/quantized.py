"""Keras 3's own quantized layers holding a one-shot run's integers and scales.

A ``Dense`` or ``EinsumDense`` whose weight a one-shot modifier put on a grid
(:mod:`recipe_spec.quantization`) becomes the layer Keras itself builds for that grid
(``layer.quantize(mode, config)``: the same variables, dtype policy and saved form), its
variables holding *our* integers, scales and zero points (built by
:func:`.quantized_build.build_quantized`, without Keras's own quantization of the float
kernel). ``model.save`` / ``keras.saving.load_model``
round-trip it, and inference runs in Keras's quantized call on every backend.

**Which Keras layer a scheme becomes** (Keras 3.15; weights ``(out, in)``, ``s`` our scale,
``z`` our zero point, ``q`` our integers):

==========================================  ======================================================
scheme (weights / input activations)        Keras layer mode and what it holds
==========================================  ======================================================
int8 symmetric channel (or tensor) /        ``int8``: ``kernel`` int8 ``q`` in the kernel's layout,
int8 symmetric per-token dynamic (W8A8)     ``kernel_scale = 1/s`` per output; inputs quantized per
                                            token by Keras's ``AbsMaxQuantizer`` (scale
                                            ``127/(absmax+1e-7)``, range ±127; compressed-tensors:
                                            ``absmax/127.5``, range -128..127)
int8 symmetric channel (or tensor) /        ``int8`` with ``activation_quantizer=None``
none (W8A16 per channel)                    (weight-only; see the keras-hub note below)
int4 symmetric channel (or tensor) / none   ``int4`` per channel (``block_size -1``): ``q`` packed two
                                            per byte, ``kernel_scale = 1/s``
int4 group g, symmetric or not / none       ``int4`` sub-channel (``block_size g``): ``kernel_scale =
(W4A16, W4A16_ASYM)                         sᵀ``, ``kernel_zero = zᵀ`` (int8), ``g_idx`` (activation
                                            order ``group`` too)
int4 asymmetric channel / none              ``int4`` sub-channel with one group of ``in`` columns
FP8 e4m3 per tensor / FP8 per-tensor        ``float8``: ``kernel`` = our dequantized weight (float32:
static (FP8)                                Keras keeps it in float and casts it to e4m3 in the
                                            call), ``kernel_scale = s``, ``inputs_scale`` = the
                                            calibrated input scale
==========================================  ======================================================

**Refused** (:class:`QuantizationRefused`, naming the scheme and the layer): weight-only
integers of 2, 3, 5, 6, 7 bits, int8 with group scales (the ``W8A16`` preset) or a zero point,
which only Keras's ``gptq`` mode holds, and Keras 3.15.1 does not save its zero points
(``load_model`` then fails); int4 weights with quantized activations (``W4A8``, ``W4A4``);
FP8 weights per channel or group and dynamic FP8 activations (``FP8_DYNAMIC``, ``W4AFP8``:
Keras's ``float8`` has one kernel scale and one static input scale); FP8 weight-only;
static or asymmetric integer activations; layers other than a plain ``Dense``/``EinsumDense``
(Keras quantizes no subclass), and an ``EinsumDense`` whose contracted kernel axes do not come
first (Keras's int4 reshapes such a kernel wrongly).

**keras-hub.** A keras-hub backbone saves its layers' dtype policies (``DTypePolicyMap``) and
not their quantization configs, so a weight-only ``int8`` layer comes back from a ``.keras``
file with Keras's default per-token activation quantizer: the host refuses to save such a model
(:func:`saved_config_is_lost`). keras-hub 0.32's ``from_preset`` rebuilds quantized layers as
float ones (even after Keras's own ``model.quantize``), so the host saves ``model.keras``.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import keras
from recipe_spec.masks.numpy_ops import NUMPY_OPS, transposed
from recipe_spec.quantization.args import PRESET_WEIGHTS, QuantArgs
from recipe_spec.quantization.grid import dequantize, quantize
from recipe_spec.quantization.scheme import PRESET_ACTIVATIONS, ActivationArgs

from .layout import linear_axes
from .params import assign_array
from .quantized_build import build_quantized
from .quantized_reads import int4_weight, pack_int4

__all__ = ["KerasMode", "QuantizationRefused", "QuantizedLayer", "keras_mode", "quantize_layer",
           "describe_scheme", "report_table", "saved_config_is_lost", "keras_weight",
           "check_quantizable", "on_grid", "grid_values", "group_index", "hub_backbone_layers", "weight_only_int8",
           "keras_version", "WEIGHT_ONLY_INT8_LOST"]


class QuantizationRefused(NotImplementedError, ValueError):
    """A scheme Keras has no faithful quantized layer for, or a layer it cannot quantize (what
    the calibration-host protocol's ``attach_quantization`` raises: ``NotImplementedError``)."""


@dataclass(frozen=True)
class KerasMode:
    """The Keras layer a scheme becomes: ``mode`` (``int8``, ``int4``, ``float8``),
    ``block_size`` (int4: ``-1`` per channel, else the group), ``quantize_inputs`` (int8:
    Keras's per-token abs-max quantizer on), ``activations`` (what the call does to inputs)."""

    mode: str
    block_size: int = -1
    quantize_inputs: bool = False
    activations: str = "float (weight-only)"

    def config(self) -> Any:
        """The Keras quantization config ``layer.quantize`` is given."""
        q = keras.quantizers
        if self.mode == "int8":
            return q.Int8QuantizationConfig() if self.quantize_inputs else q.Int8QuantizationConfig(
                activation_quantizer=None)
        if self.mode == "int4":
            return q.Int4QuantizationConfig(block_size=self.block_size)
        return q.Float8QuantizationConfig()


def describe_scheme(args: QuantArgs, activations: ActivationArgs | None) -> str:
    """The preset's name when ``(args, activations)`` is one (``W4A16``), else the grid in words."""
    for name, weights in PRESET_WEIGHTS.items():
        if weights == args and PRESET_ACTIVATIONS.get(name, 0) == activations:
            return name
    kind = f"fp{args.num_bits}" if args.type == "float" else f"int{args.num_bits}"
    where = f"group {args.group_size}" if args.strategy in ("group", "tensor_group") else args.strategy
    sym = "symmetric" if args.symmetric else "asymmetric"
    acts = activations.describe() + " activations" if activations is not None else "float activations"
    return f"{kind} {where} {sym} weights, {acts}"


def keras_mode(args: QuantArgs, activations: ActivationArgs | None, *, layer: str, in_features: int) -> KerasMode:
    """The Keras layer mode for a scheme (the table in the module docstring), or
    :class:`QuantizationRefused` naming the scheme, the layer and why."""
    scheme = describe_scheme(args, activations)

    def refuse(why: str, fix: str = "leave the layer out of the quantized targets (ignore:) or "
               "pick a scheme Keras holds: W8A8, W4A16, W4A16_ASYM, FP8, int8 or int4 per channel") -> None:
        raise QuantizationRefused(f"{layer}: Keras {keras.__version__} has no quantized layer for {scheme}: "
                                  f"{why}; {fix}")

    if args.num_bits == 4 and args.type == "float" or args.mx:
        refuse("Keras's quantized layers are int8, int4 and float8 (e4m3, one scale per tensor): none holds "
               "FP4 (e2m1) weights or MX power-of-two group scales", "run this scheme on PyTorch, or pick a scheme "
               "Keras holds: W8A8, W4A16, W4A16_ASYM, FP8, int8 or int4 per channel")
    if args.type == "float":
        if activations is None or activations.type != "float":
            refuse("its float8 layer always casts the inputs to FP8 (no FP8 weight-only layer)")
        assert activations is not None
        if args.strategy != "tensor":
            refuse(f"its float8 layer holds one kernel scale per tensor, not per {args.strategy}")
        if activations.dynamic or activations.strategy != "tensor":
            refuse("its float8 layer scales the inputs by one static, calibrated scale, not per token at run time")
        return KerasMode("float8", activations="float8 e4m3 per tensor static (inputs_scale)")
    if activations is not None:
        if activations.type != "int" or activations.num_bits != 8 or not activations.symmetric \
                or not activations.dynamic or activations.strategy != "token":
            refuse(f"its int8 layer quantizes inputs only to int8, symmetric, per token at run time, "
                   f"not {activations.describe()}")
        if args.num_bits != 8 or not args.symmetric or args.strategy == "group":
            refuse("only its int8 layer quantizes the inputs, and it holds int8 symmetric weights with one "
                   "scale per output channel")
        return KerasMode("int8", quantize_inputs=True,
                         activations="int8 per token dynamic (Keras AbsMaxQuantizer: 127/absmax, ±127)")
    if args.num_bits == 4:
        if args.strategy == "group":
            return KerasMode("int4", int(args.group_size or -1))
        return KerasMode("int4", -1 if args.symmetric else in_features)
    if args.num_bits == 8 and args.symmetric and args.strategy != "group":
        return KerasMode("int8")
    refuse(f"weight-only int{args.num_bits} {'group' if args.strategy == 'group' else ''} "
           f"{'symmetric' if args.symmetric else 'asymmetric'} weights fit only its 'gptq' mode, whose zero "
           "points Keras 3.15.1 does not save (load_model fails)")
    raise AssertionError  # unreachable


@dataclass(frozen=True)
class QuantizedLayer:
    """One layer's line of the report: its ``name``, Keras class, ``scheme``, Keras ``mode``
    (as its dtype policy names it: ``int8``, ``int4/128``, ``int4/-1``, ``float8``),
    what its call does to ``activations``; ``max_error`` / ``mean_error``: ``|W - Ŵ|`` between
    the float weight before quantization and the weight the Keras layer computes with;
    ``drift``: the largest ``|Ŵ - dequantize(q)|`` (our dequantized weight: float rounding
    only); ``bytes_before`` / ``bytes_after``: the layer's variables."""

    name: str
    layer_class: str
    scheme: str
    mode: str
    activations: str
    max_error: float
    mean_error: float
    drift: float
    bytes_before: int
    bytes_after: int


def report_table(rows: Sequence[QuantizedLayer]) -> str:
    """The report as a text table, one layer a line, and the totals."""
    head = f"{'layer':<40} {'keras mode':<10} {'max err':>10} {'mean err':>10} {'bytes':>19}  scheme"
    lines = [head, "-" * len(head)]
    for r in rows:
        mode = r.mode
        lines.append(f"{r.name:<40} {mode:<10} {r.max_error:>10.3g} {r.mean_error:>10.3g} "
                     f"{r.bytes_before:>9} -> {r.bytes_after:<7}  {r.scheme}")
    before, after = sum(r.bytes_before for r in rows), sum(r.bytes_after for r in rows)
    lines.append(f"{'total':<40} {'':<10} {'':>10} {'':>10} {before:>9} -> {after:<7}")
    return "\n".join(lines)


def _nbytes(layer: Any) -> int:
    return int(sum(int(np.prod(v.shape)) * np.dtype(keras.backend.standardize_dtype(v.dtype)).itemsize
                   for v in layer.weights))


def _axes(layer: Any) -> tuple[list[int], list[int]]:
    """The kernel's contracted (``in``) and output axes, in kernel order."""
    if isinstance(layer, keras.layers.EinsumDense):
        axes = linear_axes(layer.equation)
        if axes is None:
            raise QuantizationRefused(f"EinsumDense {layer.name!r} (equation {layer.equation!r}) is not a plain "
                                      "linear map of its input")
        return axes[0], axes[1]
    return [0], [1]


def _to_kernel(w: np.ndarray, shape: tuple[int, ...], order: list[int]) -> np.ndarray:
    """An ``(out, in)`` array in the kernel's own layout (``order``: in axes, then out axes)."""
    return transposed(w).reshape([shape[i] for i in order]).transpose(np.argsort(order))


def _from_kernel(k: np.ndarray, order: list[int], columns: int) -> np.ndarray:
    return transposed(np.asarray(k).transpose(order).reshape(columns, -1))


def _broadcast(w: np.ndarray, a: Any, args: QuantArgs, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``(out, in)`` weight ``w`` and a stored scale or zero point ``a`` in shapes that
    broadcast against each other, entry for entry as if ``a`` were spread over the whole
    weight: groups of consecutive columns as a ``(rows, groups, size)`` view of ``w`` beside
    ``(rows, groups, 1)`` (no copy), any other group order by spreading ``a`` over the columns."""
    rows, columns = w.shape
    a = np.asarray(a, dtype=np.float32)
    if args.strategy != "group":
        return w, a.reshape(-1, 1) if a.size == rows else a.reshape(1, 1)
    size = int(args.group_size or columns)
    if columns % size == 0 and a.shape == (rows, columns // size) \
            and np.array_equal(groups, np.arange(columns) // size):
        return w.reshape(rows, columns // size, size), a.reshape(rows, columns // size, 1)
    return w, a[:, groups]


def group_index(args: QuantArgs, columns: int, g_idx: Sequence[int] | None = None) -> np.ndarray:
    """Each input column's group: ``g_idx`` as given, else ``column // group_size`` (0 for
    channel and tensor scales)."""
    if g_idx is not None:
        return np.asarray(g_idx, dtype=np.int64)
    return np.arange(columns) // int(args.group_size or columns)


def on_grid(weight: Any, scale: Any, zero_point: Any, args: QuantArgs,
            g_idx: Sequence[int] | None = None) -> np.ndarray:
    """``weight`` (``(out, in)``) moved onto the grid of its stored qparams, each column on its
    group's (``g_idx``): the float weight a quantized layer computes with."""
    return grid_values(weight, scale, zero_point, args, g_idx)[1]


def grid_values(weight: Any, scale: Any, zero_point: Any, args: QuantArgs,
                g_idx: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``weight``'s integers on the grid of its qparams and their dequantized float32 weight
    (:func:`on_grid`), both ``(out, in)``."""
    w = np.asarray(weight, dtype=np.float32)
    rows, columns = w.shape
    groups = group_index(args, columns, g_idx)
    if zero_point is None:
        zero_point = np.zeros_like(np.asarray(scale, dtype=np.float32))
    view, s = _broadcast(w, scale, args, groups)
    z = _broadcast(w, zero_point, args, groups)[1]
    q = np.asarray(quantize(NUMPY_OPS, view, s, z, args), dtype=np.float32)
    return q.reshape(rows, columns), np.asarray(dequantize(NUMPY_OPS, q, s, z, args), dtype=np.float32).reshape(rows, columns)


def check_quantizable(layer: Any, args: QuantArgs, activations: ActivationArgs | None, *, name: str,
                      input_scale: float | None = None,
                      need_input_scale: bool = True) -> tuple[KerasMode, list[int], list[int], tuple[int, ...]]:
    """Refuse (:class:`QuantizationRefused`, naming the layer and the scheme) what
    :func:`quantize_layer` cannot do, before anything changes; else the Keras mode, the
    kernel's contracted and output axes and its shape."""
    if type(layer) not in (keras.layers.Dense, keras.layers.EinsumDense):
        raise QuantizationRefused(f"{name}: a {type(layer).__name__} is not a plain Dense or EinsumDense, and "
                                  "Keras quantizes no other layer class; leave it out of the targets")
    if not layer.built or layer.quantization_mode is not None:
        raise QuantizationRefused(f"{name}: the layer is {'not built' if not layer.built else 'already quantized'}")
    kin, kout = _axes(layer)
    shape = tuple(int(d) for d in layer._kernel.shape)
    mode = keras_mode(args, activations, layer=name, in_features=int(np.prod([shape[i] for i in kin])))
    if mode.mode == "int4" and isinstance(layer, keras.layers.EinsumDense) and kin != list(range(len(kin))):
        raise QuantizationRefused(f"{name}: Keras's int4 EinsumDense reshapes the kernel to (in, out), which "
                                  f"needs the contracted axes first; equation {layer.equation!r} has them at {kin}")
    if mode.mode == "float8" and need_input_scale and (input_scale is None or not float(input_scale) > 0):
        raise QuantizationRefused(f"{name}: {describe_scheme(args, activations)} needs the calibrated input "
                                  f"scale (input_scale > 0), got {input_scale!r}")
    return mode, kin, kout, shape


def quantize_layer(layer: Any, weight: Any, scale: Any, zero_point: Any, args: QuantArgs, *,
                   activations: ActivationArgs | None = None, input_scale: float | None = None,
                   g_idx: Sequence[int] | None = None, name: str | None = None,
                   reference: Any = None, integers: np.ndarray | None = None) -> QuantizedLayer:
    """Turn ``layer`` (a built, unquantized ``Dense`` or ``EinsumDense``) into Keras's quantized
    layer for ``(args, activations)`` holding ``weight``'s integers on the grid of ``scale`` /
    ``zero_point`` (compressed-tensors' shapes; ``g_idx``: each input column's group).
    ``weight``: ``(out, in)``, on the grid (GPTQ's dequantized weight, or any float weight:
    it is quantized with the given qparams); ``input_scale``: the calibrated FP8 input scale
    (``float8`` only); ``reference``: the float weight the report's error is measured against
    (default: the layer's kernel before); ``integers``: ``weight``'s integers when ``weight``
    is already :func:`on_grid` (both from :func:`grid_values`: not computed again). The report
    line; :class:`QuantizationRefused` before anything changes when Keras has no layer for it."""
    label = name or layer.name
    mode, kin, kout, shape = check_quantizable(layer, args, activations, name=label, input_scale=input_scale)
    order = kin + kout
    columns = int(np.prod([shape[i] for i in kin]))
    rows = int(np.prod([shape[i] for i in kout]))
    w = np.asarray(weight, dtype=np.float32)
    if w.shape != (rows, columns):
        raise ValueError(f"{label}: the weight has shape {list(w.shape)}, the layer's is [{rows}, {columns}] (out, in)")
    groups = group_index(args, columns, g_idx)
    if integers is not None:
        q, ours = np.asarray(integers, dtype=np.float32), w
    else:
        q, ours = grid_values(w, scale, zero_point, args, g_idx)
    s = np.asarray(scale, dtype=np.float32)
    z = np.asarray(zero_point, dtype=np.float32) if zero_point is not None else np.zeros_like(s)
    before = np.asarray(reference if reference is not None else _from_kernel(
        keras.ops.convert_to_numpy(layer._kernel), order, columns), dtype=np.float32)
    bytes_before = _nbytes(layer)

    with _deferred_collect():
        build_quantized(layer, mode.mode, mode.config())
    _assign(layer, mode, q, s, z, args, groups, ours, shape, order, input_scale)
    if keras.backend.backend() == "torch":
        layer._track_variables()
    deq = keras_weight(layer)
    policy = mode.mode if mode.mode != "int4" else f"int4/{mode.block_size}"
    return QuantizedLayer(label, type(layer).__name__, describe_scheme(args, activations), policy,
                          mode.activations, float(np.abs(deq - before).max()), float(np.abs(deq - before).mean()),
                          float(np.abs(deq - ours).max()), bytes_before, _nbytes(layer))


@contextlib.contextmanager
def _deferred_collect() -> Iterator[None]:
    """No full garbage collection inside the block: Keras's ``Layer.__delattr__`` runs
    ``gc.collect()`` for each variable a layer drops (its float kernel, when quantized), a third
    of a second each in a process holding a framework, the better part of a one-shot run on a
    small model; the kernel's memory goes when its last reference does, and Python's own
    collection still runs. Restored on exit."""
    collect = gc.collect
    gc.collect = lambda *args, **kwargs: 0
    try:
        yield
    finally:
        gc.collect = collect


def _per_row(a: np.ndarray, rows: int) -> np.ndarray:
    """A stored channel or tensor scale, one value per output row."""
    return np.ascontiguousarray(np.broadcast_to(a.reshape(-1), (rows,)))


def _assign(layer: Any, mode: KerasMode, q: np.ndarray, s: np.ndarray, z: np.ndarray, args: QuantArgs,
            groups: np.ndarray, ours: np.ndarray, shape: tuple[int, ...], order: list[int],
            input_scale: float | None) -> None:
    if mode.mode == "float8":
        assign_array(layer._kernel, _to_kernel(ours, shape, order).astype(np.float32))
        assign_array(layer.kernel_scale, np.float32(s.reshape(-1)[0]))
        assign_array(layer.inputs_scale, np.float32(input_scale))
        return
    if mode.mode == "int8":
        assign_array(layer._kernel, _to_kernel(q, shape, order).astype(np.int8))
        recip = (1.0 / _per_row(s, q.shape[0])).astype(np.float32)
        if isinstance(layer, keras.layers.EinsumDense):  # Keras's own layout of a per-output scale
            kin, kout = _axes(layer)
            per_out = np.expand_dims(recip.reshape([shape[i] for i in kout]), tuple(kin))
            recip = keras.ops.convert_to_numpy(layer._adjust_scale_for_quant(per_out, "kernel"))
        assign_array(layer.kernel_scale, recip.reshape(tuple(int(d) for d in layer.kernel_scale.shape)))
        return
    # (in, out): contracted axes first (checked), the kernel's flat layout
    assign_array(layer._kernel, pack_int4(q.T))
    if mode.block_size == -1:
        assign_array(layer.kernel_scale, (1.0 / _per_row(s, q.shape[0])).astype(np.float32))
        return
    n_groups = int(layer.kernel_scale.shape[0])
    # each Keras group's column of the stored scale: its own (one no column belongs to: the first column's)
    first = groups[np.array([int(np.argmax(groups == g)) for g in range(n_groups)])]
    assign_array(layer.kernel_scale, np.ascontiguousarray(s[:, first].T).astype(np.float32))
    zeros = z[:, first].T if not args.symmetric else np.zeros((n_groups, q.shape[0]), np.float32)
    assign_array(layer.kernel_zero, zeros.astype(np.int8))
    assign_array(layer.g_idx, groups.astype(np.float32))


def keras_weight(layer: Any) -> np.ndarray:
    """The ``(out, in)`` float32 weight a quantized Keras layer computes with, read back from
    its variables: int8 and float8 with Keras's own functions (``quantize_and_dequantize``,
    ``_adjust_scale_for_dequant``), int4 by :func:`.quantized_reads.int4_weight` (Keras's
    ``unpack_int4`` and ``dequantize_with_sz_map`` written in NumPy, the same bits)."""
    kin, kout = _axes(layer)
    mode = layer.quantization_mode
    ops, quantizers = keras.ops, keras.quantizers
    if mode == "float8":
        k = quantizers.quantize_and_dequantize(layer._kernel, layer.kernel_scale, "float8_e4m3fn", "float32")
    elif mode == "int8":
        scale = layer.kernel_scale
        if isinstance(layer, keras.layers.EinsumDense):
            scale = layer._adjust_scale_for_dequant(scale)
        k = ops.divide(ops.cast(layer._kernel, "float32"), scale)
    elif mode == "int4":
        dense = isinstance(layer, keras.layers.Dense)
        shape = (layer._orig_input_dim, layer._orig_output_dim) if dense else tuple(layer.original_kernel_shape)
        columns = int(shape[1] if dense else layer._int4_unpacked_column_size)
        k = int4_weight(layer, columns).reshape(shape)
    else:
        raise ValueError(f"layer {layer.name!r} is not quantized (quantization_mode {mode!r})")
    k = np.asarray(ops.convert_to_numpy(k), dtype=np.float32)
    return _from_kernel(k, kin + kout, int(np.prod([k.shape[i] for i in kin])))


#: Why a keras-hub model holding weight-only int8 layers is not saved.
WEIGHT_ONLY_INT8_LOST = ("weight-only int8 layers of a keras-hub model come back from a saved preset or .keras "
                         "file quantizing their inputs (keras-hub saves their dtype policy, not their quantization "
                         "config); save with W8A8 or an int4 scheme, or use the model in memory (no output_dir)")


def keras_version() -> str:
    """The installed Keras version (named in refusals)."""
    return str(keras.__version__)


def weight_only_int8(args: QuantArgs, activations: ActivationArgs | None) -> bool:
    """Whether a scheme becomes Keras's ``int8`` layer without an activation quantizer."""
    return activations is None and args.type == "int" and args.num_bits == 8


def hub_backbone_layers(model: Any) -> set[int]:
    """The ids of the layers inside a keras-hub ``Backbone`` of ``model``."""
    out: set[int] = set()
    for layer in model._flatten_layers(include_self=True, recursive=True):
        if any(c.__name__ == "Backbone" and c.__module__.startswith("keras_hub") for c in type(layer).__mro__):
            out.update(id(inner) for inner in layer._flatten_layers(include_self=False, recursive=True))
    return out


def saved_config_is_lost(model: Any) -> list[str]:
    """The paths of weight-only ``int8`` layers inside a keras-hub backbone: a saved preset or
    ``.keras`` file keeps their dtype policy and not their quantization config, so they come
    back quantizing their inputs."""
    inside = hub_backbone_layers(model)
    return [layer.path for layer in model._flatten_layers(include_self=True, recursive=True)
            if id(layer) in inside and layer.quantization_mode == "int8"
            and getattr(layer, "inputs_quantizer", 1) is None]
