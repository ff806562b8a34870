"""Mixture-of-experts blocks for one-shot compression: transformers' fused experts (one
``gate_up_proj`` parameter ``[experts, 2 x intermediate, hidden]`` and one ``down_proj``
``[experts, hidden, intermediate]``, classes decorated with ``use_experts_implementation``, such
as Qwen3-MoE's, Mixtral's and Qwen2-MoE's in transformers 5) made into one ``Linear`` per expert
and projection, as llm-compressor 0.14 does (``modeling/moe/linearize.py``,
``linear_experts.py``), so that each expert is a module a recipe's ``targets: [Linear]`` selects,
is calibrated and compressed on its own and saved as its own tensors
(``mlp.experts.<e>.gate_proj.weight``, ``up_proj``, ``down_proj``).

:class:`LinearExperts` computes what llm-compressor's ``LinearExperts2D`` computes: each expert's
gate and up projections concatenated and gated by the fused class's ``_apply_gate`` (``act(gate)
* up``), its down projection, weighted by the router's weight and summed with ``index_add_``.
With ``calibrate_all`` (llm-compressor's ``moe_calibrate_all_experts=True``, its default) every
expert runs on every token, so each expert's statistics see all of them; the router still decides
the layer's output (the expert's output on the tokens routed to it). Without it, each expert
runs on its routed tokens only.

A fused class laid out otherwise (interleaved gate/up, transposed weights with biases, a norm
after each expert) is refused by name: nothing is compressed in a form the run cannot read.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["ExpertMLP", "LinearExperts", "fused_experts", "linearize", "restore"]


def fused_experts(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The fused experts modules of ``model`` (transformers' ``use_experts_implementation``
    layout: ``has_gate``/``is_transposed`` set, 3-D ``down_proj``), by name."""
    out = []
    for name, module in model.named_modules():
        down = getattr(module, "down_proj", None)
        if isinstance(down, torch.nn.Parameter) and down.dim() == 3 and hasattr(module, "is_transposed"):
            out.append((name, module))
    return out


def _refusal(name: str, module: torch.nn.Module) -> str | None:
    if not getattr(module, "is_concatenated", True):
        return "its gate and up weights are interleaved"
    if getattr(module, "has_post_expert_norm", False):
        return "it normalises each expert's output"
    if getattr(module, "has_gate", True) and not isinstance(getattr(module, "gate_up_proj", None), torch.nn.Parameter):
        return "it has no gate_up_proj parameter"
    return None


class ExpertMLP(torch.nn.Module):
    """One expert as Linear layers: ``down(gate_fn([gate(x), up(x)]))`` (with a gate), else
    ``down(act(up(x)))``."""

    def __init__(self, hidden: int, intermediate: int, bias: bool, gated: bool, post_up: Any,
                 dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.gated = gated
        if gated:
            self.gate_proj = torch.nn.Linear(hidden, intermediate, bias=bias, dtype=dtype, device=device)
        self.up_proj = torch.nn.Linear(hidden, intermediate, bias=bias, dtype=dtype, device=device)
        self.down_proj = torch.nn.Linear(intermediate, hidden, bias=bias, dtype=dtype, device=device)
        self._post_up = post_up

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.gated:
            both = torch.cat([self.gate_proj(hidden_states), self.up_proj(hidden_states)], dim=-1)
            return self.down_proj(self._post_up(both))
        return self.down_proj(self._post_up(self.up_proj(hidden_states)))


class LinearExperts(torch.nn.ModuleList):
    """A fused experts module as one :class:`ExpertMLP` per expert, taking the fused module's
    ``forward(hidden_states, top_k_index, top_k_weights)`` (see the module docstring)."""

    def __init__(self, fused: torch.nn.Module, calibrate_all: bool) -> None:
        gated = bool(getattr(fused, "has_gate", True))
        first = fused.gate_up_proj if gated else fused.up_proj
        transposed = bool(fused.is_transposed)
        experts = int(first.shape[0])
        hidden = int(first.shape[1] if transposed else first.shape[2])
        intermediate = int(fused.down_proj.shape[1] if transposed else fused.down_proj.shape[2])
        bias = bool(getattr(fused, "has_bias", False))
        act = fused.act_fn
        gate_fn = type(fused)._apply_gate

        def apply_gate(both: torch.Tensor) -> torch.Tensor:
            return gate_fn(self, both)  # the fused class's gate, with this module's act_fn

        post_up = apply_gate if gated else act.forward
        super().__init__([ExpertMLP(hidden, intermediate, bias, gated, post_up, first.dtype, first.device)
                          for _ in range(experts)])
        self.act_fn = act
        self.num_experts = experts
        self.is_transposed = transposed  # the fused layout, for a checkpoint read later (.streaming)
        self.calibrate_all = calibrate_all
        with torch.no_grad():
            for index in range(experts):  # act_fn is a child too: not an expert
                self._copy(fused, index, self[index], gated, transposed, intermediate, bias)

    @staticmethod
    def _copy(fused: torch.nn.Module, index: int, expert: ExpertMLP, gated: bool, transposed: bool,
              intermediate: int, bias: bool) -> None:
        def rows(w: torch.Tensor) -> torch.Tensor:
            return w.T if transposed else w

        down = rows(fused.down_proj[index])
        if gated:
            both = fused.gate_up_proj[index]
            gate = both[:, :intermediate] if transposed else both[:intermediate]
            up = both[:, intermediate:] if transposed else both[intermediate:]
            expert.gate_proj.weight.copy_(rows(gate))
            expert.up_proj.weight.copy_(rows(up))
        else:
            expert.up_proj.weight.copy_(rows(fused.up_proj[index]))
        expert.down_proj.weight.copy_(down)
        if bias:
            if gated:
                b = fused.gate_up_proj_bias[index]
                expert.gate_proj.bias.copy_(b[:intermediate])
                expert.up_proj.bias.copy_(b[intermediate:])
            else:
                expert.up_proj.bias.copy_(fused.up_proj_bias[index])
            expert.down_proj.bias.copy_(fused.down_proj_bias[index])

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(hidden_states)
        with torch.no_grad():
            mask = torch.nn.functional.one_hot(top_k_index, self.num_experts).permute(2, 1, 0)
        for index in range(self.num_experts):
            position, tokens = torch.where(mask[index])
            expert = self[index]
            value = expert(hidden_states)[tokens] if self.calibrate_all else expert(hidden_states[tokens])
            weighted = value * top_k_weights[tokens, position, None]
            out.index_add_(0, tokens, weighted.to(out.dtype))
        return out


def linearize(model: torch.nn.Module, calibrate_all: bool) -> list[tuple[str, torch.nn.Module]]:
    """Replace each fused experts module of ``model`` by its :class:`LinearExperts`; returns the
    originals (``[(name, module)]``) for :func:`restore`. A layout this cannot read is a
    ValueError naming the module, before anything is replaced."""
    found = fused_experts(model)
    for name, module in found:
        why = _refusal(name, module)
        if why is not None:
            raise ValueError(f"{name} ({type(module).__name__}): recipe_spec.oneshot cannot split these experts into "
                             f"one Linear per expert: {why}")
    for name, module in found:
        model.set_submodule(name, LinearExperts(module, calibrate_all))
    return found


def restore(model: torch.nn.Module, originals: list[tuple[str, torch.nn.Module]]) -> None:
    """Put the fused experts modules :func:`linearize` replaced back."""
    for name, module in originals:
        model.set_submodule(name, module)
