"""Optimizer values the recipe drives on Keras 3 (the learning rate and the weight decay), and
the gradients it watches before each update (second-order pruning, :func:`watch_gradients`).

Both become variables when the recipe is attached (before ``fit`` traces its train function),
so a recipe can change them between steps of a compiled (``tf.function`` / ``jit_compile``)
train step: assigning a variable needs no retracing. An optimizer built with a
``LearningRateSchedule`` hands the learning rate over to the recipe when the recipe sets it
(its schedule's current value is the starting value).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras

from .params import numpy_value

__all__ = [
    "take_over_learning_rate", "take_over_weight_decay", "set_value", "current_value",
    "watch_gradients", "unwatch_gradients", "reset_momentum",
]


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


def reset_momentum(optimizer: Any) -> int:
    """Zero every first-moment slot of ``optimizer`` (the ``*_momentum`` variables of SGD,
    RMSprop, Adam and AdamW: the same state as PyTorch's ``momentum_buffer`` / ``exp_avg``);
    returns how many were zeroed. AC/DC's ``momentum_buffer_reset``."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    count = 0
    for variable in inner.variables:
        if variable.name.endswith("_momentum"):
            variable.assign(keras.ops.zeros_like(variable))
            count += 1
    return count


# -- gradients handed to the recipe before the optimizer's update ------------------------------
#: The optimizer attribute holding the original ``apply`` while a recipe watches its gradients.
_ORIGINAL_APPLY = "_recipe_original_apply"


def watch_gradients(optimizer: Any, variables: Sequence[Any], on_gradients: Callable[[list[Any]], None]) -> None:
    """Wrap ``optimizer.apply`` (which ``apply_gradients`` calls) on the instance so that every
    update first calls ``on_gradients(grads)``, one NumPy array (or None: no gradient this
    step) per variable of ``variables``, and the update then reads the variables as
    ``on_gradients`` left them (it may write them: second-order pruning).

    - TensorFlow, inside ``model.fit``'s compiled step or any ``tf.function``: the gradients
      leave the graph through one ``tf.py_function``; a no-op write on each variable, made
      after it, orders every later read and write of the variables (the weight decay, the
      update) after whatever the Python side assigned. Under a ``tf.distribute`` strategy
      this runs once per step, in cross-replica context (``merge_call``), with the sum of
      the replicas' gradients (what the optimizer's all-reduce applies). XLA cannot run
      Python: the step must not be ``jit_compile``d.
    - TensorFlow eager, and Keras on torch (eager): ``on_gradients`` is called directly.
    - Keras on JAX does not call ``apply`` inside ``fit`` (its trainer is stateless): refused
      by the caller.

    Installing it twice replaces the previous callback; :func:`unwatch_gradients` undoes it.
    """
    unwatch_gradients(optimizer)
    original = optimizer.apply
    watched = list(variables)
    backend = keras.backend.backend()

    def apply(grads: Any, trainable_variables: Any = None) -> Any:
        grads = list(grads)
        present = list(trainable_variables) if trainable_variables is not None else list(optimizer._trainable_variables)
        scale = getattr(optimizer, "loss_scale_factor", None)
        by_id = {id(v): g for v, g in zip(present, grads, strict=False)}
        picked = [by_id.get(id(v)) for v in watched]
        if backend == "tensorflow":
            _tf_hand_over(picked, watched, on_gradients, scale)
        else:
            on_gradients([None if g is None else _unscale(numpy_value(g), scale) for g in picked])
        return original(grads, trainable_variables)

    object.__setattr__(optimizer, "apply", apply)
    optimizer.__dict__[_ORIGINAL_APPLY] = original


def unwatch_gradients(optimizer: Any) -> None:
    """Give ``optimizer`` its own ``apply`` back (a compiled step traced before keeps the hook)."""
    if optimizer is not None and _ORIGINAL_APPLY in optimizer.__dict__:
        del optimizer.__dict__[_ORIGINAL_APPLY]
        optimizer.__dict__.pop("apply", None)


def _unscale(value: Any, scale: Any) -> Any:
    import numpy as np

    value = np.asarray(value)
    return value if scale is None else value / scale


def _tf_hand_over(picked: list[Any], watched: list[Any], on_gradients: Callable[[list[Any]], None], scale: Any) -> None:
    import tensorflow as tf

    have = [i for i, g in enumerate(picked) if g is not None]

    def call(values: Sequence[Any]) -> None:
        out: list[Any] = [None] * len(picked)
        for i, value in zip(have, values, strict=True):
            out[i] = _unscale(value.numpy() if hasattr(value, "numpy") else value, scale)
        on_gradients(out)

    def merged(strategy: Any, grads: list[Any]) -> None:
        totals = []
        for g in grads:
            parts = [tf.convert_to_tensor(p) for p in strategy.experimental_local_results(g)]
            totals.append(parts[0] if len(parts) == 1 else tf.add_n(parts))
        if tf.executing_eagerly():
            call(totals)
            return

        def hook(*values: Any) -> bool:
            call(values)
            return True

        done = tf.py_function(hook, inp=totals, Tout=tf.bool)
        for variable in watched:  # later reads and writes of these wait for the hook's writes
            for part in strategy.experimental_local_results(getattr(variable, "_value", variable)):
                with tf.device(part.device), tf.control_dependencies([done]):
                    if part.shape.rank:  # scatter nothing: O(1)
                        tf.raw_ops.ResourceScatterAdd(
                            resource=part.handle, indices=tf.zeros([0], tf.int32),
                            updates=tf.zeros([0, *part.shape[1:]], part.dtype),
                        )
                    else:
                        part.assign_add(tf.zeros((), part.dtype))

    context = tf.distribute.get_replica_context()
    if context is None:  # cross-replica context already (a custom loop calling apply there)
        merged(tf.distribute.get_strategy(), [picked[i] for i in have])
    else:
        context.merge_call(merged, args=([picked[i] for i in have],))
