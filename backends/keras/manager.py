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

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

import keras
from recipe_spec.params import ParamIndex, resolve
from recipe_spec.schedule import compile_plan
from recipe_spec.schedule.plan import GRADUAL_PRUNING, Event, Plan

from .optim import set_value, take_over_learning_rate, take_over_weight_decay
from .params import named_variables, param_records
from .pruning import MaskSet

if TYPE_CHECKING:
    from recipe_spec.recipe import Modifier, Recipe

__all__ = ["KerasManager", "RecipeCallback", "STATE_VERSION"]

STATE_VERSION = 1


class RecipeCallback(keras.callbacks.Callback):
    """Applies a recipe during ``model.fit``: events before each batch, masks after it."""

    def __init__(self, runtime: KerasManager):
        super().__init__()
        self.runtime = runtime

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.runtime.step_begin()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.runtime.step_end()


class KerasManager:
    """Applies a recipe to a Keras 3 model and optimizer (see the module docstring)."""

    def __init__(self, recipe: Recipe):
        self.recipe = recipe
        self.plan: Plan | None = None
        self.model: Any = None
        self.optimizer: Any = None
        self.steps_per_epoch = 0
        self.step_count = 0
        self.masks = MaskSet()
        self.trainable_saved: dict[int, dict[str, bool]] = {}
        self._vars: dict[str, tuple[Any, str]] = {}
        self._index: ParamIndex | None = None
        self._resolved: dict[tuple[int, Any], list[str]] = {}
        self._released_at_end: set[tuple[int, str]] = set()

    # -- setting up -----------------------------------------------------------------------
    def modify(self, model: Any, optimizer: Any, steps_per_epoch: int, epoch: float = 0.0) -> tuple[Any, Any, list[Any]]:
        """Attach the recipe; returns ``(model, optimizer, callbacks)`` for ``model.fit``."""
        if not isinstance(model, (keras.Model, keras.layers.Layer)):
            raise TypeError(f"modify() needs a Keras model, not {type(model).__name__}")
        if not model.built:
            raise ValueError("build the Keras model (call it once or give it an Input) before modify()")
        self.plan = compile_plan(self.recipe, steps_per_epoch)
        self.steps_per_epoch = steps_per_epoch
        self.model, self.optimizer = model, optimizer
        self.step_count = round(epoch * steps_per_epoch)
        types = {m.type for m in self.recipe.modifiers}
        if types & {"LearningRateModifier", "LearningRateFunctionModifier", "SetLearningRateModifier"}:
            take_over_learning_rate(optimizer)
        if "SetWeightDecayModifier" in types:
            take_over_weight_decay(optimizer)
        self._refresh()
        self._check_params()
        return model, optimizer, [RecipeCallback(self)]

    def _refresh(self) -> None:
        self._vars = {}
        for name, variable, layer in named_variables(self.model):
            self._vars[name] = (variable, type(layer).__name__)
        self._index = ParamIndex(param_records(self.model))
        self._resolved = {}

    def _check_params(self) -> None:
        from recipe_spec.diagnostics import RecipeError
        from recipe_spec.lint import lint_recipe

        assert self._index is not None
        problems = [
            d for d in lint_recipe(self.recipe, self._index.records, "keras")
            if d.severity.value == "error" and d.code in ("P001", "P004", "P005", "P006")
        ]
        if problems:
            raise RecipeError(problems)

    def names_for(self, modifier: int, selector: Any) -> list[str]:
        """The variable names (Keras paths) a selector resolves to (by path or portable alias)."""
        key = (modifier, selector if isinstance(selector, (str, tuple)) else repr(selector))
        if key not in self._resolved:
            assert self._index is not None
            self._resolved[key] = list(resolve(selector, self._index).names) if selector is not None else []
        return self._resolved[key]

    # -- running -------------------------------------------------------------------------
    def step_begin(self) -> None:
        """Apply the events of the current step and enforce the masks before the forward."""
        assert self.plan is not None
        for event in self.plan.events_at(self.step_count):
            handler = getattr(self, f"_on_{event.target}", None)
            if handler is not None:
                handler(event, self.recipe.modifiers[event.modifier])
        self.masks.apply()

    def step_end(self) -> None:
        """Re-apply the masks after the optimizer step and advance the step counter."""
        self.masks.apply()
        self.step_count += 1

    def _on_sparsity(self, event: Event, m: Modifier) -> None:
        entries = []
        for name in self.names_for(event.modifier, event.params):
            if (event.modifier, name) in self._released_at_end:
                continue
            variable, layer_type = self._vars[name]
            entries.append(self.masks.hold(name, variable, layer_type, event.modifier))
        if entries:
            global_sparsity = m.type == "GlobalMagnitudePruningModifier" or bool(m.args.get("global_sparsity", False))
            self.masks.update(entries, float(event.value), m.args.get("mask_type", "unstructured"), global_sparsity, event.step)

    def _on_masks(self, event: Event, m: Modifier) -> None:
        names = self.names_for(event.modifier, event.params)
        if event.value == "hold":
            for name in names:
                variable, layer_type = self._vars[name]
                value = np.asarray(keras.ops.convert_to_numpy(variable))
                self.masks.hold(name, variable, layer_type, event.modifier, mask=value != 0)
        elif event.value == "release":
            self.masks.release(names)
            if m.type in GRADUAL_PRUNING:
                self._released_at_end.update((event.modifier, n) for n in names)

    def _on_lr(self, event: Event, m: Modifier) -> None:
        set_value(self.optimizer, "lr", float(event.value), event.params)

    def _on_weight_decay(self, event: Event, m: Modifier) -> None:
        set_value(self.optimizer, "weight_decay", float(event.value), event.params)

    def _on_trainable(self, event: Event, m: Modifier) -> None:
        names = self.names_for(event.modifier, event.params)
        if event.value == "restore":
            for name, flag in self.trainable_saved.pop(event.modifier, {}).items():
                self._vars[name][0].trainable = flag
        else:
            self.trainable_saved[event.modifier] = {n: bool(self._vars[n][0].trainable) for n in names}
            for name in names:
                self._vars[name][0].trainable = bool(event.value)
        self._retrace()

    def _retrace(self) -> None:
        """Trainable flags are read when the train function is traced: trace it again."""
        model = self.model
        if getattr(model, "train_function", None) is not None and hasattr(model, "make_train_function"):
            model.make_train_function(force=True)

    # -- ending, saving, resuming --------------------------------------------------------
    def finalize(self, model: Any = None) -> None:
        """Apply the masks a last time and stop enforcing them."""
        self.masks.apply()
        self.masks.release_all()

    def state_dict(self) -> dict[str, Any]:
        """The schedule's state: step, masks (NumPy), frozen flags and the recipe."""
        return {
            "version": STATE_VERSION,
            "recipe": self.recipe.to_yaml(),
            "steps_per_epoch": self.steps_per_epoch,
            "step": self.step_count,
            "masks": {n: (e.mask.copy(), e.owner, e.applied_sparsity) for n, e in self.masks.params.items()},
            "trainable_saved": {k: dict(v) for k, v in self.trainable_saved.items()},
            "released": sorted(self._released_at_end),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state saved by :meth:`state_dict` (after :meth:`modify`)."""
        if self.model is None:
            raise RuntimeError("call modify(model, optimizer, steps_per_epoch) before load_state_dict()")
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported recipe-spec state version {state.get('version')!r}")
        if state.get("steps_per_epoch") not in (None, self.steps_per_epoch):
            raise ValueError(
                f"the saved schedule ran at steps_per_epoch={state['steps_per_epoch']}, but modify() "
                f"was given {self.steps_per_epoch}; resume with the same steps_per_epoch"
            )
        self.step_count = int(state["step"])
        self.trainable_saved = {int(k): dict(v) for k, v in state.get("trainable_saved", {}).items()}
        for modifier, saved in self.trainable_saved.items():
            flag = bool(self.recipe.modifiers[modifier].args.get("trainable", False))
            for name in saved:
                self._vars[name][0].trainable = flag
        self._released_at_end = {tuple(x) for x in state.get("released", [])}
        self.masks.release_all()
        for name, (mask, owner, applied) in state.get("masks", {}).items():
            variable, layer_type = self._vars[name]
            entry = self.masks.hold(name, variable, layer_type, int(owner), mask=np.asarray(mask))
            entry.applied_sparsity = applied
        self.masks.apply()
