"""Mixed precision with a recipe on PyTorch: the ``GradScaler`` wrapper.

A scaler skips the optimizer step whose gradients hold an inf or a NaN
(``GradScaler.step(optimizer)`` calls ``optimizer.step()`` only when they are finite), so the
schedule, driven by the recipe's optimizer ``step()``, stays put on such a step: its events
(learning rate, pruning update) apply at the next real step, as if the skipped batch had not
been drawn. :class:`RecipeScaler` adds what a scaler alone cannot do:

- ``scaler.step()`` and ``scaler.step(optimizer)`` drive the schedule (both step the recipe's
  optimizer, whose step hooks run the recipe: Sparsify's wrapper raised ``TypeError`` on the
  first);
- from the step where the first quantization modifier starts (fake-quantized training runs in
  float32), the scaler is disabled: ``scale(loss)`` returns ``loss``, ``step()`` just steps,
  ``update()`` and ``unscale_()`` do nothing, and a warning says so once. Autocast is the
  loop's: ``with torch.autocast(device, enabled=manager.autocast_enabled()):``.

>>> import torch, recipe_spec
>>> model = torch.nn.Linear(4, 2)
>>> manager = recipe_spec.ScheduledModifierManager.from_yaml('''
... modifiers:
...   - !EpochRangeModifier {start_epoch: 0, end_epoch: 2}
... ''')
>>> optimizer = manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.1), steps_per_epoch=2)
>>> scaler = manager.wrap_scaler(torch.amp.GradScaler("cpu"))
>>> loss = model(torch.randn(3, 4)).sum()
>>> scaler.scale(loss).backward(); _ = scaler.step(); scaler.update()
>>> manager.runtime.step_count, scaler.get_scale()   # every other attribute is the scaler's
(1, 65536.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recipe_spec.runtime.precision import switch_of

if TYPE_CHECKING:
    from recipe_spec.runtime import RecipeRuntime

__all__ = ["RecipeScaler", "wrap_scaler"]


class RecipeScaler:
    """A ``torch.amp.GradScaler`` (or any object with its ``scale``/``step``/``update``) that
    drives a recipe's schedule and switches itself off when quantization starts (see the
    module docstring). Every other attribute is the scaler's."""

    def __init__(self, scaler: Any, runtime: RecipeRuntime):
        if not all(callable(getattr(scaler, name, None)) for name in ("scale", "step", "update")):
            raise TypeError(
                "wrap_scaler() needs a torch.amp.GradScaler (scale/step/update). "
                f"Received: scaler={type(scaler).__name__}"
            )
        self.__dict__.update(scaler=scaler, runtime=runtime, _stepper=runtime.optimizer)
        self.__dict__["_switch"] = switch_of(runtime)
        if _enabled(scaler):
            self._switch.in_use = True

    # -- the scaler's training-step API ---------------------------------------------------
    def scale(self, outputs: Any) -> Any:
        """``scaler.scale(outputs)``; after quantization starts, ``outputs`` unchanged."""
        return self.scaler.scale(outputs) if self.active() else outputs

    def unscale_(self, optimizer: Any = None) -> None:
        """``scaler.unscale_(optimizer)`` (default: the recipe's optimizer); nothing once off."""
        if self.active():
            self.scaler.unscale_(self._optimizer(optimizer))

    def step(self, optimizer: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``scaler.step(optimizer)``: the recipe's optimizer steps (and the schedule with it,
        through its step hooks) unless the gradients are not finite; ``optimizer`` may be
        omitted. Once the scaler is off: a plain step."""
        stepper = self._optimizer(optimizer)
        if self.active():
            return self.scaler.step(stepper, *args, **kwargs)
        return stepper.step(*args, **kwargs)

    def update(self, new_scale: Any = None) -> None:
        """``scaler.update(new_scale)``; nothing once the scaler is off. The update of the last
        step before quantization still runs (the step counter already shows the next step)."""
        if _enabled(self.scaler):
            self.scaler.update(new_scale)
        self.active()  # switch off (and warn) now if quantization starts at the next step

    def is_enabled(self) -> bool:
        return self.active()

    def active(self) -> bool:
        """Whether the scaler still runs: it was enabled and quantization has not started at
        the current step. The first call that finds quantization started disables the scaler
        and warns (once) that mixed precision ends."""
        if not _enabled(self.scaler):
            return False
        if self._switch.enabled(self.runtime.step_count):
            return True
        # GradScaler has no public switch: is_enabled() reads `_enabled`, and with it False
        # every method of the scaler is a no-op (so the scaler itself is off for the user too)
        self.scaler._enabled = False
        self._switch.switch_off(self.runtime.step_count, "GradScaler disabled, manager.autocast_enabled() is False")
        return False

    def _optimizer(self, optimizer: Any) -> Any:
        """The optimizer to step: the recipe's (whose step hooks drive the schedule) for None."""
        return self._stepper if optimizer is None else optimizer

    # -- everything else is the scaler's ----------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["scaler"], name)

    def __repr__(self) -> str:
        return f"RecipeScaler({self.scaler!r})"


def _enabled(scaler: Any) -> bool:
    is_enabled = getattr(scaler, "is_enabled", None)
    return bool(is_enabled()) if callable(is_enabled) else True


def wrap_scaler(runtime: RecipeRuntime, scaler: Any) -> RecipeScaler:
    """``scaler`` wrapped for ``runtime`` (a scaler already wrapped is unwrapped first)."""
    if runtime.model is None:
        raise RuntimeError("call modify(model, optimizer, steps_per_epoch) before wrap_scaler()")
    if isinstance(scaler, RecipeScaler):
        scaler = scaler.scaler
    return RecipeScaler(scaler, runtime)
