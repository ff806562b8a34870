"""keras-hub's mixture-of-experts banks seen as one Linear per expert and projection, as the
PyTorch backend (and llm-compressor 0.14) sees transformers 5's fused experts.

keras-hub 0.32 keeps every expert of a sparse block in one batched layer
(``Qwen3MoeExperts``: ``expert_feedforward_gate_dense`` ``(experts, hidden, 2 x
intermediate)``, gate then up, and ``expert_feedforward_output_dense`` ``(experts,
intermediate, hidden)``; ``MixtralMoeExperts``: gate, up (``intermediate``) and down in three
variables), runs every expert on every token and weights each output by the router
(zero for an expert a token is not routed to). :class:`ExpertLinear` is one expert's
projection in that bank: its weight ``(out, in)`` read from and written back to its slice of
the bank's variable (nothing copied while the model runs), its input the bank's input (gate,
up) or the expert's gated intermediate (down), computed as the bank computes it.

**Names** are the module names transformers 5 gives the same checkpoint once its experts are
made Linear (llm-compressor's, and the PyTorch backend's): ``model.layers.0.mlp.experts.3.gate_proj``,
``up_proj``, ``down_proj``, and the router ``model.layers.0.mlp.gate``; they come from the
tensors keras-hub's converter read into the bank (:func:`.hub.hf_tables`), with Mixtral's
checkpoint names (``block_sparse_moe.experts.3.w1``, ``w3``, ``w2``) renamed as transformers 5
renames them (:func:`module_name`).

**Calibration.** With ``calibrate_all`` (``moe_calibrate_all_experts=True``, the default)
every expert's statistics see every token, as the bank computes them; without it, only the
tokens the router sends to the expert (its ``top_k`` of the softmax of the router's logits),
and an expert no token of a call is routed to is not observed for that call.

**Quantization**: Keras has no quantized layer for an expert bank, so an expert targeted by
a quantization scheme is refused, by name, before any weight changes
(:attr:`ExpertLinear.quantization_refusal`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

import keras

from .params import assign_array, numpy_value

__all__ = ["LAYOUTS", "Bank", "ExpertLinear", "expert_linears", "module_name", "expert_count", "refuse_unsplit", "routers_of"]

#: The config and backbone attributes that count a model's experts.
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


@dataclass(frozen=True)
class Projection:
    """Where one projection of every expert lies in its bank: the variable's attribute and
    which of its ``parts`` equal slices of the last axis."""

    variable: str
    part: int = 0
    parts: int = 1


#: keras-hub's expert bank classes: ``{class name: {checkpoint projection name: Projection}}``.
LAYOUTS: dict[str, dict[str, Projection]] = {
    "Qwen3MoeExperts": {"gate_proj": Projection("_expert_feedforward_gate_dense", 0, 2),
                        "up_proj": Projection("_expert_feedforward_gate_dense", 1, 2),
                        "down_proj": Projection("_expert_feedforward_output_dense")},
    "MixtralMoeExperts": {"w1": Projection("_expert_feedforward_gate_dense"),
                          "w3": Projection("_expert_feedforward_intermediate_dense"),
                          "w2": Projection("_expert_feedforward_output_dense")},
}

#: transformers 5's names of Mixtral's checkpoint projections.
_PROJECTION_NAMES = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}
_KEY = re.compile(r"^(?P<prefix>.+)\.experts\.(?P<expert>\d+)\.(?P<proj>[A-Za-z0-9_]+)\.weight$")


def module_name(key: str) -> str:
    """The transformers 5 module name of checkpoint tensor ``key`` (without ``.weight``):
    Mixtral's ``block_sparse_moe`` is ``mlp`` and its expert projections ``w1``/``w3``/``w2``
    are ``gate_proj``/``up_proj``/``down_proj``.

    >>> module_name("model.layers.0.block_sparse_moe.experts.3.w1.weight")
    'model.layers.0.mlp.experts.3.gate_proj'
    >>> module_name("model.layers.0.block_sparse_moe.gate.weight")
    'model.layers.0.mlp.gate'
    """
    name = key.removesuffix(".weight").replace(".block_sparse_moe.", ".mlp.")
    found = _KEY.match(name + ".weight")
    if found and found["proj"] in _PROJECTION_NAMES:
        name = f"{found['prefix']}.experts.{found['expert']}.{_PROJECTION_NAMES[found['proj']]}"
    return name


def routers_of(paths: list[tuple[str, Any]]) -> set[int]:
    """The ids of the routers (``_sparse_feedforward_gate_dense``) of the sparse blocks holding
    an expert bank of :data:`LAYOUTS` among ``paths`` (``(path, layer)``): Dense layers that
    transformers 5 makes routers (``Qwen3MoeTopKRouter``), not Linear modules, so that a
    recipe's ``targets: [Linear]`` leaves them as it leaves them on PyTorch."""
    by_path = dict(paths)
    out = set()
    for path, layer in paths:
        if type(layer).__name__ in LAYOUTS:
            router = getattr(by_path.get(path.rsplit("/", 1)[0] if "/" in path else ""), "_sparse_feedforward_gate_dense", None)
            if router is not None:
                out.add(id(router))
    return out


