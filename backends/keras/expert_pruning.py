"""Expert pruning on the Keras calibration host (a base of
:class:`~.oneshot.KerasCalibrationHost`): REAP's side of the host protocol
(:mod:`recipe_spec.oneshot.reap.run`) for keras-hub's sparse blocks (``Qwen3SparseMoeBlock``,
``MixtralSparseMoeBlock``, whose experts the host splits: :mod:`.experts`), mirroring the
PyTorch host's module of the same name.

- :meth:`ExpertPruning.expert_layers`: each sparse block holding a bank of
  :data:`~.experts.LAYOUTS` and a router (``_sparse_feedforward_gate_dense``), under
  transformers 5's names (``model.layers.0.mlp``, its experts ``model.layers.0.mlp.experts``),
  with the bank's expert count and the block's ``top_k``.
- :meth:`ExpertPruning.route_wraps`: for each bank watched, each call of its block handed to
  the observer: the router's choice as the block makes it (the softmax of the router's logits
  the block returns, its ``top_k``, divided by their sum where the block normalizes:
  Qwen3-MoE's ``norm_top_k_prob``, Mixtral always) and each expert's output norms
  (``||f_j||`` over the hidden axis, float32) for every token: the bank runs every expert on
  every token, so the observer gets the every-token form whatever
  ``moe_calibrate_all_experts`` says (the saliency of a routed token is the same number).
- :meth:`ExpertPruning.prune_experts`: the bank's variables and the router's kernel cut to the
  experts kept (new variables in the old order, so that ``model.keras`` and a preset load back
  through the new config), every expert count the bank, block, decoder layer and backbone hold
  (``num_experts``: what their configs save), and the host's expert views renumbered from 0.
  :meth:`ExpertPruning.structure` / :meth:`ExpertPruning.restore_structure` keep and put back
  the old variables, counts and views (the journal's shell), so a run that fails later leaves
  the model as it was.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

import keras
from recipe_spec.oneshot.reap.saliency import ExpertLayer

from .experts import EXPERT_KEYS, LAYOUTS, Bank, ExpertLinear
from .hub import backbone_of
from .oneshot_calls import wrapped
from .params import assign_array, numpy_value

__all__ = ["ExpertPruning"]

_EXPERT = re.compile(r"^(?P<bank>.+)\.(?P<expert>\d+)\.(?P<proj>[A-Za-z0-9_]+)$")


def _replace_variables(layer: Any, attrs: list[str], values: list[Any]) -> None:
    """``layer``'s variables ``attrs`` replaced by ``values`` (Keras variables, or arrays made
    into new ones), in the order ``layer`` holds them."""
    order = [a for v in layer.variables for a in attrs if getattr(layer, a) is v]
    by_attr = dict(zip(attrs, values, strict=True))
    layer._tracker.unlock()
    try:
        for attr in order:
            old = getattr(layer, attr)
            new = by_attr[attr]
            delattr(layer, attr)
            if not isinstance(new, keras.Variable):
                array = np.asarray(new)
                variable = layer.add_weight(shape=array.shape, initializer="zeros", dtype=old.dtype,
                                            trainable=old.trainable, name=old.name)
                assign_array(variable, array)
                new = variable
            setattr(layer, attr, new)
    finally:
        layer._tracker.lock()


def _variable_attrs(layer: Any) -> list[str]:
    return sorted({p.variable for p in LAYOUTS[type(layer).__name__].values()})


class ExpertPruning:
    """The host's expert pruning (see the module docstring); ``model``, ``_layers``,
    ``_linear``, ``_infos``: the host's."""

    model: Any
    _layers: dict[str, Any]
    _linear: dict[str, Any]
    _infos: list[Any]

    def _banks(self) -> list[tuple[str, str, Any, Any]]:
        """``(block name, bank name, bank layer, block layer)`` of each split sparse block."""
        out = []
        for name, layer in self._layers.items():
            if type(layer).__name__ in LAYOUTS and name.rpartition(".")[0] in self._layers:
                block = self._layers[name.rpartition(".")[0]]
                if getattr(block, "_sparse_feedforward_gate_dense", None) is not None and \
                        any(isinstance(v, ExpertLinear) and v.layer is layer for v in self._linear.values()):
                    out.append((name.rpartition(".")[0], name, layer, block))
        return out

    def expert_layers(self) -> list[ExpertLayer]:
        out = [ExpertLayer(block_name, bank_name, int(bank.num_experts), int(block.top_k))
               for block_name, bank_name, bank, block in self._banks()]
        if not out:
            raise ValueError("the model has no mixture-of-experts block whose experts recipe-spec's Keras backend "
                             f"splits (keras-hub's sparse blocks holding {', '.join(LAYOUTS)})")
        return out

    @contextlib.contextmanager
    def route_wraps(self, routes: Mapping[str, Any]) -> Iterator[None]:
        """Each watched bank's block call reported to its observer of ``routes`` (by experts
        module name) for the ``with`` block."""
        with contextlib.ExitStack() as stack:
            for _, bank_name, bank, block in self._banks():
                if bank_name not in routes:
                    continue
                norms: list[np.ndarray] = []

                def bank_call(original: Any, norms: list[np.ndarray] = norms) -> Any:
                    def call(*args: Any, **kwargs: Any) -> Any:
                        out = original(*args, **kwargs)
                        y = np.asarray(keras.ops.convert_to_numpy(out), dtype=np.float32)
                        norms.append(np.sqrt(np.sum(y * y, axis=-1, dtype=np.float32)))
                        return out
                    return call

                def block_call(original: Any, block: Any = block, norms: list[np.ndarray] = norms,
                               observe: Any = routes[bank_name]) -> Any:
                    def call(*args: Any, **kwargs: Any) -> Any:
                        norms.clear()
                        result = original(*args, **kwargs)
                        ops = keras.ops
                        probs = ops.softmax(result[1], axis=-1)
                        top_p, top_i = ops.top_k(probs, k=int(block.top_k))
                        if getattr(block, "norm_top_k_prob", True):
                            top_p = top_p / ops.sum(top_p, axis=-1, keepdims=True)
                        found = norms.pop()
                        observe(np.asarray(ops.convert_to_numpy(top_i)), np.asarray(ops.convert_to_numpy(top_p)),
                                list(found), True)
                        return result
                    return call

                stack.enter_context(wrapped(bank, bank_call))
                stack.enter_context(wrapped(block, block_call))
            yield

    def prune_experts(self, layer: ExpertLayer, kept: list[int]) -> None:
        bank, block = self._layers[layer.experts], self._layers[layer.name]
        rows = np.asarray(kept, dtype=np.int64)
        attrs = _variable_attrs(bank)
        _replace_variables(bank, attrs, [np.asarray(numpy_value(getattr(bank, a)))[rows] for a in attrs])
        router = block._sparse_feedforward_gate_dense
        _replace_variables(router, ["_kernel"], [np.asarray(numpy_value(router._kernel))[:, rows]])
        router.units = len(kept)
        for holder in self._count_holders(layer):
            for key in EXPERT_KEYS:
                if isinstance(getattr(holder, key, None), int) and not isinstance(getattr(holder, key), bool):
                    setattr(holder, key, len(kept))
        self._renumber(layer, bank, kept)

    def _count_holders(self, layer: ExpertLayer) -> list[Any]:
        decoder = self._layers.get(layer.name.rpartition(".")[0])
        return [h for h in (self._layers[layer.experts], self._layers[layer.name], decoder,
                            backbone_of(self.model)) if h is not None]

    def _renumber(self, layer: ExpertLayer, bank: Any, kept: list[int]) -> None:
        """The host's views of ``bank``'s experts: those kept, numbered from 0, on the new
        variables; the others gone."""
        prefix = f"{layer.experts}."
        views = {n: v for n, v in self._linear.items() if n.startswith(prefix) and isinstance(v, ExpertLinear)}
        if not views:
            return
        fresh = Bank(bank, self._layers[layer.name], LAYOUTS[type(bank).__name__])
        fresh.calibrate_all = next(iter(views.values())).bank.calibrate_all
        position = {old: new for new, old in enumerate(kept)}
        renamed: dict[str, Any] = {}
        for name, view in views.items():
            found = _EXPERT.match(name)
            if found is None or view.expert not in position:
                continue
            renamed[f"{prefix}{position[view.expert]}.{found['proj']}"] = ExpertLinear(
                fresh, position[view.expert], view.projection, view.inner)
        for name in views:
            del self._linear[name]
        self._linear.update(renamed)
        at = next((k for k, i in enumerate(self._infos) if i.name.startswith(prefix)), len(self._infos))
        new_infos = []
        for info in self._infos:  # in their order, each kept expert's projections under its new number
            found = _EXPERT.match(info.name) if info.name.startswith(prefix) else None
            if found is not None and int(found["expert"]) in position:
                name = f"{prefix}{position[int(found['expert'])]}.{found['proj']}"
                if name in renamed:
                    new_infos.append(type(info)(name, info.classes, info.prunable,
                                                (renamed[name].rows, renamed[name].columns)))
        rest = [i for i in self._infos if not i.name.startswith(prefix)]
        self._infos = rest[:at] + new_infos + rest[at:]

    # -- undo (the journal's shell) ------------------------------------------------------------
    def structure(self) -> list[tuple[Any, dict[str, Any]]]:
        """What :meth:`prune_experts` changes, as it is now: each bank's and router's variables,
        every expert count, the host's views."""
        kept: list[tuple[Any, dict[str, Any]]] = []
        for block_name, bank_name, bank, block in self._banks():
            router = block._sparse_feedforward_gate_dense
            kept.append((bank, {a: getattr(bank, a) for a in _variable_attrs(bank)}))
            kept.append((router, {"_kernel": router._kernel, "units": router.units}))
            for holder in self._count_holders(ExpertLayer(block_name, bank_name, 0, 0)):
                counts = {k: getattr(holder, k) for k in EXPERT_KEYS if isinstance(getattr(holder, k, None), int)}
                kept.append((holder, counts))
        kept.append((self, {"_linear": dict(self._linear), "_infos": list(self._infos)}))
        return kept

    def restore_structure(self, kept: list[tuple[Any, dict[str, Any]]]) -> None:
        for holder, values in kept:
            if holder is self:
                self._linear, self._infos = dict(values["_linear"]), list(values["_infos"])
                continue
            variables = {a: v for a, v in values.items() if isinstance(v, keras.Variable)}
            changed = [a for a, v in variables.items() if getattr(holder, a) is not v]
            if changed:
                _replace_variables(holder, changed, [variables[a] for a in changed])
            for a, v in values.items():
                if not isinstance(v, keras.Variable) and getattr(holder, a, None) != v:
                    setattr(holder, a, v)
