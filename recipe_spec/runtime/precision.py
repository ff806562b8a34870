"""Mixed precision and quantization: when a run must stop training in float16.

Fake-quantized training (a QuantizationModifier) runs in float32: PyTorch's observers and
fake-quant kernels do not take float16, and a loss scaler gains nothing there. So mixed
precision ends at the step where the recipe's first quantization modifier starts. This module
answers, framework-free, *when* that is (from the compiled plan, or from the recipe before
``modify()``), and warns the user once when it switches mixed precision off; each backend's
``precision`` module does the switching (PyTorch: the ``GradScaler`` wrapper; Keras: the
layers' dtype policy).

>>> import recipe_spec
>>> from recipe_spec.schedule import compile_plan
>>> recipe = recipe_spec.loads('''
... modifiers:
...   - !EpochRangeModifier {start_epoch: 0, end_epoch: 4}
...   - !QuantizationModifier {start_epoch: 2.5}
... ''')
>>> quantization_start_step(compile_plan(recipe, steps_per_epoch=4))
10
>>> quantization_start_epoch(recipe)
2.5
>>> switch = MixedPrecisionSwitch(compile_plan(recipe, steps_per_epoch=4))
>>> [switch.enabled(step) for step in (0, 9, 10, 11)]
[True, True, False, False]
>>> [switch.enabled_at_epoch(epoch) for epoch in (0, 2.4, 2.5, 3)]
[True, True, False, False]
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from ..modifiers import emits_of

if TYPE_CHECKING:
    from ..recipe.model import Recipe
    from ..schedule.plan import Plan

__all__ = [
    "quantization_start_step", "quantization_start_epoch", "qat_precision_message",
    "MixedPrecisionSwitch", "switch_of", "autocast_enabled",
]


def quantization_start_step(plan: Plan) -> int | None:
    """The optimizer step at which the plan's first quantization modifier starts (None: the
    recipe never quantizes)."""
    starts = [
        event.step
        for track in plan.tracks
        if "quantization" in emits_of(track.modifier.type)
        for event in track.make(track.first)
        if event.target == "quantization" and event.action == "start"
    ]
    return min(starts, default=None)


def quantization_start_epoch(recipe: Recipe) -> float | None:
    """The epoch at which the recipe's first quantization modifier starts, read from the
    recipe (before ``modify()`` compiles a plan); SparseML's ``start_epoch: -1`` is 0. This is
    Sparsify's ``min(m.start_epoch for m in manager.quantization_modifiers)``."""
    starts = []
    for m in recipe.modifiers:
        if "quantization" in emits_of(m.type):
            start = m.args.get("start_epoch", -1)
            starts.append(0.0 if not isinstance(start, (int, float)) or start == -1 else float(start))
    return min(starts, default=None)


def qat_precision_message(step: int, epoch: float, what: str) -> str:
    """The one-line warning given when quantization-aware training turns mixed precision off;
    ``what``: what the backend switched off."""
    return (
        f"recipe-spec: quantization-aware training starts at step {step} (epoch {epoch:g}): mixed "
        f"precision is switched off from here ({what}); a batch now takes more accelerator memory"
    )


class MixedPrecisionSwitch:
    """Whether mixed precision may run at a step of one compiled plan, and the once-only
    warning when it stops (``in_use``: a backend or the user's loop ran mixed precision)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.start_step = quantization_start_step(plan)
        self.in_use = False
        self.warned = False

    def enabled(self, step: int) -> bool:
        """True while no quantization modifier has started at optimizer step ``step``."""
        return self.start_step is None or step < self.start_step

    def enabled_at_epoch(self, epoch: float) -> bool:
        """As :meth:`enabled`, for a (fractional) epoch."""
        if self.start_step is None:
            return True
        return epoch * self.plan.steps_per_epoch < self.start_step

    def switch_off(self, step: int, what: str) -> None:
        """Warn (once per run, only when mixed precision was in use) that it ends at ``step``."""
        if self.in_use and not self.warned:
            self.warned = True
            start = self.start_step if self.start_step is not None else step
            warnings.warn(qat_precision_message(start, start / self.plan.steps_per_epoch, what),
                          RuntimeWarning, stacklevel=4)


def switch_of(runtime: Any) -> MixedPrecisionSwitch:
    """The :class:`MixedPrecisionSwitch` of an attached runtime (one per compiled plan; kept on
    the runtime so that a backend's scaler wrapper, its loop hooks and the manager share it)."""
    if runtime is None or runtime.plan is None:
        raise RuntimeError("call modify(model, optimizer, steps_per_epoch) before asking about mixed precision")
    switch = getattr(runtime, "_mixed_precision_switch", None)
    if switch is None or switch.plan is not runtime.plan:  # modify() again compiles a new plan
        switch = MixedPrecisionSwitch(runtime.plan)
        runtime._mixed_precision_switch = switch
    return switch


def autocast_enabled(recipe: Recipe, runtime: Any, epoch: float | None = None) -> bool:
    """``ScheduledModifierManager.autocast_enabled``: True until a quantization modifier is
    active at ``epoch`` (None: at the runtime's current step; before ``modify()``, epoch 0).

    A True answer for the current step marks mixed precision as in use, so the step at which
    the answer turns False warns once (:func:`qat_precision_message`)."""
    if runtime is None or runtime.plan is None:
        start = quantization_start_epoch(recipe)
        return start is None or (0.0 if epoch is None else epoch) < start
    switch = switch_of(runtime)
    if epoch is not None:
        return switch.enabled_at_epoch(epoch)
    enabled = switch.enabled(runtime.step_count)
    if enabled:
        switch.in_use = True
    else:
        switch.switch_off(runtime.step_count, "autocast off: manager.autocast_enabled() is False")
    return enabled