def _router(bank: Any, parent: Any) -> tuple[Any, int]:
    router = getattr(parent, "_sparse_feedforward_gate_dense", None)
    top_k = getattr(parent, "top_k", None)
    if router is None or top_k is None:
        raise ValueError(f"{type(bank).__name__} {bank.path}: its sparse block {type(parent).__name__} has no "
                         "router (_sparse_feedforward_gate_dense) or top_k to calibrate the experts with")
    return router, int(top_k)


class Bank:
    """One expert bank layer with its router: the gated intermediate and the routed tokens of
    a call's input, each computed once per input."""

    def __init__(self, layer: Any, parent: Any, layout: dict[str, Projection]) -> None:
        self.layer, self.layout, self.parent = layer, layout, parent
        self.calibrate_all = True
        self._memo: dict[str, tuple[Any, np.ndarray]] = {}

    def _once(self, what: str, x: Any, compute: Any) -> np.ndarray:
        held = self._memo.get(what)
        if held is not None and held[0] is x:
            return held[1]
        value = compute(x)
        self._memo[what] = (x, value)  # holds x, so its identity is not reused meanwhile
        return value

    def inner(self, x: Any) -> np.ndarray:
        """Every expert's input to its down projection ``(experts, tokens, intermediate)``."""
        return self._once("inner", x, self._inner)

    def _inner(self, x: Any) -> np.ndarray:
        ops, layer = keras.ops, self.layer
        if type(layer).__name__ == "Qwen3MoeExperts":
            both = ops.einsum("th,ehm->etm", x, layer._expert_feedforward_gate_dense)
            gate, up = ops.split(both, 2, axis=-1)
            hidden = up * layer.activation(gate)
        else:  # MixtralMoeExperts
            gate = ops.einsum("th,ehm->etm", x, layer._expert_feedforward_gate_dense)
            gate = ops.cast(layer.activation(ops.cast(gate, "float32")), layer.compute_dtype)
            hidden = ops.einsum("th,ehm->etm", x, layer._expert_feedforward_intermediate_dense) * gate
        return np.asarray(keras.ops.convert_to_numpy(hidden), dtype=np.float32)

    def routed(self, x: Any) -> np.ndarray:
        """``(experts, tokens)``: whether the router sends each token to each expert."""
        return self._once("routed", x, self._routed)

    def _routed(self, x: Any) -> np.ndarray:
        ops = keras.ops
        router, top_k = _router(self.layer, self.parent)
        _, top = ops.top_k(ops.softmax(router(x), axis=-1), k=top_k)
        top = np.asarray(ops.convert_to_numpy(top))
        experts = int(self.layer.num_experts)
        out = np.zeros((experts, top.shape[0]), dtype=bool)
        for k in range(top.shape[1]):
            out[top[:, k], np.arange(top.shape[0])] = True
        return out


