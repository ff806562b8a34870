"""Second-order pruning (M-FAC, OBS) on Keras 3: the variables, gradients and grad sampler that
:mod:`recipe_spec.pruning.second_order` works with, over NumPy (:data:`recipe_spec.masks.numpy_ops.NUMPY_OPS`).
The maths lives there, once.

Every array handed to the core is in *canonical* (PyTorch) layout: a Dense kernel ``(in,
out)`` is handed over as ``(out, in)``, a Conv2D kernel ``(kh, kw, in, out)`` as ``(out, in,
kh, kw)`` (:func:`recipe_spec_keras.masks.to_torch_layout`), so the blocks of consecutive
coordinates of the inverse Fisher, the scores and therefore the masks are the PyTorch
backend's. Weights are read to the host once per pruning step, the inverse is computed there
(``available_devices`` names PyTorch devices and is not used), and the results are assigned
back to the variables.

>>> import numpy as np
>>> g = np.random.default_rng(0).normal(size=(8, 10))
>>> f = fisher_inverse(g, damp=1e-2, block_size=4)
>>> f.diag().shape, f.mul(np.ones(10)).shape
((10,), (10,))
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec.modifiers.second_order_args import SecondOrderSettings
from recipe_spec.pruning.second_order.checks import host_memory_available
from recipe_spec.pruning.second_order.fisher import FisherInverse
from recipe_spec.pruning.second_order.pruner import SecondOrderError
from recipe_spec.pruning.second_order.sampler import batches, sampler_parts

from .masks import from_torch_layout, to_torch_layout
from .params import numpy_value

if TYPE_CHECKING:
    from recipe_spec.runtime import RecipeRuntime

__all__ = ["fisher_inverse", "GradSampler", "KerasHost", "SecondOrderSteps", "check_keras_backend"]


def fisher_inverse(grads: Any, damp: float, block_size: int | None = None) -> FisherInverse:
    """The inverse empirical Fisher ``(damp·I + (1/m) Σ g gᵀ)⁻¹`` of the ``m x d`` gradients
    ``grads`` (a NumPy array, or anything ``np.asarray`` reads), block diagonal with blocks
    of ``block_size`` consecutive coordinates (``None``: one block). ``.diag()`` and
    ``.mul(v)`` give its diagonal and ``F⁻¹v`` as NumPy arrays (see
    :class:`recipe_spec.pruning.second_order.fisher.FisherInverse`). ``grads`` is not modified."""
    return FisherInverse(NUMPY_OPS, np.array(grads, copy=True), damp, block_size)


def check_keras_backend(what: str) -> None:
    """Refuse second-order pruning where Keras cannot hand gradients over: the JAX backend."""
    import keras

    name = keras.backend.backend()
    if name not in ("tensorflow", "torch"):
        raise NotImplementedError(
            f"{what} needs gradients, which recipe-spec takes on Keras' TensorFlow and torch "
            f"backends only, not on KERAS_BACKEND={name!r}: Keras' {name} trainer updates the "
            "weights in a stateless compiled step the gradients cannot leave for the host-side "
            "pruning. Set KERAS_BACKEND=tensorflow (or torch) before importing keras."
        )


class GradSampler:
    """SparseML's ``{"data_loader_builder": f, "loss_function": loss}`` on Keras: ``f(kwargs)``
    returns an iterable of ``(args, kwargs, target)`` (or a callable returning one, called
    again for each pass); one gradient per item, of ``loss(model(*args, training=False,
    **kwargs), target)``. Note the order: model output first, as in SparseML (the reverse of
    Keras' ``loss(y_true, y_pred)``; symmetric losses such as MSE do not care).

    Gradients are taken with the Keras backend's own autodiff: ``tf.GradientTape`` on
    TensorFlow, ``torch.autograd.grad`` on torch (JAX is refused, see
    :func:`check_keras_backend`). Frozen variables get their gradient too; a variable the
    loss does not reach gets zeros."""

    def __init__(self, spec: Mapping[str, Any]):
        self.builder, self.loss = sampler_parts(spec)

    def gradients(self, model: Any, variables: Sequence[Any], kwargs: Any) -> Iterator[list[np.ndarray]]:
        """One list of NumPy gradients (the variables' own layout) per item of the loader."""
        import keras

        take = _tf_gradients if keras.backend.backend() == "tensorflow" else _torch_gradients
        for args, kw, target in batches(self.builder, kwargs):
            def loss(args: Any = args, kw: Any = kw, target: Any = target) -> Any:
                out = model(*args, training=False, **(kw or {}))
                if isinstance(out, (tuple, list)):
                    out = out[0]
                return self.loss(out, target)

            yield take(loss, variables)


def _tf_gradients(loss: Callable[[], Any], variables: Sequence[Any]) -> list[np.ndarray]:
    import tensorflow as tf

    targets = [getattr(v, "_value", v) for v in variables]
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        for t in targets:
            tape.watch(t)
        value = loss()
    grads = tape.gradient(value, targets)
    return [np.zeros(tuple(v.shape), v.dtype) if g is None else np.asarray(tf.convert_to_tensor(g).numpy())
            for v, g in zip(variables, grads, strict=True)]


def _torch_gradients(loss: Callable[[], Any], variables: Sequence[Any]) -> list[np.ndarray]:
    import torch

    params = [v.value for v in variables]
    with torch.enable_grad():
        value = loss()
        wanted = [p for p in params if p.requires_grad]
        got = dict(zip(map(id, wanted), torch.autograd.grad(value, wanted, allow_unused=True), strict=True)) if wanted else {}
    out = []
    for p in params:
        g = got.get(id(p))
        out.append(np.zeros(tuple(p.shape), str(p.dtype).replace("torch.", "")) if g is None else g.detach().cpu().numpy())
    return out


class KerasHost:
    """:class:`recipe_spec.pruning.second_order.pruner.Host` on a :class:`~recipe_spec_keras.manager.KerasManager`: NumPy
    arrays in canonical layout, float64 where the variables are."""

    ops = NUMPY_OPS

    def __init__(self, manager: RecipeRuntime, grad_sampler: Any):
        self.manager = manager
        self.sampler = GradSampler(grad_sampler) if grad_sampler is not None else None
        #: the current step's gradients (canonical layout), set while the step hands them over
        self.step_grads: dict[str, np.ndarray | None] | None = None
        #: how many times the grad sampler ran (a training step that sampled drops its update)
        self.samplings = 0
        #: called with (variable, Keras-layout value) after each write
        self.on_write: Callable[[Any, np.ndarray], None] | None = None

    def _entry(self, name: str) -> tuple[Any, str]:
        return self.manager._vars[name]

    def read(self, names: Sequence[str]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        weights, masks = [], []
        for n in names:
            variable, layer_type = self._entry(n)
            weights.append(np.ascontiguousarray(to_torch_layout(numpy_value(variable), layer_type)))
            entry = self.manager.masks.params.get(n)
            mask = entry.mask if entry is not None else np.ones(tuple(variable.shape), dtype=bool)
            masks.append(np.ascontiguousarray(to_torch_layout(mask, layer_type)))
        return weights, masks

    def write(self, names: Sequence[str], weights: Sequence[np.ndarray], masks: Sequence[np.ndarray], owner: int) -> None:
        for n, w, m in zip(names, weights, masks, strict=True):
            variable, layer_type = self._entry(n)
            shape = tuple(int(d) for d in variable.shape)
            mask = np.ascontiguousarray(from_torch_layout(np.asarray(m, dtype=bool), layer_type, shape))
            value = np.where(mask, from_torch_layout(np.asarray(w), layer_type, shape), 0).astype(str(variable.dtype))
            self.manager._hold(n, owner, False, mask=mask)
            variable.assign(value)
            if self.on_write is not None:
                self.on_write(variable, value)

    def has(self, name: str) -> bool:
        return name in self.manager._vars

    def gradients(self, names: Sequence[str]) -> list[np.ndarray] | None:
        grads = [None if self.step_grads is None else self.step_grads.get(n) for n in names]
        if any(g is None for g in grads):
            return None
        return [np.ascontiguousarray(to_torch_layout(g, self._entry(n)[1])) for n, g in zip(names, grads, strict=True)]

    def take_step_gradients(self, names: Sequence[str], grads: Sequence[np.ndarray | None]) -> None:
        """The gradients of ``names`` (Keras layout; None: none this step) for :meth:`gradients`,
        which puts them in canonical layout only when a pruner takes them."""
        self.step_grads = dict(zip(names, grads, strict=True))

    def sample(self, names: Sequence[str], count: int, kwargs: Any) -> Iterator[list[np.ndarray]]:
        assert self.sampler is not None
        self.samplings += 1
        entries = [self._entry(n) for n in names]
        for grads in self.sampler.gradients(self.manager.model, [v for v, _ in entries], kwargs):
            yield [np.ascontiguousarray(to_torch_layout(g, t)) for g, (_, t) in zip(grads, entries, strict=True)]

    def devices(self, settings: SecondOrderSettings) -> list[Any] | None:
        return None  # NumPy, on the host

    def buffer_like(self, settings: SecondOrderSettings, weights: Sequence[np.ndarray]) -> np.ndarray:
        dtype = weights[0].dtype if weights and weights[0].dtype in (np.float32, np.float64) else np.float32
        return np.zeros((), dtype=dtype)

    def itemsize(self, names: Sequence[str]) -> int:
        return 8 if names and str(self._entry(names[0])[0].dtype) == "float64" else 4

    def free_memory(self, settings: SecondOrderSettings) -> tuple[int, str] | None:
        free = host_memory_available()
        return None if free is None else (free, "the host's memory")

    def world_size(self) -> int:
        return 1  # one process; a tf.distribute strategy's replicas share this Python process

    def gather_rows(self, rows: np.ndarray) -> np.ndarray:
        return rows


class SecondOrderSteps:
    """What second-order pruning adds to a Keras training step (:meth:`~recipe_spec_keras.manager.KerasManager.step_begin`
    / ``step_end``, i.e. ``model.fit``'s recipe callback).

    Gradient timing, as in PyTorch and SparseML: the gradient of step k is taken before the
    optimizer applies it, and a pruning step k prunes (and OBS-corrects the weights) after
    step k's gradient exists and before step k's update. The recipe callback runs before the
    forward pass, when no gradient exists yet; so for a training-time M-FAC modifier (one
    that buffers the training steps' gradients) ``optimizer.apply`` is wrapped
    (:func:`recipe_spec_keras.optim.watch_gradients`): inside the compiled train step it hands
    the gradients of the pruned variables to :meth:`on_gradients`, which buffers them and runs
    the step's M-FAC pruning, and the update then reads the pruned weights. The step's other
    events (LR, magnitude pruning, OBS and sampled M-FAC, which do not need the step's own
    gradient) still apply in :meth:`begin`, before the forward pass.

    A training step at which a grad sampler ran applies no optimizer update, as in SparseML
    and on PyTorch (SparseML's sampler ends with ``zero_grad()``, so the optimizer skips every
    parameter at that step): the trainable variables (as pruned) and the optimizer's
    variables are kept at :meth:`after_begin` and put back at :meth:`end`.

    An error raised where the gradients are handed over (inside the compiled step) is raised
    again by :meth:`end`, with its own type and message.
    """

    def __init__(self, manager: RecipeRuntime, optimizer: Any):
        self.manager, self.optimizer = manager, optimizer
        assert manager.pruners is not None
        gradient: dict[int, Any] = manager.pruners.gradient
        self.host: KerasHost = next(iter(gradient.values())).host
        self.in_step = {i for i, p in gradient.items() if not p.sampled}
        self.names = list(dict.fromkeys(n for i in sorted(self.in_step) for n in gradient[i].names))
        self.due: list[Any] = []  # this step's in-step events
        self.handed: int | None = None  # the last step whose gradients were handed over
        self.error: BaseException | None = None
        self.kept: dict[int, tuple[Any, np.ndarray]] | None = None
        self._drawn = 0
        self.host.on_write = self._written
        if self.in_step:
            from .optim import watch_gradients

            if optimizer is None:
                raise ValueError("M-FAC pruning during training takes each step's gradients from the optimizer: pass it to modify()")
            watch_gradients(optimizer, [manager._vars[n][0] for n in self.names], self.on_gradients)
            model = manager.model
            if getattr(model, "train_function", None) is not None:
                model.train_function = None  # traced before the wrapper: trace it again

    # -- the step -------------------------------------------------------------------------------
    def _owned(self, event: Any) -> bool:
        return event.target == "sparsity" and event.modifier in self.in_step

    def begin(self) -> None:
        """The step's events, except the pruning that waits for the step's gradients."""
        m = self.manager
        assert m.plan is not None
        events = list(m.plan.events_at(m.step_count))
        self.due = [e for e in events if self._owned(e)]
        self._drawn = self.host.samplings
        m.apply_step_events([e for e in events if not self._owned(e)], collect=not self.in_step)

    def after_begin(self) -> None:
        """Keep the variables when a grad sampler ran at this step (its update is dropped)."""
        if self.host.samplings != self._drawn and self.manager.optimizer is not None:
            optimizer, model = self.manager.optimizer, self.manager.model
            if not optimizer.built:
                optimizer.build(model.trainable_variables)
            variables = [*model.trainable_variables, *optimizer.variables]
            self.kept = {id(v): (v, numpy_value(v)) for v in variables}

    def on_gradients(self, grads: list[np.ndarray | None]) -> None:
        """The step's gradients of the watched variables (Keras layout): buffer them and run
        the step's training-time M-FAC pruning. Errors are kept for :meth:`end`."""
        m = self.manager
        if not self.in_step or m.pruners is None or self.error is not None:
            return
        try:
            if self.handed == m.step_count:
                raise RuntimeError(
                    f"the optimizer applied gradients twice in recipe step {m.step_count}: with "
                    "model.fit use steps_per_execution=1; in a custom loop call "
                    "runtime.step_begin() and runtime.step_end() around every optimizer step"
                )
            self.handed = m.step_count
            self.host.take_step_gradients(self.names, grads)
            m.apply_step_events(self.due, collect=True)
            self.due = []
        except Exception as exc:  # noqa: BLE001 - raised again by end()
            self.error = exc
        finally:
            self.host.step_grads = None

    def end(self) -> None:
        """After the optimizer step: raise a kept error, check that the step's M-FAC pruning
        ran, and put back the variables of a step whose update is dropped."""
        error, self.error = self.error, None
        due, self.due = self.due, []
        kept, self.kept = self.kept, None
        if error is not None:
            raise error
        if due:
            m = due[0]
            raise SecondOrderError(
                f"{self.manager.recipe.path or '<recipe>'}:{m.line}: {m.type} prunes at step "
                f"{m.step}, after the step's gradients exist, but the optimizer's apply() did not "
                "hand them over: compile the model with the optimizer modify() returned (or call "
                "it in your custom training step), and do not replace its apply()"
            )
        if kept:
            for variable, value in kept.values():
                variable.assign(value)

    def _written(self, variable: Any, value: np.ndarray) -> None:
        if self.kept is not None and id(variable) in self.kept:
            self.kept[id(variable)] = (variable, value)

    # -- fit --------------------------------------------------------------------------------------
    def prepare_fit(self, model: Any) -> None:
        """At ``fit``'s start: the model must train with the watched optimizer, without XLA."""
        if not self.in_step:
            return
        import keras

        compiled = getattr(model, "optimizer", None)
        if compiled is not self.optimizer and getattr(compiled, "inner_optimizer", None) is not self.optimizer:
            raise ValueError(
                "the model was compiled with another optimizer than the one given to modify(): "
                "M-FAC takes each step's gradients from that optimizer's apply(); compile with "
                "the optimizer modify() returned"
            )
        if keras.backend.backend() == "tensorflow" and getattr(model, "jit_compile", False) is True:
            warnings.warn(
                "M-FAC pruning during training hands each step's gradients to Python "
                "(tf.py_function), which XLA cannot compile: this fit runs with "
                "jit_compile=False (compile the model with jit_compile=False to silence this)",
                UserWarning, stacklevel=2,
            )
            model.jit_compile = False
            model.make_train_function(force=True)

    def stop(self) -> None:
        """Stop watching the optimizer's gradients (after :meth:`~recipe_spec_keras.manager.KerasManager.finalize`)."""
        from .optim import unwatch_gradients

        unwatch_gradients(self.optimizer)
        self.in_step = set()
        self.host.on_write = None
