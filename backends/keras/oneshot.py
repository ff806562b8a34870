"""The Keras 3 calibration host of the one-shot pipeline
(:class:`recipe_spec.oneshot.host.CalibrationHost`) on the TensorFlow, JAX and torch backends.
The pipeline and the solvers live in :mod:`recipe_spec.oneshot`; the host's arrays are NumPy's
(:data:`recipe_spec.masks.numpy_ops.NUMPY_OPS`), and SparseGPT, GPTQ and Wanda solve on Keras's
own tensors where Keras runs on an accelerator (``solver``: :func:`.solver_ops.solver_for`).

**Modules.** Every layer under the model, depth first. ``Dense`` and ``EinsumDense`` (a plain
contraction such as ``bqm,muh->bquh``) are prunable and also answer to the class name
``Linear``. A kernel is seen as the Linear weight it is, ``(out, in)``: ``in`` the contracted
axes, ``out`` the others, each in kernel order (an attention kernel ``(hidden, heads,
head_dim)`` is ``(heads·head_dim, hidden)``); solved weights go back in the kernel's own shape.
The untied ``reverse_embeddings`` of a ``ReversibleEmbedding`` (keras-hub's output projection)
is one more Linear module.

**Names.** A layer is named by its parent's name and its own, joined with ``.``
(``block.dense``). A keras-hub model loaded from a Hugging Face checkpoint answers to the
checkpoint's names, read from keras-hub's own conversion tables (:mod:`.hub`): the kernel
loaded from ``model.layers.0.self_attn.q_proj.weight`` is ``model.layers.0.self_attn.q_proj``,
the reverse embeddings ``lm_head``, a layer holding several such weights takes the name they
share (``model.layers.0``), and modules come in the checkpoint's order.

**Observers** replace a target's ``call`` on the instance during a pass (as
:mod:`.quantization` does) and hand its input to the core as ``[tokens, in]`` float32. The
model is called with ``training=False`` (torch: without gradients); on JAX and TensorFlow a
block's calibration and propagation calls are compiled, the observed inputs returned as the
program's outputs (:mod:`.compiled`), and run eagerly where they cannot be.

**Blocks.** The repeated block is a set of sibling layers of one class that hold Linear
layers, each fed by the one before (keras-hub's ``transformer_layers``; checked on the
functional graph). Their call arguments (hidden states, padding mask) are captured per batch;
a block's output takes the hidden states' place for the next block.

**Inputs.** Samples carry ``input_ids`` and ``attention_mask`` (llm-compressor's); a model
whose inputs are named ``token_ids``/``padding_mask`` (keras-hub), or otherwise, gets them
under its own names, in each input's dtype; text is tokenised by the model's keras-hub
preprocessor (:mod:`.inputs`).

**Quantized weights**: ``attach_quantization`` / ``set_quantized`` / ``finish``
(:mod:`.quantized_host`); leaving the host (the end of a ``oneshot`` run) and ``save`` turn
the recorded layers into Keras's own quantized layers; ``save`` then writes
``model.keras`` (``keras.saving.load_model`` restores them) even for a keras-hub model, whose
preset loader (keras-hub 0.32) rebuilds quantized layers as float ones.

**Smoothing** (SmoothQuant, AWQ): observers on outputs, recorded calls run again, and the
weights of norms and Linear layers with their biases (:mod:`.oneshot_calls`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import keras
from recipe_spec.atomic import write_text
from recipe_spec.masks.numpy_ops import NUMPY_OPS, transposed
from recipe_spec.oneshot.calibration_inputs import to_numpy
from recipe_spec.oneshot.host import (
    CallRecorder,
    ModuleInfo,
    ObservedCalls,
    Observer,
    StopForward,
    feed_until,
    observed_call,
)
from recipe_spec.oneshot.matching import matches

from .compiled import CompiledBlock, compiled_backend, run_compiled, shared_cores, signature
from .experts import LAYOUTS, ExpertLinear, expert_linears, module_name, refuse_unsplit, routers_of
from .hub import hf_architecture, hf_tables, warn_config_differences
from .inputs import feed, input_keys, preprocess
from .layout import LinearAxes, linear_axes
from .oneshot_calls import ModuleCalls, held, next_call, on_device, wrapped
from .expert_pruning import ExpertPruning
from .oneshot_state import ModelState
from .params import assign_array, numpy_value
from .quantization import layer_paths
from .quantized_host import QuantizedWeights
from .rotations import Rotations
from .solver_ops import solver_for

__all__ = ["KerasCalibrationHost"]


class _Linear:
    """One prunable kernel seen as a ``(out, in)`` weight, and its input as ``[tokens, in]``."""

    def __init__(self, layer: Any, variable: Any, axes: LinearAxes | None, reverse: bool = False):
        self.layer, self.variable, self.reverse = layer, variable, reverse
        shape = tuple(int(d) for d in variable.shape)
        # Dense kernel / reverse embeddings: (in, out), input (..., in)
        self.kernel_in, self.kernel_out, self.batch, self.contract, self.explicit = axes or ([0], [1], [], [], 0)
        self.kernel_shape = shape
        self.columns = int(np.prod([shape[i] for i in self.kernel_in]))
        self.rows = int(np.prod([shape[i] for i in self.kernel_out]))

    def weight(self) -> np.ndarray:
        k = np.asarray(numpy_value(self.variable), dtype=np.float32)
        return transposed(k.transpose(self.kernel_in + self.kernel_out).reshape(self.columns, self.rows))

    def set_weight(self, value: np.ndarray) -> None:
        order = self.kernel_in + self.kernel_out
        k = transposed(value).reshape([self.kernel_shape[i] for i in order]).transpose(np.argsort(order))
        assign_array(self.variable, k)

    def rows_of(self, x: Any) -> tuple[np.ndarray, int]:
        """The layer input ``x`` as ``[tokens, in]`` float32, and its number of sequences."""
        a = np.asarray(keras.ops.convert_to_numpy(x), dtype=np.float32)
        sequences = int(a.shape[0]) if a.ndim > 2 else 1
        if self.explicit:
            lead = a.ndim - self.explicit
            a = a.transpose(list(range(lead)) + [lead + i for i in self.batch] + [lead + i for i in self.contract])
        return a.reshape(-1, self.columns), sequences


def _linear_of(layer: Any) -> _Linear | None:
    if not getattr(layer, "built", False) or getattr(layer, "quantization_mode", None) is not None:
        return None
    kernel = getattr(layer, "_kernel", None)
    kernel = getattr(layer, "kernel", None) if kernel is None else kernel
    if isinstance(layer, keras.layers.EinsumDense) and kernel is not None:
        axes = linear_axes(layer.equation)
        return _Linear(layer, kernel, axes) if axes is not None else None
    if isinstance(layer, keras.layers.Dense) and kernel is not None and len(kernel.shape) == 2:
        return _Linear(layer, kernel, None)
    return None


def _quantized_linear(layer: Any) -> bool:
    """A Dense or EinsumDense layer already quantized (Keras's quantization mode)."""
    return (isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))
            and getattr(layer, "quantization_mode", None) is not None)


