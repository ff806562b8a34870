"""Expert pruning on the PyTorch calibration host (a base of
:class:`~.oneshot.TorchCalibrationHost`): REAP's side of the host protocol
(:mod:`recipe_spec.oneshot.reap.run`), as llm-compressor 0.14's ``reap/utils.py`` does it.

- :meth:`ExpertPruning.expert_layers`: each mixture-of-experts block, a module holding
  ``experts`` (split into one Linear per expert: :class:`~.experts.LinearExperts`) and a router
  (``router`` or ``gate``), with the expert count and ``top_k`` (and a group-limited router's
  ``n_group`` / ``topk_group``) of the model's config (its ``text_config`` where it has one).
- :meth:`ExpertPruning.route_hooks`: for each experts module watched, each expert's output norms
  (``torch.linalg.norm(output.float(), dim=-1)``) and, after the block's call, the router's
  ``top_k_index`` / ``top_k_weights`` it was given, handed to the observer as NumPy arrays.
- :meth:`ExpertPruning.prune_experts`: the experts kept, renumbered from 0, the router's rows
  (its bias and score-correction bias too), every expert count the block and router hold, and
  the config's count. Modules and parameters are replaced, never changed in place, so the
  journal's shell (:mod:`.oneshot_state`) puts the old ones back when a run fails.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import torch
from recipe_spec.oneshot.reap.layers import ROUTERS, routing, text_config
from recipe_spec.oneshot.reap.saliency import ExpertLayer

from .experts import LinearExperts

__all__ = ["ExpertPruning"]

#: A module's expert count, as llm-compressor 0.14 updates it (``reap/utils.py``).
MODULE_COUNT_KEYS = ("num_experts", "n_experts", "n_routed_experts")


class ExpertPruning:
    """The host's expert pruning (see the module docstring); ``model``, ``_named``: the host's."""

    model: torch.nn.Module
    _named: dict[str, torch.nn.Module]

    def expert_layers(self) -> list[ExpertLayer]:
        if getattr(self, "_store", None) is not None:
            raise ValueError("a model streamed from its checkpoint block by block cannot lose experts: load it whole")
        _, _, top_k, n_group, topk_group = routing(getattr(self.model, "config", None) or {})
        out = []
        for name, module in self._named.items():
            experts = getattr(module, "experts", None)
            router = next((r for r in ROUTERS if isinstance(getattr(module, r, None), torch.nn.Module)), None)
            if isinstance(experts, LinearExperts) and router is not None:
                out.append(ExpertLayer(name, f"{name}.experts" if name else "experts", int(experts.num_experts),
                                       top_k, n_group, topk_group))
        if not out:
            raise ValueError("the model has no mixture-of-experts block (a module holding split experts and a "
                             "router named router or gate)")
        return out

    def route_hooks(self, routes: Mapping[str, Any]) -> list[Any]:
        """Hooks feeding each observer of ``routes`` (by experts module name) one call at a time."""
        handles = []
        for name, observe in routes.items():
            block = self._named[name]
            assert isinstance(block, LinearExperts)
            norms: dict[int, torch.Tensor] = {}

            def expert_hook(index: int, table: dict[int, torch.Tensor]) -> Any:
                def hook(module: Any, args: Any, output: Any) -> None:
                    y = output[0] if isinstance(output, tuple) else output
                    table[index] = torch.linalg.norm(y.float(), dim=-1).reshape(-1)
                return hook

            def block_hook(table: dict[int, torch.Tensor], observe: Any) -> Any:
                def hook(module: LinearExperts, args: Any, kwargs: Mapping[str, Any], output: Any) -> None:
                    given = list(args) + [kwargs.get(k) for k in ("hidden_states", "top_k_index", "top_k_weights")
                                          if k in kwargs]
                    indices, weights = given[1], given[2]
                    found = [table.pop(j).cpu().numpy() for j in range(module.num_experts)]
                    observe(indices.reshape(-1, indices.shape[-1]).cpu().numpy(),
                            weights.reshape(-1, weights.shape[-1]).float().cpu().numpy(), found,
                            bool(module.calibrate_all))
                return hook

            for index in range(block.num_experts):
                handles.append(block[index].register_forward_hook(expert_hook(index, norms)))
            handles.append(block.register_forward_hook(block_hook(norms, observe), with_kwargs=True))
        return handles

    def prune_experts(self, layer: ExpertLayer, kept: list[int]) -> None:
        block, experts = self._named[layer.name], self._named[layer.experts]
        assert isinstance(experts, LinearExperts)
        router = next(getattr(block, r) for r in ROUTERS if isinstance(getattr(block, r, None), torch.nn.Module))
        rest = {k: m for k, m in experts._modules.items() if not k.isdigit()}  # act_fn
        experts._modules = OrderedDict([(str(i), experts[pos]) for i, pos in enumerate(kept)] + list(rest.items()))
        experts.num_experts = len(kept)
        rows = torch.tensor(kept, dtype=torch.long, device=router.weight.device)
        router.weight = torch.nn.Parameter(router.weight.detach()[rows].contiguous(),
                                           requires_grad=router.weight.requires_grad)
        if isinstance(getattr(router, "bias", None), torch.Tensor):
            router.bias = torch.nn.Parameter(router.bias.detach()[rows].contiguous(), requires_grad=False)
        for holder in (router, block):  # DeepSeek-V3 keeps it on the router, Hy3 on the block
            correction = getattr(holder, "e_score_correction_bias", None)
            if isinstance(correction, torch.Tensor):
                holder._buffers.pop("e_score_correction_bias", None)
                holder._parameters.pop("e_score_correction_bias", None)
                holder.register_buffer("e_score_correction_bias", correction.detach()[rows.to(correction.device)]
                                       .contiguous())
        for holder in (block, router):
            for key in MODULE_COUNT_KEYS:
                if isinstance(getattr(holder, key, None), int):
                    setattr(holder, key, len(kept))
        if isinstance(getattr(router, "out_features", None), int):
            router.out_features = len(kept)
        config = self.model.config
        setattr(text_config(config), routing(config)[0], len(kept))
        self._named = dict(self.model.named_modules())
