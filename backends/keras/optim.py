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
    "take_over_learning_rate", "take_over_weight_decay", "set_value", "current_value", "step_variables",
    "watch_gradients", "unwatch_gradients", "mask_gradients", "unmask_gradients", "reset_momentum",
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


def set_value(optimizer: Any, key: str, value: float, groups: Sequence[int] | None = None,
              access: Any = None) -> None:
    """Set the learning rate (``lr``) or weight decay. Keras optimizers have one parameter
    group: param_groups other than ``[0]`` are refused with a clear error. ``access``: a
    :class:`~recipe_spec_keras.jax_state.StateAccess` (on JAX, the write reaches the state of a
    running ``fit``)."""
    if groups is not None and list(groups) not in ([0], []):
        raise ValueError(
            f"param_groups {list(groups)}: a Keras optimizer has a single parameter group (0)"
        )
    variable = optimizer._learning_rate if key == "lr" else optimizer.weight_decay
    if access is not None:
        access.write(variable, float(value))
    else:
        variable.assign(float(value))


def step_variables(optimizer: Any) -> list[Any]:
    """The learning rate and weight decay variables the recipe took over (JAX: they become
    optimizer variables, :func:`recipe_spec_keras.jax_state.track`)."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    out = []
    for attr in ("_learning_rate", "weight_decay"):
        variable = getattr(inner, attr, None)
        if isinstance(variable, keras.Variable):
            out.append(variable)
    return out


def current_value(optimizer: Any, key: str, access: Any = None) -> float:
    """The value in force (for tests and checkpoints)."""
    variable = optimizer._learning_rate if key == "lr" else optimizer.weight_decay
    return float(access.read(variable) if access is not None else numpy_value(variable))


def reset_momentum(optimizer: Any, access: Any = None) -> int:
    """Zero every first-moment slot of ``optimizer`` (the ``*_momentum`` variables of SGD,
    RMSprop, Adam and AdamW: the same state as PyTorch's ``momentum_buffer`` / ``exp_avg``);
    returns how many were zeroed. AC/DC's ``momentum_buffer_reset``."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    count = 0
    for variable in inner.variables:
        if variable.name.endswith("_momentum"):
            zeros = keras.ops.zeros(tuple(variable.shape), dtype=variable.dtype)
            if access is not None:
                access.write(variable, zeros)
            else:
                variable.assign(zeros)
            count += 1
    return count


# -- wrappers of the optimizer's apply (gradients masked, or handed to the recipe) -------------
def _wrap_apply(optimizer: Any, key: str, transform: Callable[[list[Any], Any], list[Any]],
                after: Callable[[list[Any], Any], None] | None = None) -> None:
    """Wrap ``optimizer.apply`` (which ``apply_gradients`` and, on JAX, ``stateless_apply``
    call) on the instance: every update first runs ``grads = transform(grads,
    trainable_variables)``, and ``after(grads, trainable_variables)`` once it is done. Wrappers
    of different ``key`` stack (the latest runs first) and each comes off by itself
    (:func:`_unwrap_apply`); installing a ``key`` again replaces it."""
    _unwrap_apply(optimizer, key)

    def apply(grads: Any, trainable_variables: Any = None) -> Any:
        grads = transform(list(grads), trainable_variables)
        out = apply.inner(grads, trainable_variables)  # type: ignore[attr-defined]
        if after is not None:
            after(grads, trainable_variables)
        return out

    apply.inner = optimizer.apply  # type: ignore[attr-defined]
    apply.recipe_key = key  # type: ignore[attr-defined]
    object.__setattr__(optimizer, "apply", apply)


def _unwrap_apply(optimizer: Any, key: str) -> None:
    """Take the ``key`` wrapper off ``optimizer.apply`` (the others stay); a compiled step traced
    before keeps it."""
    if optimizer is None:
        return
    outer, current = None, optimizer.__dict__.get("apply")
    while current is not None and hasattr(current, "recipe_key"):
        if current.recipe_key == key:
            inner = current.inner
            if outer is not None:
                outer.inner = inner
            elif hasattr(inner, "recipe_key") or getattr(inner, "__func__", None) is not getattr(type(optimizer), "apply", None):
                object.__setattr__(optimizer, "apply", inner)  # a wrapper someone else installed
            else:
                optimizer.__dict__.pop("apply", None)  # the class's own apply again
            return
        outer, current = current, current.inner


def _present(optimizer: Any, trainable_variables: Any) -> list[Any]:
    if trainable_variables is not None:
        return list(trainable_variables)
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return list(getattr(optimizer, "_trainable_variables", None) or inner._trainable_variables)


def mask_gradients(optimizer: Any, masks: Sequence[tuple[Any, Any]],
                   update_masks: Sequence[tuple[Any, Any]] = (), pending: Any = None,
                   after_masks: Sequence[tuple[Any, Any]] = (),
                   pending_now: Callable[[], bool] | None = None) -> None:
    """Mask every update of ``optimizer`` inside the compiled step, as SparseML's gradient hook
    and pre-step mask update do on PyTorch:

    - ``masks``: ``grad = where(mask, grad, 0)`` for each ``(variable, mask)``, ``mask`` a bool
      ``keras.Variable`` of the variable's shape that the caller assigns between steps (no
      retracing; nothing leaves the device). A pruned weight's gradient is exactly 0 even
      where it is NaN or infinite, so its optimizer state (momentum) only decays.
    - ``update_masks``, when the bool scalar variable ``pending`` is True: ``variable =
      where(mask, variable, 0)`` after the gradients were taken and before the update, so a
      mask computed at this step zeroes its weights after the step's forward pass saw them
      (SparseML prunes inside ``optimizer.step()``). Under a ``tf.distribute`` strategy this
      runs on every replica's copy, as Keras' own weight decay does. ``pending`` None (JAX):
      always, the caller keeping these masks all True at a step with nothing due.
    - ``after_masks``: ``variable = where(mask, variable, 0)`` after the update, inside the
      compiled step, so that a step with no event does no work per weight outside it (on JAX
      the masks could not even be assigned between steps without a sync: the trainer holds the
      weights as the compiled step's state; ``stateless_apply`` calls this ``apply``).

    Installing it again replaces the masks; :func:`unmask_gradients` undoes it. A variable
    without a gradient (frozen) is left alone."""
    by_id = {id(variable): mask for variable, mask in masks}
    zeroing = list(update_masks)
    after_by_id = {id(variable): mask for variable, mask in after_masks}
    on_torch = keras.backend.backend() == "torch"  # eager: torch's own ops, not Keras' per-call work

    def select(grads: list[Any], trainable_variables: Any) -> list[Any]:
        present = _present(optimizer, trainable_variables)
        out = []
        kept = []  # torch: masked in place, all at once
        for g, variable in zip(grads, present, strict=False):
            mask = by_id.get(id(variable))
            if g is not None and mask is not None:
                if on_torch:
                    kept.append((mask, g))
                else:
                    if hasattr(g, "indices") and hasattr(g, "dense_shape"):  # tf.IndexedSlices
                        import tensorflow as tf

                        g = tf.convert_to_tensor(g)
                    g = keras.ops.where(mask.value, g, keras.ops.zeros((), dtype=g.dtype))
            out.append(g)
        if kept:
            _torch_keep(kept)
        if zeroing:
            with_grad = {id(v) for g, v in zip(grads, present, strict=False) if g is not None}
            _zero_pending([(v, m) for v, m in zeroing if id(v) in with_grad], pending, pending_now)
        return out + grads[len(out):]

    def mask_after(grads: list[Any], trainable_variables: Any) -> None:
        present = _present(optimizer, trainable_variables)
        pairs = [(variable, after_by_id[id(variable)]) for g, variable in zip(grads, present, strict=False)
                 if g is not None and id(variable) in after_by_id]
        if keras.backend.backend() == "tensorflow":
            _tf_zero(pairs, None)
            return
        if on_torch:
            _torch_keep([(mask, variable.value) for variable, mask in pairs])
            return
        for variable, mask in pairs:
            variable.assign(keras.ops.where(mask.value, variable.value, keras.ops.zeros((), dtype=variable.dtype)))

    _wrap_apply(optimizer, "mask", select, mask_after if after_by_id else None)


def _zero_pending(pairs: Sequence[tuple[Any, Any]], pending: Any,
                  pending_now: Callable[[], bool] | None = None) -> None:
    """``variable = where(mask, variable, 0)`` for each pair when ``pending`` holds True (a graph
    condition on TensorFlow: a step with no new mask does no work; on torch, eager,
    ``pending_now()`` when given, else the flag read from the device). On JAX ``pending`` is
    None and the masks are all True at a step with nothing due: one ``where`` per variable
    inside the compiled step."""
    if keras.backend.backend() == "jax":  # no flag: the masks are all True when nothing is due
        for variable, mask in pairs:
            variable.assign(keras.ops.where(mask.value, variable.value, keras.ops.zeros((), dtype=variable.dtype)))
        return
    if keras.backend.backend() != "tensorflow":
        if pending_now() if pending_now is not None else host_flag(pending):
            _torch_keep([(mask, variable.value) for variable, mask in pairs])
        return
    _tf_zero(pairs, pending)


def _torch_keep(pairs: Sequence[tuple[Any, Any]]) -> None:
    """``x = where(mask, x, +0.0)`` in place for each ``(mask, x)``, on Keras' torch backend:
    the bits of ``x`` ANDed with all-ones where kept and zeros where pruned (NaN and inf
    become +0.0 too, as ``where`` makes them), one pass in place (a gradient too: Keras'
    torch trainer hands the parameters' own ``.grad``, as PyTorch's pruning masks them). The
    bit pattern of each bool mask variable is made again only when the variable changed (its
    tensor is assigned in place, and torch counts in-place writes); one ``no_grad`` for all."""
    import torch

    with torch.no_grad():  # parameters, written in place (Keras' own assign does the same)
        for mask, x in pairs:
            value = mask._value  # the mask's own tensor (a bool variable no optimizer tracks)
            cached = mask.__dict__.get("_recipe_spec_bits")  # (tensor, version, bits)
            size = x.element_size()
            if (cached is None or cached[0] is not value or cached[1] != value._version
                    or cached[2].element_size() != size):
                int_dtype = getattr(torch, f"int{8 * size}")  # int8 .. int64
                bits = torch.where(value, torch.tensor(-1, dtype=int_dtype, device=value.device),
                                   torch.tensor(0, dtype=int_dtype, device=value.device))
                cached = (value, value._version, bits)
                mask.__dict__["_recipe_spec_bits"] = cached
            bits = cached[2]
            x.view(bits.dtype).bitwise_and_(bits)


def host_flag(flag: Any) -> bool:
    """A bool scalar variable's value read to the host: a sync with the device (a step that
    reads it waits for the device to finish the work queued before it)."""
    return bool(keras.ops.convert_to_numpy(flag.value))


def _tf_zero(pairs: Sequence[tuple[Any, Any]], pending: Any) -> None:
    """TensorFlow: ``variable = where(mask, variable, 0)`` for each pair, on every replica's copy
    under a ``tf.distribute`` strategy (as Keras' own updates run), inside the traced step;
    with ``pending``, only when it holds True (a graph condition)."""
    import tensorflow as tf

    def zero(part: Any, mask: Any, *flag: Any) -> Any:
        def do() -> Any:
            part.assign(tf.where(mask, part, tf.zeros((), part.dtype)))
            return tf.constant(True)

        if not flag:
            return do()
        return tf.cond(tf.convert_to_tensor(flag[0]), do, lambda: tf.constant(False))

    def zero_all(distribution: Any) -> None:
        for variable, mask in pairs:
            args = (mask.value,) if pending is None else (mask.value, pending.value)
            distribution.extended.update(getattr(variable, "value", variable), zero, args=args, group=False)

    if pairs:
        tf.__internal__.distribute.interim.maybe_merge_call(zero_all, tf.distribute.get_strategy())


def unmask_gradients(optimizer: Any) -> None:
    """Stop masking ``optimizer``'s gradients (:func:`mask_gradients`)."""
    _unwrap_apply(optimizer, "mask")


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
    Gradients masked by :func:`mask_gradients` installed after it are handed over masked.
    """
    watched = list(variables)
    backend = keras.backend.backend()

    def hand_over(grads: list[Any], trainable_variables: Any) -> list[Any]:
        present = _present(optimizer, trainable_variables)
        scale = getattr(optimizer, "loss_scale_factor", None)
        by_id = {id(v): g for v, g in zip(present, grads, strict=False)}
        picked = [by_id.get(id(v)) for v in watched]
        if backend == "tensorflow":
            _tf_hand_over(picked, watched, on_gradients, scale)
        else:
            on_gradients([None if g is None else _unscale(numpy_value(g), scale) for g in picked])
        return grads

    _wrap_apply(optimizer, "watch", hand_over)


def unwatch_gradients(optimizer: Any) -> None:
    """Stop handing ``optimizer``'s gradients over (:func:`watch_gradients`); a compiled step
    traced before keeps the hook."""
    _unwrap_apply(optimizer, "watch")


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