class ExpertLinear:
    """Expert ``expert``'s projection ``projection`` of ``bank`` as a ``(out, in)`` weight,
    and its input as ``[tokens, in]`` (the host's Linear view)."""

    reverse = False

    def __init__(self, bank: Bank, expert: int, projection: Projection, inner: bool) -> None:
        self.bank, self.expert, self.projection, self.inner = bank, int(expert), projection, inner
        self.layer = bank.layer
        self.variable = getattr(bank.layer, projection.variable)
        shape = tuple(int(d) for d in self.variable.shape)
        self.columns = shape[1]
        self.rows = shape[2] // projection.parts
        self._cols = slice(projection.part * self.rows, (projection.part + 1) * self.rows)

    @property
    def quantization_refusal(self) -> str:
        return (f"an expert of keras-hub's {type(self.layer).__name__} (one slice of the batched expert bank "
                f"{self.variable.path}); Keras has no quantized layer for expert banks, so recipe-spec's Keras "
                "backend cannot quantize it: leave the experts out of the targets (ignore: ['re:.*mlp.experts.*']), "
                "or run the recipe on PyTorch, which quantizes each expert as its own Linear")

    def weight(self) -> np.ndarray:
        k = np.asarray(numpy_value(self.variable))[self.expert, :, self._cols]
        return np.ascontiguousarray(k.T, dtype=np.float32)

    def set_weight(self, value: np.ndarray) -> None:
        k = np.array(numpy_value(self.variable))
        k[self.expert, :, self._cols] = np.asarray(value).T
        assign_array(self.variable, k)

    def rows_of(self, x: Any) -> tuple[np.ndarray, int]:
        """The bank's input ``x`` ``(tokens, hidden)`` as this projection's input rows (the
        routed ones only without ``calibrate_all``), and the one sequence it adds."""
        rows = (self.bank.inner(x)[self.expert] if self.inner
                else np.asarray(keras.ops.convert_to_numpy(x), dtype=np.float32).reshape(-1, self.columns))
        if not self.bank.calibrate_all:
            rows = rows[self.bank.routed(x)[self.expert]]
        return rows, 1


def expert_linears(layer: Any, parent: Any, keys: list[str]) -> dict[str, ExpertLinear]:
    """``{module name: ExpertLinear}`` for expert bank ``layer`` (a class of :data:`LAYOUTS`,
    in sparse block ``parent``) from the checkpoint tensors keras-hub read into it, in their
    order; {} for a layer that is no known bank or whose tensors do not name its projections."""
    layout = LAYOUTS.get(type(layer).__name__)
    if layout is None or not keys:
        return {}
    bank = Bank(layer, parent, layout)
    inner = [p for p in layout if p not in ("gate_proj", "up_proj", "w1", "w3")]
    out: dict[str, ExpertLinear] = {}
    for key in keys:
        found = _KEY.match(key)
        if found is None or found["proj"] not in layout:
            return {}
        out[module_name(key)] = ExpertLinear(bank, int(found["expert"]), layout[found["proj"]],
                                             found["proj"] in inner)
    return out


def expert_count(model: Any) -> int:
    """How many experts ``model`` (or its backbone, or its config) says each sparse block
    has; 0 for a dense model."""
    for owner in (model, getattr(model, "backbone", None), getattr(model, "config", None)):
        for key in EXPERT_KEYS:
            value = getattr(owner, key, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 1:
                return value
    return 0


def refuse_unsplit(model: Any, layers: list[tuple[str, Any]], split: set[int]) -> None:
    """A ValueError naming the first layer of ``model`` that holds experts (a variable of
    rank 3 or more whose first axis counts :func:`expert_count`'s experts, in a layer other than a
    Dense, EinsumDense or Embedding) and is not a bank
    of ``split`` (ids of the banks seen as Linear per expert), or, for a model with experts
    and no such layer, the model: its experts would be left out of every target."""
    experts = expert_count(model)
    if experts < 2:
        return
    for path, layer in layers:
        if id(layer) in split or isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense,
                                                    keras.layers.Embedding)):
            continue  # a kernel of its own (a Linear), whatever its first axis counts
        own = getattr(layer, "_trainable_variables", []) + getattr(layer, "_non_trainable_variables", [])
        if any(len(v.shape) >= 3 and int(v.shape[0]) == experts for v in own):
            raise ValueError(
                f"{path} ({type(layer).__name__}): a bank of {experts} experts that recipe-spec's Keras backend does "
                f"not see as one Linear per expert (it splits keras-hub's {', '.join(LAYOUTS)}), so its experts "
                "would be left out of every target; run the Hugging Face checkpoint on PyTorch, whose backend "
                "splits transformers' fused experts")
    if not split:
        raise ValueError(f"this model has {experts} experts per block and recipe-spec's Keras backend finds no "
                         f"expert bank it splits (keras-hub's {', '.join(LAYOUTS)}); run the Hugging Face "
                         "checkpoint on PyTorch, whose backend splits transformers' fused experts")
