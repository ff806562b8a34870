"""The PyTorch runtime of a recipe: it samples the core's plan step by step and applies it.

>>> import torch, recipe_spec
>>> model = torch.nn.Linear(8, 4)
>>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
>>> manager = recipe_spec.loads('''
... modifiers:
...   - !GMPruningModifier {params: [weight], init_sparsity: 0.5, final_sparsity: 0.75,
...                       start_epoch: 0, end_epoch: 1, update_frequency: 1}
... ''').compile("torch")
>>> opt = manager.modify(model, opt, steps_per_epoch=2)
>>> for _ in range(3):
...     opt.zero_grad(); model(torch.randn(2, 8)).sum().backward(); opt.step()
>>> int((model.weight == 0).sum())
24
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from recipe_spec.runtime import ModelParams, check_recipe_fits, check_saved_state
from recipe_spec.schedule import compile_plan
from recipe_spec.schedule.plan import GRADUAL_PRUNING, Event, Plan

from .layers import LayerSwap
from .optim import RecipeOptimizer, set_group_value
from .params import param_records, unwrap
from .pruning import MaskSet

if TYPE_CHECKING:
    from recipe_spec.recipe import Modifier, Recipe

__all__ = ["TorchManager", "STATE_VERSION"]

STATE_VERSION = 1


class TorchManager:
    """Applies a recipe to a PyTorch model and optimizer.

    Build it with ``recipe.compile("torch")`` or through
    :class:`recipe_spec.ScheduledModifierManager`. Then ``optimizer = manager.modify(model,
    optimizer, steps_per_epoch)``: every ``optimizer.step()`` applies the recipe's events for
    that step, steps the real optimizer, and re-applies the masks.
    """

    def __init__(self, recipe: Recipe):
        self.recipe = recipe
        self.plan: Plan | None = None
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.steps_per_epoch = 0
        self.step_count = 0
        self.masks = MaskSet()
        self.layers = LayerSwap()
        self.trainable_saved: dict[int, dict[str, bool]] = {}
        self.quantization: Any = None
        self._params: dict[str, tuple[torch.nn.Module, torch.nn.Parameter]] = {}
        self._model_params: ModelParams | None = None
        self._released_at_end: set[tuple[int, str]] = set()

    # -- setting up -----------------------------------------------------------------------
    def modify(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps_per_epoch: int,
               epoch: float = 0.0) -> RecipeOptimizer:
        """Attach the recipe to ``model`` and ``optimizer``; returns the optimizer to use.

        The returned optimizer's ``step()`` drives the schedule; a training loop needs no
        other change. ``epoch`` starts the schedule later (``round(epoch * steps_per_epoch)``).
        """
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"modify() needs a torch.nn.Module, not {type(model).__name__}")
        self.plan = compile_plan(self.recipe, steps_per_epoch)
        self.steps_per_epoch = steps_per_epoch
        self.model = unwrap(model)
        self.optimizer = optimizer.optimizer if isinstance(optimizer, RecipeOptimizer) else optimizer
        self.step_count = round(epoch * steps_per_epoch)
        self._refresh_params()
        self._check_params()
        return RecipeOptimizer(self.optimizer, self)

    def _refresh_params(self) -> None:
        assert self.model is not None
        self._params = {}
        for module_name, module in self.model.named_modules():
            for pname, param in module.named_parameters(recurse=False):
                full = f"{module_name}.{pname}" if module_name else pname
                self._params[full] = (module, param)
        self._model_params = ModelParams(param_records(self.model))

    def _check_params(self) -> None:
        assert self._model_params is not None
        check_recipe_fits(self.recipe, self._model_params.records, "torch")

    def names_for(self, modifier: int, selector: Any) -> list[str]:
        """The parameter names a modifier's selector resolves to on this model (cached)."""
        assert self._model_params is not None
        return self._model_params.names_for(modifier, selector)

    # -- running -------------------------------------------------------------------------
    def before_step(self) -> None:
        """Apply the events of the current step (called by the optimizer wrapper)."""
        assert self.plan is not None
        for event in self.plan.events_at(self.step_count):
            self.apply(event)

    def after_step(self) -> None:
        """Re-apply the masks and advance the step counter."""
        self.masks.apply()
        self.step_count += 1

    def apply(self, event: Event) -> None:
        m = self.recipe.modifiers[event.modifier]
        handler = getattr(self, f"_on_{event.target}", None)
        if handler is not None:
            handler(event, m)

    def _on_sparsity(self, event: Event, m: Modifier) -> None:
        names = self.names_for(event.modifier, event.params)
        entries = []
        for name in names:
            if (event.modifier, name) in self._released_at_end:
                continue  # leave_enabled: false released it at its end step: no final prune
            module, param = self._params[name]
            entries.append(self.masks.hold(name, param, module, event.modifier))
        if entries:
            global_sparsity = m.type == "GlobalMagnitudePruningModifier" or bool(m.args.get("global_sparsity", False))
            self.masks.update(entries, float(event.value), m.args.get("mask_type", "unstructured"),
                              global_sparsity, event.step)

    def _on_masks(self, event: Event, m: Modifier) -> None:
        names = self.names_for(event.modifier, event.params)
        if event.value == "hold":
            for name in names:
                module, param = self._params[name]
                self.masks.hold(name, param, module, event.modifier, mask=param.detach() != 0)
        elif event.value == "release":
            self.masks.release(n for n in names if n in self.masks.params)
            if m.type in GRADUAL_PRUNING:
                # A released gradual modifier does not prune at its own end step.
                self._released_at_end.update((event.modifier, name) for name in names)

    def _on_lr(self, event: Event, m: Modifier) -> None:
        assert self.optimizer is not None
        set_group_value(self.optimizer, "lr", float(event.value), event.params)

    def _on_weight_decay(self, event: Event, m: Modifier) -> None:
        assert self.optimizer is not None
        set_group_value(self.optimizer, "weight_decay", float(event.value), event.params)

    def _on_trainable(self, event: Event, m: Modifier) -> None:
        names = self.names_for(event.modifier, event.params)
        if event.value == "restore":
            saved = self.trainable_saved.pop(event.modifier, {})
            for name, flag in saved.items():
                self._params[name][1].requires_grad_(flag)
            return
        self.trainable_saved[event.modifier] = {n: self._params[n][1].requires_grad for n in names}
        for name in names:
            param = self._params[name][1]
            param.requires_grad_(bool(event.value))
            if not event.value:
                param.grad = None

    def _on_layers(self, event: Event, m: Modifier) -> None:
        assert self.model is not None
        layers = event.params if isinstance(event.params, (list, tuple)) else [event.params]
        if event.value == "remove":
            self.layers.remove(self.model, event.modifier, [str(x) for x in layers])
        else:
            self.layers.restore(self.model, event.modifier)
        self._refresh_params()

    def _on_quantization(self, event: Event, m: Modifier) -> None:
        from .quantization import QuantizationState

        assert self.model is not None
        self.quantization = QuantizationState.start(self.model, m, self.optimizer)
        self._refresh_params()

    def _on_observers(self, event: Event, m: Modifier) -> None:
        if self.quantization is not None:
            self.quantization.disable_observers()

    def _on_bn_stats(self, event: Event, m: Modifier) -> None:
        if self.quantization is not None:
            self.quantization.freeze_bn_stats()

    # -- ending, saving, resuming --------------------------------------------------------
    def finalize(self, model: torch.nn.Module | None = None) -> None:
        """Apply the masks a last time and remove every hook the recipe added."""
        self.masks.apply()
        self.masks.release_all()

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the schedule exactly: the step, the masks, which
        modifiers changed trainable flags, the structure applied (QAT, removed layers) and
        the recipe itself. Save it with ``torch.save`` next to the model and optimizer."""
        return {
            "version": STATE_VERSION,
            "recipe": self.recipe.to_yaml(),
            "steps_per_epoch": self.steps_per_epoch,
            "step": self.step_count,
            "masks": {n: (e.mask.clone(), e.owner, e.applied_sparsity) for n, e in self.masks.params.items()},
            "trainable_saved": {k: dict(v) for k, v in self.trainable_saved.items()},
            "layers_removed": self.layers.state(),
            "quantization": None if self.quantization is None else self.quantization.state(),
            "released": sorted(self._released_at_end),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state saved by :meth:`state_dict` (after :meth:`modify`, before loading the
        model's and the optimizer's own state dicts)."""
        check_saved_state(state, STATE_VERSION, self.steps_per_epoch, self.model is not None)
        for modifier in state.get("layers_removed", {}):
            self.layers.remove(self.model, int(modifier), state["layers_removed"][modifier])
        if state.get("quantization") is not None:
            from .quantization import QuantizationState

            self.quantization = QuantizationState.restore(self.model, self.recipe, state["quantization"], self.optimizer)
        self._refresh_params()
        self.step_count = int(state["step"])
        self.trainable_saved = {int(k): dict(v) for k, v in state.get("trainable_saved", {}).items()}
        for modifier, saved in self.trainable_saved.items():
            flag = bool(self.recipe.modifiers[modifier].args.get("trainable", False))
            for name in saved:
                self._params[name][1].requires_grad_(flag)
        self._released_at_end = {tuple(x) for x in state.get("released", [])}
        self.masks.release_all()
        for name, (mask, owner, applied) in state.get("masks", {}).items():
            module, param = self._params[name]
            entry = self.masks.hold(name, param, module, int(owner), mask=mask)
            entry.applied_sparsity = applied
        self.masks.apply()
