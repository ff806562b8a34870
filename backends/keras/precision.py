"""Mixed precision with a recipe on Keras 3: skipped steps, and float32 from QAT on.

With the ``mixed_float16`` dtype policy, ``model.compile`` wraps the optimizer in a
``keras.optimizers.LossScaleOptimizer``, which skips the update whose gradients are not finite
(and halves its loss scale). The recipe's callback still sees the batch, so without care the
schedule would count a step the weights never took. :class:`MixedPrecisionSteps` tells the
runtime whether the optimizer applied the step: it compares the optimizer's ``iterations``
(the inner optimizer's, which only counts applied updates) before and after the step, and only
while a ``LossScaleOptimizer`` is in use (one scalar read per step; none otherwise).

- A skipped step does not advance the schedule (``step_count``, LR, pruning updates): the
  runtime's ``step_end`` returns early (the weights did not change, so the masks hold).
- The batch after it retries the same step: its events were applied before the skipped batch
  and are in force, so the runtime's ``step_begin`` does not apply them again (applying an
  event twice is not harmless: a trainable freeze would save the frozen flags as the ones to
  restore, a QAT start would wrap the layers twice). The real step then runs exactly as it
  would have without the skipped batch.

At the start of quantization-aware training (fake-quantized layers run in float32),
:meth:`MixedPrecisionSteps.quantization_starts` gives every layer with a mixed policy the
float32 policy of its variables (Keras 3 layers have a settable ``dtype_policy``; the runtime
traces the train function again right after, as QAT requires anyway) and warns once. The
``LossScaleOptimizer`` stays: scaling a float32 loss by a power of two changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import keras
from recipe_spec.runtime.precision import switch_of

from .params import numpy_value
from .quantization import layer_paths

if TYPE_CHECKING:
    from recipe_spec.runtime import RecipeRuntime

__all__ = ["MixedPrecisionSteps", "loss_scale_optimizer", "is_mixed", "to_float32"]


def loss_scale_optimizer(runtime: RecipeRuntime) -> Any:
    """The ``LossScaleOptimizer`` that steps ``runtime``'s optimizer (the one ``compile``
    wrapped it in, or the optimizer given to ``modify`` itself), or None."""
    lso = keras.optimizers.LossScaleOptimizer
    compiled = getattr(runtime.model, "optimizer", None)
    if isinstance(compiled, lso) and compiled.inner_optimizer is runtime.optimizer:
        return compiled
    return runtime.optimizer if isinstance(runtime.optimizer, lso) else None


def is_mixed(layer: Any) -> bool:
    """Whether ``layer`` computes in another dtype than its variables' (``mixed_float16``,
    ``mixed_bfloat16``); quantized dtype policies are left alone."""
    policy = getattr(layer, "dtype_policy", None)
    if policy is None or getattr(policy, "quantization_mode", None) is not None:
        return False
    return bool(policy.compute_dtype != policy.variable_dtype)


def to_float32(model: Any) -> list[str]:
    """Give ``model`` and every mixed-precision layer under it the plain policy of its
    variables (``float32``); returns the paths of the layers changed (``""``: the model)."""
    changed = []
    for path, layer in [("", model), *layer_paths(model)]:
        if is_mixed(layer):
            layer.dtype_policy = keras.DTypePolicy(layer.dtype_policy.variable_dtype)
            changed.append(path)
    return changed


class MixedPrecisionSteps:
    """Whether the optimizer applied each step, and the switch to float32 at QAT start (see
    the module docstring). The runtime calls :meth:`begin` first in ``step_begin``,
    :meth:`end` first in ``step_end`` and :meth:`quantization_starts` before QAT starts."""

    def __init__(self, runtime: RecipeRuntime):
        self.runtime = runtime
        self.retrying = False  # the step before was skipped: this one is its retry
        self.skipped = 0  # steps the loss scale skipped so far
        self._before: int | None = None

    def _iterations(self) -> int | None:
        lso = loss_scale_optimizer(self.runtime) if self.runtime.model is not None else None
        return None if lso is None else int(numpy_value(lso.iterations))

    def begin(self) -> bool:
        """True when the step's events are due; False when this batch retries a step the loss
        scale skipped (its events are in force already)."""
        self._before = self._iterations()
        if self._before is not None:
            switch_of(self.runtime).in_use = True
        return not self.retrying

    def end(self) -> bool:
        """True when the optimizer applied the step (the schedule advances); False when the
        loss scale skipped it (non-finite gradients): the schedule stays on this step."""
        before, self._before = self._before, None
        if before is None:
            self.retrying = False
            return True
        applied = self._iterations() != before
        self.retrying = not applied
        self.skipped += not applied
        return applied

    def quantization_starts(self) -> None:
        """QAT starts at the current step: compute in float32 from now on, and warn once."""
        if to_float32(self.runtime.model):
            switch = switch_of(self.runtime)
            switch.in_use = True
            switch.switch_off(self.runtime.step_count, "the model's layers compute in float32 now")
