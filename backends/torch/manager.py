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
from recipe_spec.diagnostics import RecipeError
from recipe_spec.recipe.findings import positioned
from recipe_spec.runtime import RecipeRuntime

from .layers import LayerSwap, reshaping_layers
from .optim import StepHooks, reset_momentum, set_group_value
from .params import param_records, unwrap
from .pruning import MaskedParam, MaskSet

if TYPE_CHECKING:
    from recipe_spec.params import ParamRecord
    from recipe_spec.recipe import Modifier, Recipe
    from recipe_spec.schedule.events import Event

__all__ = ["TorchManager", "STATE_VERSION"]

STATE_VERSION = RecipeRuntime.state_version


class TorchManager(RecipeRuntime):
    """Applies a recipe to a PyTorch model and optimizer.

    Build it with ``recipe.compile("torch")`` or through
    :class:`recipe_spec.ScheduledModifierManager`. Then ``optimizer = manager.modify(model,
    optimizer, steps_per_epoch)``: every ``optimizer.step()`` applies the recipe's events for
    that step, steps the real optimizer, and re-applies the masks. The schedule, the event
    handling and the saved state are :class:`recipe_spec.runtime.RecipeRuntime`'s; this class
    supplies the tensors, the optimizer's param groups and the model structure.
    """

    framework = "torch"

    def __init__(self, recipe: Recipe):
        super().__init__(recipe)
        self.masks = MaskSet()
        self.layers = LayerSwap()
        self._params: dict[str, tuple[torch.nn.Module, torch.nn.Parameter]] = {}
        self.distillation: Any = None  # .distillation.TorchDistillation, set by modify()
        self.step_hooks: StepHooks | None = None  # on the optimizer, set by modify()

    # -- setting up -----------------------------------------------------------------------
    def modify(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps_per_epoch: int,
               epoch: float = 0.0, grad_sampler: Any = None,
               distillation_teacher: Any = "disable") -> torch.optim.Optimizer:
        """Attach the recipe to ``model`` and ``optimizer``; returns ``optimizer`` itself.

        Its ``step()`` now drives the schedule, through the optimizer's own step hooks
        (:class:`recipe_spec_torch.optim.StepHooks`): it stays a ``torch.optim.Optimizer``,
        so LR schedulers, ``GradScaler``, Trainer and Lightning take it, and a training loop
        needs no other change. :meth:`emulated_step` advances the schedule for a batch that
        does not step the optimizer (gradient accumulation). ``epoch`` starts the schedule later (``round(epoch * steps_per_epoch)``).
        ``grad_sampler``: SparseML's ``{"data_loader_builder": f, "loss_function": loss}``
        for M-FAC and OBS pruning (:class:`recipe_spec_torch.second_order.GradSampler`).
        ``distillation_teacher`` (SparseML's keyword): the teacher of the recipe's
        DistillationModifiers, a model, ``"self"`` (a frozen copy of ``model`` taken at each
        modifier's start step) or ``"disable"`` (the default, as SparseML: they do nothing);
        the loop then calls :meth:`loss_update` before ``backward()``. Ignored when the recipe
        has no distillation modifier.
        """
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"modify() needs a torch.nn.Module, not {type(model).__name__}")
        StepHooks.check(optimizer)
        if self.step_hooks is not None:  # modify() again: the previous optimizer is let go
            self.step_hooks.remove()
            self.step_hooks = None
        from .quantization import nothing_to_quantize

        found = [*reshaping_layers(unwrap(model), self.recipe.modifiers),
                 *nothing_to_quantize(unwrap(model), self.recipe.modifiers)]
        refused = [positioned(f, self.recipe) for f in found]
        if refused:
            raise RecipeError(refused)
        self._attach(unwrap(model), optimizer, steps_per_epoch, epoch, grad_sampler)
        from .distillation import TorchDistillation

        self.distillation = TorchDistillation.attach(self.plan, distillation_teacher)
        self.step_hooks = StepHooks(optimizer, self)
        return optimizer

    def emulated_step(self) -> None:
        """Advance the schedule one step without an optimizer step (a batch skipped on purpose,
        gradient accumulation): the step's events still apply."""
        if self.step_hooks is None:
            raise RuntimeError("call modify(model, optimizer, steps_per_epoch) before emulated_step()")
        self.step_hooks.emulated_step()

    def loss_update(self, loss: Any, student_outputs: Any = None, student_inputs: Any = None,
                    teacher_inputs: Any = None) -> Any:
        """The training loss of the current step with the active DistillationModifiers' terms
        mixed in (SparseML's ``manager.loss_update``); call it before ``backward()``. Without an
        active distillation modifier, ``loss`` itself. ``teacher_inputs`` default to
        ``student_inputs``; the teacher runs in eval mode without gradients."""
        if self.model is None:
            raise RuntimeError("call modify(model, optimizer, steps_per_epoch) before loss_update()")
        if self.distillation is None:
            return loss
        return self.distillation.loss_update(
            loss, self.step_count, self.model, self._mask_hook_ids(),
            student_outputs, student_inputs, teacher_inputs,
        )

    def _mask_hook_ids(self) -> set[int]:
        return {handle.id for handle in self.masks._module_hooks.values()}

    def wrap_scaler(self, scaler: Any) -> Any:
        """A ``GradScaler`` that drives the schedule and is switched off when quantization
        starts (:class:`recipe_spec_torch.precision.RecipeScaler`); after :meth:`modify`."""
        from .precision import wrap_scaler

        return wrap_scaler(self, scaler)

    def apply(self, model: torch.nn.Module, grad_sampler: Any = None) -> None:  # type: ignore[override]
        """One-shot: prune ``model`` to every pruning modifier's final target now (SparseML's
        ``manager.apply``) and finalize; ``grad_sampler`` as in :meth:`modify`. With no event
        argument this is the one-shot entry point; ``apply(event)`` applies one event."""
        if not isinstance(model, torch.nn.Module):
            return super().apply(model)
        self._attach(unwrap(model), None, 1, 0.0, grad_sampler, oneshot=True)
        self.oneshot()

    def _second_order_host(self, grad_sampler: Any) -> Any:
        from .second_order import TorchHost

        return TorchHost(self, grad_sampler)

    def _index_params(self) -> None:
        assert self.model is not None
        self._params = {}
        for module_name, module in self.model.named_modules():
            for pname, param in module.named_parameters(recurse=False):
                full = f"{module_name}.{pname}" if module_name else pname
                self._params[full] = (module, param)

    def _param_records(self) -> list[ParamRecord]:
        return param_records(self.model)

    # -- running -------------------------------------------------------------------------
    def before_step(self) -> None:
        """Apply the events of the current step (the optimizer's step pre-hook)."""
        self.apply_events()

    def after_step(self) -> None:
        """Re-apply the masks and advance the step counter."""
        self.masks.apply()
        self.step_count += 1

    def _hold(self, name: str, modifier: int, from_zeros: bool, mask: Any = None) -> MaskedParam:
        module, param = self._params[name]
        if from_zeros:
            mask = param.detach() != 0
        return self.masks.hold(name, param, module, modifier, mask=mask)

    def _trainable(self, name: str) -> bool:
        return bool(self._params[name][1].requires_grad)

    def _set_trainable(self, name: str, flag: bool) -> None:
        param = self._params[name][1]
        param.requires_grad_(flag)
        if flag:
            self.masks.watch_grads(name)  # held while frozen: its gradients are masked from now on
        else:
            param.grad = None  # frozen at this step: its gradient is not applied

    def _set_optimizer_value(self, key: str, value: float, groups: Any) -> None:
        assert self.optimizer is not None
        set_group_value(self.optimizer, key, value, groups)

    def _optimizer_groups(self) -> int | None:
        return len(self.optimizer.param_groups) if self.optimizer is not None else None

    def _reset_momentum(self) -> None:
        if self.optimizer is not None:
            reset_momentum(self.optimizer)

    def _on_layers(self, event: Event, m: Modifier) -> None:
        assert self.model is not None
        layers = event.params if isinstance(event.params, (list, tuple)) else [event.params]
        if event.value == "remove":
            self.layers.remove(self.model, event.modifier, [str(x) for x in layers])
        else:
            self.layers.restore(self.model, event.modifier)
        self._refresh()

    def _on_quantization(self, event: Event, m: Modifier) -> None:
        from .quantization import QuantizationState

        assert self.model is not None
        self.quantization = QuantizationState.start(self.model, m, self.optimizer)
        self._refresh()

    def _on_observers(self, event: Event, m: Modifier) -> None:
        if self.quantization is not None:
            self.quantization.disable_observers()

    def _on_bn_stats(self, event: Event, m: Modifier) -> None:
        if self.quantization is not None:
            self.quantization.freeze_bn_stats()

    def _on_distillation(self, event: Event, m: Modifier) -> None:
        # Whether a modifier is active is read from its plan window at loss_update (the loss of
        # step k is computed before step k's events apply); here the self-distillation teacher
        # is copied at the start step (unless loss_update already did) and dropped at the end.
        if self.distillation is None:
            return
        if event.action == "start":
            assert self.model is not None
            self.distillation.start(event.modifier, self.model, self._mask_hook_ids())
        elif event.action == "end":
            self.distillation.end(event.modifier)

    def finalize(self, model: Any = None) -> None:
        """Apply the masks a last time, stop enforcing them, drop the teachers and take the
        recipe off the optimizer's step hooks."""
        super().finalize(model)
        if self.step_hooks is not None:
            self.step_hooks.remove()
        if self.distillation is not None:
            self.distillation.teachers.clear()
            self.distillation.mode = "disable"

    def detach(self) -> None:
        super().detach()
        if self.step_hooks is not None:
            self.step_hooks.remove()

    # -- saving, resuming (the layout is RecipeRuntime.state_dict's) ---------------------
    def _extra_state(self) -> dict[str, Any]:
        if self.distillation is None:
            return {}
        return {"distillation": self.distillation.state()}

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        if self.distillation is not None:
            assert self.model is not None
            self.distillation.load(state.get("distillation", {}), self.model, self._mask_hook_ids())

    def _mask_state(self, entry: MaskedParam) -> torch.Tensor:
        return entry.mask.clone()

    def _mask_zeros(self, entry: MaskedParam) -> tuple[int, int]:
        return int(entry.mask.numel() - entry.mask.count_nonzero()), int(entry.mask.numel())

    def _load_structure(self, state: Mapping[str, Any]) -> None:
        for modifier in state.get("layers_removed", {}):
            self.layers.remove(self.model, int(modifier), state["layers_removed"][modifier])
        if state.get("quantization") is not None:
            from .quantization import QuantizationState

            self.quantization = QuantizationState.restore(self.model, self.recipe, state["quantization"], self.optimizer)
