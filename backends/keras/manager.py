"""The Keras 3 runtime of a recipe: it samples the core's plan step by step and applies it.

With ``model.fit``::

    model, optimizer, callbacks = manager.modify(model, optimizer, steps_per_epoch)
    model.compile(optimizer=optimizer, loss=...)     # compile with the returned optimizer
    model.fit(data, epochs=manager.max_epochs, callbacks=callbacks)
    manager.finalize(model)

From a custom training loop, call ``runtime.step_begin()`` before each optimizer step and
``runtime.step_end()`` after it (that is all the callback does).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

import keras
from recipe_spec.diagnostics.base import RecipeError
from recipe_spec.modifiers import spec
from recipe_spec.recipe.findings import positioned
from recipe_spec.runtime import RecipeRuntime

from . import jax_state
from .checkpoint import RecipeCheckpoint, load_recipe_state, recipe_state_path, save_recipe_state
from .distillation import KerasDistillation
from .jax_state import StateAccess, tolerate_frozen, untolerate_frozen
from .optim import (
    reset_momentum,
    set_value,
    step_variables,
    take_over_learning_rate,
    take_over_weight_decay,
)
from .params import named_variables, numpy_value, param_records
from .precision import MixedPrecisionSteps
from .pruning import MaskedVariable, MaskSet, StepMasks

if TYPE_CHECKING:
    from recipe_spec.params import ParamRecord
    from recipe_spec.recipe import Modifier, Recipe
    from recipe_spec.schedule.events import Event

    from .second_order import SecondOrderSteps

__all__ = [
    "KerasManager", "RecipeCallback", "RecipeCheckpoint", "STATE_VERSION",
    "save_recipe_state", "load_recipe_state", "recipe_state_path",
]

STATE_VERSION = RecipeRuntime.state_version


class RecipeCallback(keras.callbacks.Callback):
    """Applies a recipe during ``model.fit``: a batch's events before it, ``step_end()`` after.

    Its batch-end hook is marked as Keras' default one: a hook of one's own makes Keras read
    every batch's losses back to the host, which stalls a GPU (the host cannot queue the next
    step while the device runs this one). Where another callback of the fit has a batch-end
    hook (or on TensorFlow), Keras calls the hooks in the fit's thread and this one ends the
    step there, before the hooks after it; else Keras calls them from a worker thread, this
    one leaves the step to end when the next batch starts, when the epoch or fit ends, or
    before the state is saved or the recipe finalized (:meth:`KerasManager.settle`)."""

    def __init__(self, runtime: KerasManager):
        super().__init__()
        self.runtime = runtime
        self._thread = threading.get_ident()

    def on_train_begin(self, logs: Any = None) -> None:
        self._thread = threading.get_ident()
        self.runtime.settle()  # a fit stopped by an exception left its last step open
        # weights may have been written since the last fit (set_weights, load_weights): mask
        # them again before the first step
        self.runtime.masks.invalidate()
        self.runtime.masks.apply()
        self.runtime.step_masks.sync()
        if self.runtime.second_order_steps is not None:
            self.runtime.second_order_steps.prepare_fit(self.model)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.runtime.settle()
        self.runtime.step_begin()
        self.runtime.end_due = True

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if threading.get_ident() == self._thread:  # not from Keras' worker thread
            self.runtime.settle()

    on_train_batch_end._is_default = True  # type: ignore[attr-defined]  # Keras' mark: see above

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.runtime.settle()

    def on_train_end(self, logs: Any = None) -> None:
        self.runtime.settle()


class KerasManager(RecipeRuntime):
    """Applies a recipe to a Keras 3 model and optimizer (see the module docstring).

    The schedule, the event handling and the saved state are
    :class:`recipe_spec.runtime.RecipeRuntime`'s; this class supplies the variables, the
    optimizer's learning rate and weight decay, and the model structure.
    """

    framework = "keras"

    def __init__(self, recipe: Recipe):
        super().__init__(recipe)
        self.masks = MaskSet()
        self._vars: dict[str, tuple[Any, str]] = {}
        self._unfreeze_after_step: list[str] = []
        #: what second-order pruning adds to a training step (None: the recipe has none)
        self.second_order_steps: SecondOrderSteps | None = None
        self.mixed_precision = MixedPrecisionSteps(self)  # steps a LossScaleOptimizer skipped
        self.distillation = KerasDistillation([], "disable")  # modify() attaches the recipe's
        #: the masks the optimizer's update reads in the compiled step (:meth:`_mask_updates`)
        self.step_masks = StepMasks(self.masks)
        #: RecipeCallback began a step whose :meth:`step_end` has not run yet (:meth:`settle`)
        self.end_due = False

    # -- setting up -----------------------------------------------------------------------
    def modify(self, model: Any, optimizer: Any, steps_per_epoch: int, epoch: float = 0.0,
               grad_sampler: Any = None, distillation_teacher: Any = "disable") -> tuple[Any, Any, list[Any]]:
        """Attach the recipe; returns ``(model, optimizer, callbacks)`` for ``model.fit``.

        ``grad_sampler``: SparseML's ``{"data_loader_builder": f, "loss_function": loss}`` for
        M-FAC and OBS pruning (:class:`recipe_spec_keras.second_order.GradSampler`). A recipe
        with a training-time M-FAC modifier wraps ``optimizer.apply`` so that each step hands
        its gradients over before the update (:mod:`recipe_spec_keras.second_order`).
        ``distillation_teacher``: as on PyTorch (a model, ``"self"`` or ``"disable"``); ``fit``
        then mixes the distillation term into the loss (:mod:`recipe_spec_keras.distillation`)."""
        self._check_model(model, "modify")
        jax_state.check_recipe(optimizer)
        from .layers import reshaping_layers
        from .quantization import nothing_to_quantize

        refused = [positioned(f, self.recipe) for f in (*reshaping_layers(model, self.recipe.modifiers),
                                                         *nothing_to_quantize(model, self.recipe.modifiers))]
        if refused:
            raise RecipeError(refused)
        targets = self.emitted_targets()
        if "lr" in targets:
            take_over_learning_rate(optimizer)
        if "weight_decay" in targets:
            take_over_weight_decay(optimizer)
        jax_state.track(optimizer, step_variables(optimizer))  # JAX: the compiled step's state
        tolerate_frozen(optimizer, model)
        self.masks.access.model = model
        self._attach(model, optimizer, steps_per_epoch, epoch, grad_sampler)
        self.distillation = KerasDistillation.attach(self, distillation_teacher)
        if self.second_order_steps is not None:  # modify() again: stop watching the old optimizer
            self.second_order_steps.stop()
        self.second_order_steps = None
        if self.pruners is not None and self.pruners.gradient:
            from .second_order import SecondOrderSteps

            self.second_order_steps = SecondOrderSteps(self, optimizer)
        self._mask_updates(optimizer)
        return model, optimizer, [RecipeCallback(self)]

    def _mask_updates(self, optimizer: Any) -> None:
        """Mask the optimizer's updates of every variable a recipe's mask may hold, inside the
        compiled step (:class:`recipe_spec_keras.pruning.StepMasks`): gradients selected by the
        masks in force when they were computed, and a step's new masks zeroing the weights after
        the step's gradient, before its update, as SparseML's gradient hook and pre-step update
        do on PyTorch."""
        assert self.plan is not None
        names: dict[str, None] = {}
        for track in self.plan.tracks:
            first = track.next_step(0)
            for event in track.make(first) if first is not None else ():
                if event.target in ("sparsity", "masks"):
                    names.update(dict.fromkeys(n for n in self.names_for(event.modifier, event.params) if n in self._vars))
        if self.step_masks.install(optimizer, {n: self._vars[n][0] for n in names}):
            if getattr(self.model, "train_function", None) is not None:
                self.model.train_function = None  # traced before the wrapper: trace it again

    def apply(self, model: Any, grad_sampler: Any = None) -> None:  # type: ignore[override]
        """One-shot: prune ``model`` to every pruning modifier's final target now (SparseML's
        ``manager.apply``) and finalize; ``grad_sampler`` as in :meth:`modify`. With an event
        instead of a model this applies that one event (:meth:`RecipeRuntime.apply`)."""
        if not isinstance(model, (keras.Model, keras.layers.Layer)):
            return super().apply(model)
        self._check_model(model, "apply")
        self.masks.access.model = model
        self._attach(model, None, 1, 0.0, grad_sampler, oneshot=True)
        self.oneshot()

    @staticmethod
    def _check_model(model: Any, what: str) -> None:
        if not isinstance(model, (keras.Model, keras.layers.Layer)):
            raise TypeError(f"{what}() needs a Keras model, not {type(model).__name__}")
        if not model.built:
            raise ValueError(f"build the Keras model (call it once or give it an Input) before {what}()")

    def _second_order_host(self, grad_sampler: Any) -> Any:
        from .second_order import KerasHost, check_keras_backend

        gradient_modifiers = {m.type for m in self.recipe.modifiers if "gradients" in getattr(spec(m.type), "needs", ())}
        check_keras_backend(" and ".join(sorted(gradient_modifiers)))
        return KerasHost(self, grad_sampler)

    def loss_update(self, loss: Any, student_outputs: Any = None, student_inputs: Any = None,
                    teacher_inputs: Any = None) -> Any:
        """A custom loop's loss with the DistillationModifiers' terms mixed in (as PyTorch's;
        traced once, it stays right at every step: :mod:`recipe_spec_keras.distillation`)."""
        if self.model is None:
            raise RuntimeError("call modify(model, optimizer, steps_per_epoch) before loss_update()")
        return self.distillation.loss_update(loss, self.step_count, student_outputs, student_inputs, teacher_inputs)

    def settle(self) -> None:
        """Run the :meth:`step_end` that :class:`RecipeCallback` left due, if any."""
        if self.end_due:
            self.end_due = False
            self.step_end()

    def state_dict(self) -> dict[str, Any]:
        self.settle()
        return super().state_dict()

    def finalize(self, model: Any = None) -> None:
        """Apply the masks a last time, stop enforcing them, drop the teachers (the model's
        own ``compute_loss`` back) and stop watching gradients."""
        self.settle()
        super().finalize(model)
        self.step_masks.uninstall()  # all True: a step traced with the wrapper keeps it
        untolerate_frozen(self.optimizer)
        self.distillation.close(self.model)
        if self.second_order_steps is not None:
            self.second_order_steps.stop()

    def detach(self) -> None:
        self.settle()
        super().detach()
        self.step_masks.uninstall()
        if self.second_order_steps is not None:
            self.second_order_steps.stop()

    @property
    def state(self) -> StateAccess:
        """Reads and writes the model's and optimizer's variables where they live now (on JAX
        during ``fit``: the trainer's state, :mod:`recipe_spec_keras.jax_state`)."""
        return self.masks.access

    def _index_params(self) -> None:
        self._vars = {name: (variable, type(layer).__name__) for name, variable, layer in named_variables(self.model)}

    def _param_records(self) -> list[ParamRecord]:
        return param_records(self.model)

    # -- running -------------------------------------------------------------------------
    def step_begin(self) -> None:
        """Apply the events of the current step. A mask they change zeroes its weights after the
        step's gradient, before the update (:class:`~recipe_spec_keras.pruning.StepMasks`), and
        a training-time M-FAC pruning waits for the step's gradients
        (:class:`~recipe_spec_keras.second_order.SecondOrderSteps`)."""
        if not self.mixed_precision.begin():  # retrying a skipped step: its events are in force
            return
        self.distillation.begin(self.step_count, self.model)  # the step's hardness, "self" copies
        if self.second_order_steps is None:
            self.apply_events()
        else:
            self.second_order_steps.begin()
        self.step_masks.begin()
        if self.second_order_steps is not None:
            self.second_order_steps.after_begin()

    def step_end(self) -> None:
        """Unfreeze what this step's events unfroze, re-apply the masks after the optimizer
        step and advance the step counter."""
        if not self.mixed_precision.end():  # the loss scale skipped the step: the schedule stays
            return
        if self.second_order_steps is not None:
            self.second_order_steps.end()
        if self._unfreeze_after_step:
            self.masks.access.sync()  # JAX: the trainer's state follows the trainable flags
            for name in self._unfreeze_after_step:
                self._vars[name][0].trainable = True
            self._unfreeze_after_step = []
            self._retrace()
        self.masks.after_step()
        self.step_masks.end()
        self.step_count += 1

    def load_state_dict(self, state: Mapping[str, Any], allow_recipe_change: bool = False) -> None:
        super().load_state_dict(state, allow_recipe_change)
        self.step_masks.sync(force=True)  # the masks in force when the next step's gradient is taken

    def _hold(self, name: str, modifier: int, from_zeros: bool, mask: Any = None) -> MaskedVariable:
        variable, layer_type = self._vars[name]
        if from_zeros:
            mask = self.masks.access.read(variable) != 0
        elif mask is not None:
            mask = np.asarray(mask)
        return self.masks.hold(name, variable, layer_type, modifier, mask=mask)

    def _trainable(self, name: str) -> bool:
        return bool(self._vars[name][0].trainable)

    def _set_trainable(self, name: str, flag: bool) -> None:
        self.masks.access.sync()  # JAX: the trainer's state follows the trainable flags
        self._vars[name][0].trainable = flag

    def _set_trainable_flags(self, flags: Mapping[str, bool]) -> None:
        """Freeze at once; unfreeze after this step's optimizer step.

        The PyTorch timing, where the event is applied inside ``optimizer.step()``, after the
        backward pass: a parameter frozen at step k gets no update at step k (its gradient is
        dropped), and one unfrozen at step k had no gradient computed for step k, so it first
        changes at step k + 1. Keras applies the event before the forward pass, so a flag that
        turns on waits for :meth:`step_end`.
        """
        changed = False
        for name, flag in flags.items():
            if flag:
                self._unfreeze_after_step.append(name)
            elif self._trainable(name):
                self._set_trainable(name, False)
                changed = True
        if changed:
            self._retrace()

    def _optimizer_groups(self) -> int | None:
        return 1 if self.optimizer is not None else None  # a Keras optimizer has one group

    def _set_optimizer_value(self, key: str, value: float, groups: Any) -> None:
        set_value(self.optimizer, key, value, groups, access=self.masks.access)

    def _reset_momentum(self) -> None:
        reset_momentum(self.optimizer, access=self.masks.access)

    def _retrace(self) -> None:
        """Trainable flags are read when the train function is traced: trace it again."""
        model = self.model
        if getattr(model, "train_function", None) is not None and hasattr(model, "make_train_function"):
            model.make_train_function(force=True)

    def _retrace_all(self) -> None:
        """A layer's ``call`` changed: trace the train function again and drop the cached
        evaluate/predict functions so they are traced again on their next use."""
        self._retrace()
        for attr in ("test_function", "predict_function"):
            if getattr(self.model, attr, None) is not None:
                setattr(self.model, attr, None)

    def _on_layers(self, event: Event, m: Modifier) -> None:
        from .layers import LayerSwap

        if self.layers is None:
            self.layers = LayerSwap()
        layers = event.params if isinstance(event.params, (list, tuple)) else [event.params]
        self.masks.access.sync()  # JAX: the trainer reads the new structure's variables
        if event.value == "remove":
            self.layers.remove(self.model, event.modifier, [str(x) for x in layers])
        else:
            self.layers.restore(self.model, event.modifier)
        self._retrace_all()

    def _on_quantization(self, event: Event, m: Modifier) -> None:
        from .quantization import QuantizationState

        self.masks.access.sync()  # JAX: the trainer reads the observers' variables too
        self.mixed_precision.quantization_starts()  # float32 from QAT on (retraced below)
        self.quantization = QuantizationState.start(self.model, m, event.modifier)
        self._refresh()  # the observer variables are new model variables
        self._retrace_all()

    def _on_observers(self, event: Event, m: Modifier) -> None:
        if self.quantization is not None:
            self.masks.access.sync()  # JAX: assigned below, read again by the trainer
            self.quantization.disable_observers()  # a variable: no retrace needed

    def _on_bn_stats(self, event: Event, m: Modifier) -> None:
        if self.quantization is not None:
            self.masks.access.sync()  # JAX: the trainer reads the variables again
            self.quantization.freeze_bn_stats()
            self._retrace_all()  # Keras reads BatchNormalization.momentum when tracing

    def _on_distillation(self, event: Event, m: Modifier) -> None:
        self.distillation.on_event(event, self)

    # -- saving, resuming (the layout is RecipeRuntime.state_dict's) ---------------------
    def _mask_layout(self, entry: MaskedVariable) -> Any:
        from .masks import kernel_layout

        return kernel_layout(tuple(entry.mask.shape), entry.layer_type)

    def _mask_state(self, entry: MaskedVariable) -> np.ndarray:
        return entry.mask.copy()

    def _extra_state(self) -> dict[str, Any]:
        # a learning rate taken over from a LearningRateSchedule is the recipe's own variable,
        # which model.save() does not store: the recipe state carries it
        return {"optimizer": _optimizer_values(self.optimizer, self.masks.access),
                "distillation": self.distillation.state()}

    def _load_structure(self, state: Mapping[str, Any]) -> None:
        if state.get("layers_removed"):
            from .layers import LayerSwap

            self.layers = self.layers or LayerSwap()
            for modifier, names in state["layers_removed"].items():
                self.layers.remove(self.model, int(modifier), list(names))
        if state.get("quantization"):
            from .quantization import QuantizationState

            # the structure first, so that weights loaded afterwards find the observer variables
            self.quantization = QuantizationState.restore(self.model, state["quantization"])
        if state.get("layers_removed") or state.get("quantization"):
            self._retrace_all()

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        for key, value in state.get("optimizer", {}).items():
            if value is not None and _optimizer_values(self.optimizer, self.masks.access).get(key) is not None:
                set_value(self.optimizer, key, float(value), access=self.masks.access)
        self.distillation.load(state.get("distillation", {}), self)

    def checkpoint_callback(self, filepath: Any, save_freq: Any = "epoch") -> RecipeCheckpoint:
        """A :class:`RecipeCheckpoint` for this run (add it to ``fit``'s callbacks after the
        recipe's own)."""
        return RecipeCheckpoint(self, filepath, save_freq)

    def restore(self, filepath: Any, allow_recipe_change: bool = False) -> int:
        """Load the recipe state saved next to ``filepath`` (after :meth:`modify` on the model
        loaded from it); returns the epoch to give ``fit(initial_epoch=...)``. A state saved
        with another recipe is refused unless ``allow_recipe_change``."""
        self.load_state_dict(load_recipe_state(filepath), allow_recipe_change)
        return self.epoch


def _optimizer_values(optimizer: Any, access: Any = None) -> dict[str, float | None]:
    """The learning rate and weight decay in force when they are variables (else None)."""
    out: dict[str, float | None] = {}
    for key, attr in (("lr", "_learning_rate"), ("weight_decay", "weight_decay")):
        variable = getattr(optimizer, attr, None) if optimizer is not None else None
        if not isinstance(variable, keras.Variable):
            out[key] = None
        else:
            out[key] = float(access.read(variable) if access is not None else numpy_value(variable))
    return out
