"""Optimizer values the recipe drives on Keras 3: the learning rate and the weight decay.

Both become variables when the recipe is attached (before ``fit`` traces its train function),
so a recipe can change them between steps of a compiled (``tf.function`` / ``jit_compile``)
train step: assigning a variable needs no retracing. An optimizer built with a
``LearningRateSchedule`` hands the learning rate over to the recipe when the recipe sets it
(its schedule's current value is the starting value).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras

from .params import numpy_value

__all__ = ["take_over_learning_rate", "take_over_weight_decay", "set_value", "current_value"]


def _variable(optimizer: Any, name: str, value: float) -> Any:
    return keras.Variable(float(value), dtype="float32", trainable=False, name=name)


def take_over_learning_rate(optimizer: Any) -> None:
    """Make ``optimizer.learning_rate`` a variable the recipe can assign."""
    current = optimizer._learning_rate
    if isinstance(current, keras.optimizers.schedules.LearningRateSchedule):
        start = float(keras.ops.convert_to_numpy(current(optimizer.iterations)))
        optimizer._learning_rate = _variable(optimizer, "recipe_learning_rate", start)
    elif not isinstance(current, keras.Variable):
        optimizer._learning_rate = _variable(optimizer, "recipe_learning_rate", float(current))


def take_over_weight_decay(optimizer: Any) -> None:
    """Make ``optimizer.weight_decay`` a variable (Keras reads a float only when tracing)."""
    current = getattr(optimizer, "weight_decay", None)
    if not isinstance(current, keras.Variable):
        optimizer.weight_decay = _variable(optimizer, "recipe_weight_decay", float(current or 0.0))


def set_value(optimizer: Any, key: str, value: float, groups: Sequence[int] | None = None) -> None:
    """Set the learning rate (``lr``) or weight decay. Keras optimizers have one parameter
    group: param_groups other than ``[0]`` are refused with a clear error."""
    if groups is not None and list(groups) not in ([0], []):
        raise ValueError(
            f"param_groups {list(groups)}: a Keras optimizer has a single parameter group (0)"
        )
    if key == "lr":
        optimizer._learning_rate.assign(float(value))
    else:
        optimizer.weight_decay.assign(float(value))


def current_value(optimizer: Any, key: str) -> float:
    """The value in force (for tests and checkpoints)."""
    variable = optimizer._learning_rate if key == "lr" else optimizer.weight_decay
    return float(numpy_value(variable))