def _reverse_of(layer: Any) -> _Linear | None:
    if isinstance(layer, keras.layers.ReversibleEmbedding) and not layer.tie_weights and getattr(layer, "built", False):
        return _Linear(layer, layer.reverse_embeddings, None, reverse=True)
    return None


def _classes(layer: Any) -> tuple[str, ...]:
    return tuple(c.__name__ for c in type(layer).__mro__ if isinstance(c, type) and issubclass(c, keras.layers.Layer))


def _common(names: Sequence[str]) -> str:
    parts = [n.split(".") for n in names]
    if not parts:
        return ""
    out: list[str] = []
    for column in zip(*parts, strict=False):
        if len(set(column)) != 1:
            break
        out.append(column[0])
    return ".".join(out)


def _no_grad() -> Any:
    if keras.backend.backend() == "torch":
        import torch

        return torch.no_grad()
    return contextlib.nullcontext()


class KerasCalibrationHost(QuantizedWeights, ModuleCalls, ModelState, ExpertPruning, Rotations):
    """A Keras 3 model held for one-shot compression (see the module docstring)."""

    ops = NUMPY_OPS
    #: NumPy's BLAS runs one thread here (``shared_cores``) on whichever thread calls it, and
    #: LAPACK leaves the interpreter's lock: a Hessian is factored beside the column loop
    #: before it.
    solves_ahead = True

    def __init__(self, model: Any):
        if not getattr(model, "built", True) or not model.weights:
            raise ValueError(f"this Keras {type(model).__name__} is not built (it holds no weights yet), so there is "
                             "nothing to compress: build it first (model.build(input_shape), or call it once on a "
                             "batch of inputs), or load it with its weights")
        self.model = model
        self._infos: list[ModuleInfo] = []
        self._layers: dict[str, Any] = {}
        self._linear: dict[str, _Linear] = {}
        self._groups: dict[str, list[str]] = {}
        self._index(model)
        self._contexts: Any = None
        self._programs: dict[Any, Any] = {}
        #: where SparseGPT, GPTQ and Wanda solve (None: NumPy; :func:`.solver_ops.solver_for`)
        self.solver = solver_for()
        warn_config_differences(model)  # a keras-hub backbone unlike its checkpoint's config.json

    @property
    def calibrate_all_experts(self) -> bool:
        """llm-compressor's ``moe_calibrate_all_experts``: every expert of a keras-hub expert
        bank sees every token while calibrating (True, the default), or only those routed to it."""
        return all(v.bank.calibrate_all for v in self._linear.values() if isinstance(v, ExpertLinear))

    @calibrate_all_experts.setter
    def calibrate_all_experts(self, value: bool) -> None:
        for v in self._linear.values():
            if isinstance(v, ExpertLinear):
                v.bank.calibrate_all = bool(value)

    def __enter__(self) -> KerasCalibrationHost:
        self._contexts = contextlib.ExitStack()
        self._contexts.enter_context(_no_grad())
        self._contexts.enter_context(shared_cores())  # the compiled calls' pool beside NumPy's (.compiled)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._contexts.__exit__(*exc)
        if exc[0] is None and getattr(self, "_pending", None):
            self.finish()  # the run is over: the recorded layers become Keras's quantized layers

    # -- the model ---------------------------------------------------------------------------
    def _index(self, model: Any) -> None:
        names, reads = hf_tables(model)
        hf = {i: module_name(k) + ".weight" if k.endswith(".weight") else k for i, k in names.items()}
        rank = {key: i for i, key in enumerate(hf.values())}
        paths = layer_paths(model)
        by_path = dict(paths)
        children: dict[str, list[tuple[str, Any]]] = {}
        for path, layer in paths:
            parent = path.rsplit("/", 1)[0] if "/" in path else ""
            children.setdefault(parent, []).append((path, layer))

        reversed_ = {id(r.variable) for _, layer in paths if (r := _reverse_of(layer)) is not None}
        # a router is a Dense, but transformers 5's routers are no Linear: targets [Linear] skip it
        routers = routers_of(paths)

        def keys(layer: Any, skip_reverse: bool) -> list[str]:
            return [hf[id(v)] for v in layer.weights if id(v) in hf and not (skip_reverse and id(v) in reversed_)]

        def order(item: tuple[str, Any]) -> int:
            found = [rank[k] for k in keys(item[1], False)]
            return min(found) if found else len(rank)

        exact = {hf[id(lin.variable)].removesuffix(".weight") for _, layer in paths
                 for lin in (_linear_of(layer), _reverse_of(layer)) if lin is not None and id(lin.variable) in hf}
        arch = hf_architecture(model)  # picks the default smoothing mappings, as the class name does on PyTorch
        self._infos.append(ModuleInfo("", ((arch,) if arch else ()) + _classes(model), False))
        taken: set[str] = {""}

        def walk(parent_path: str, parent_name: str) -> None:
            for path, layer in sorted(children.get(parent_path, []), key=order):
                lin = _linear_of(layer)
                read = [k for v in layer.weights for k in reads.get(id(v), [])]  # an expert bank's tensors
                own = [k.removesuffix(".weight") if k.endswith(".weight") else k.rsplit(".", 1)[0]
                       for k in keys(layer, True)] + [module_name(k) for k in read]
                name = _common(own) if own else ""
                if lin is not None and id(lin.variable) in hf:
                    name = hf[id(lin.variable)].removesuffix(".weight")
                elif lin is None and name in exact:
                    name = ""
                experts: dict[str, ExpertLinear] = {}
                if type(layer).__name__ in LAYOUTS:
                    experts = expert_linears(layer, by_path.get(parent_path), read)
                    name = _common(list(experts)) if experts else name
                if not name or name in taken:
                    name = f"{parent_name}.{layer.name}" if parent_name else str(layer.name)
                taken.add(name)
                self._layers[name] = layer
                if lin is not None:
                    self._linear[name] = lin
                # a quantized one: still a Linear by class
                linear = (lin is not None or _quantized_linear(layer)) and id(layer) not in routers
                self._infos.append(ModuleInfo(name, (*_classes(layer), "Linear") if linear else _classes(layer),
                                              lin is not None and linear, (lin.rows, lin.columns) if lin is not None else ()))
                self._groups.setdefault(parent_path, []).append(name)
                for expert, view in experts.items():
                    self._linear[expert] = view
                    self._infos.append(ModuleInfo(expert, ("Linear",), True, (view.rows, view.columns)))
                walk(path, name)
                reverse = _reverse_of(layer)
                if reverse is not None:
                    key = hf.get(id(reverse.variable))
                    extra = key.removesuffix(".weight") if key else f"{name}.reverse_embeddings"
                    self._linear[extra] = reverse
                    self._infos.append(ModuleInfo(extra, ("ReversibleEmbedding", "Linear"), True,
                                                  (reverse.rows, reverse.columns)))

        walk("", "")
        refuse_unsplit(model, paths, {id(v.layer) for v in self._linear.values() if isinstance(v, ExpertLinear)})

    def modules(self) -> list[ModuleInfo]:
        return list(self._infos)

    def repeated_blocks(self, sequential_targets: Sequence[str] | None) -> list[str]:
        if sequential_targets:
            return [i.name for i in self._infos
                    if i.name and any(matches(t, i.name, i.classes[:1]) for t in sequential_targets)]
        best: tuple[int, list[str]] = (-1, [])
        for names in self._groups.values():
            by_class: dict[type, list[str]] = {}
            for n in names:
                by_class.setdefault(type(self._layers[n]), []).append(n)
            for group in by_class.values():
                if len(group) < 2 or not all(self._holds_linear(n) for n in group) or not self._chained(group):
                    continue
                size = sum(int(np.prod(v.shape)) for n in group for v in self._layers[n].weights)
                if size > best[0]:
                    best = (size, group)
        return best[1]

    def _holds_linear(self, name: str) -> bool:
        return name not in self._linear and any(n.startswith(name + ".") for n in self._linear)

    def _chained(self, group: list[str]) -> bool:
        """Whether each block of ``group`` is fed the output of the one before (functional)."""
        try:
            for a, b in zip(group, group[1:], strict=False):
                out, inp = self._layers[a].output, self._layers[b].input
                first = inp[0] if isinstance(inp, (list, tuple)) else inp
                if first is not (out[0] if isinstance(out, (list, tuple)) else out):
                    return False
        except (AttributeError, ValueError, IndexError):
            return False
        return True

    # -- data ----------------------------------------------------------------------------------
    def lengths(self, samples: Sequence[Mapping[str, Any]]) -> list[int]:
        return [int(np.shape(s["input_ids"])[-1]) for s in samples]

    def order_longest_first(self, lengths: Sequence[int]) -> list[int]:
        return [int(i) for i in np.argsort(-np.asarray(lengths), kind="stable")]

    def collate(self, samples: Sequence[Mapping[str, Any]], length: int) -> dict[str, np.ndarray]:
        return {key: np.stack([np.asarray(to_numpy(s[key])).reshape(-1)[:length] for s in samples]) for key in samples[0]}

    def input_keys(self) -> dict[str, str]:
        """``{model input name: sample key}`` (:func:`.inputs.input_keys`)."""
        return input_keys(self.model)

    def preprocess(self, texts: Sequence[str]) -> list[dict[str, np.ndarray]] | None:
        """``texts`` as samples by the model's keras-hub preprocessor (:func:`.inputs.preprocess`)."""
        return preprocess(self.model, texts)

    def _feed(self, batch: Any) -> Any:
        return feed(self.model, batch)

    def _forward(self, batch: Any) -> None:
        self.model(self._feed(batch), training=False)

    # -- running -------------------------------------------------------------------------------
    def capture(self, block: str, batches: Sequence[Any], offload: bool) -> list[Any]:
        calls: list[Any] = []

        def make(original: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                calls.append(held((args, kwargs)) if offload else (args, kwargs))
                raise StopForward
            return call

        with wrapped(self._layers[block], make):
            feed_until(self._forward, batches, block)
        return calls

    def run_block(self, block: str, inputs: Sequence[Any], observers: Mapping[str, Observer],
                  propagate: bool, outputs: Mapping[str, Observer] | None = None,
                  calls: Mapping[str, CallRecorder] | None = None, offload_calls: bool = False,
                  routes: Mapping[str, Any] | None = None) -> list[Any]:
        layer = self._layers[block]
        out: list[Any] = []
        compiled = None if routes else self._compiled(block, observers, propagate, outputs, calls)
        if compiled is not None:
            # a call that could not be compiled: it and the rest run eagerly
            inputs = inputs[run_compiled(compiled[0], layer, compiled[1], inputs, observers, self._linear, out):]
        # a calibration pass needs the observed layers' inputs only (ObservedCalls)
        stop = ObservedCalls if ObservedCalls.apply(propagate, observers, outputs or routes, calls) else None
        with self._observing(observers, outputs, calls, offload_calls, stop) as seen, self.route_wraps(routes or {}):
            for call in inputs:
                args, kwargs = on_device(call)
                whole, result = observed_call(seen, layer, *args, **kwargs)
                if whole and propagate:
                    out.append(next_call(call, args, kwargs, result[0] if isinstance(result, (tuple, list)) else result))
        return out

    def _compiled(self, block: str, observers: Mapping[str, Observer], propagate: bool,
                  outputs: Mapping[str, Observer] | None,
                  calls: Mapping[str, CallRecorder] | None) -> tuple[CompiledBlock, dict[str, str]] | None:
        """The compiled call for this pass of ``block`` (:mod:`.compiled`), shared by the blocks of
        its signature, and the observers' names under it; None where the block runs eagerly."""
        if outputs or calls or not (observers or propagate) or compiled_backend() is None:
            return None
        keys: dict[str, str] = {}
        for name in observers:
            lin = self._linear.get(name)
            if isinstance(lin, ExpertLinear) or (lin is not None and lin.reverse) or not name.startswith(block + "."):
                return None
            keys[name] = name[len(block) + 1:]
        layer = self._layers[block]
        key = (signature(layer), tuple(sorted(keys.values())), propagate)
        if key not in self._programs:  # traced on this block; the later blocks of its signature reuse it
            layers = {rel: self._observed_layer(name) for name, rel in keys.items()}
            self._programs[key] = CompiledBlock(layer, layers, propagate)
        refused = any(p.refused for k, p in self._programs.items() if k[0] == key[0])
        return None if refused else (self._programs[key], keys)

    def _observed_layer(self, name: str) -> Any:
        lin = self._linear.get(name)
        return lin.layer if lin is not None else self._layer(name)

    def run_model(self, batches: Sequence[Any], observers: Mapping[str, Observer],
                  outputs: Mapping[str, Observer] | None = None,
                  calls: Mapping[str, CallRecorder] | None = None, offload_calls: bool = False,
                  routes: Mapping[str, Any] | None = None) -> None:
        with self._observing(observers, outputs, calls, offload_calls), self.route_wraps(routes or {}):
            for batch in batches:
                self._forward(batch)

    # -- saving (weights, biases, run_module: .oneshot_calls) ----------------------------------
    def save(self, output_dir: str, recipe_text: str) -> list[str]:
        self.finish()
        self.check_saveable()
        os.makedirs(output_dir, exist_ok=True)
        before = set(os.listdir(output_dir))
        save = getattr(self.model, "save_to_preset", None)
        if callable(save) and not self.quantized:  # keras-hub 0.32's from_preset drops quantized layers' policies
            save(output_dir)
        else:
            self.model.save(os.path.join(output_dir, "model.keras"))
        written = {os.path.join(output_dir, f) for f in set(os.listdir(output_dir)) - before}
        recipe_path = os.path.join(output_dir, "recipe.yaml")
        write_text(recipe_path, recipe_text)
        return sorted(written | {recipe_path})
