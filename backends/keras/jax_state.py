"""Keras on JAX: the recipe's variables inside the JAX trainer's compiled step.

Keras' JAX trainer runs ``fit`` as a stateless, compiled ``train_step(state, data)``: the
model's and the optimizer's variables travel through it as a tuple of arrays (``state``),
the ``keras.Variable`` objects are emptied (their value is ``None``) while ``fit`` runs, and the
values are written back only at a *sync* (``model.jax_state_sync()``: end of an epoch, end of
``fit``). Two consequences for a recipe, and what this module does about them:

- A variable the step reads but that is not part of ``state`` is a constant of the traced
  step. So the recipe's own step variables (gradient and update masks, the learning rate when
  the recipe took it over, the weight decay) are made optimizer variables on JAX
  (:func:`track`): ``optimizer.stateless_apply`` maps them to the step's state, the wrapped
  ``optimizer.apply`` reads them as traced values, and a new value reaches the next step
  without a retrace. They are left out of the optimizer's saved variables, so checkpoints keep
  Keras' own layout.
- A value written between steps must reach the trainer's state, not the emptied variable.
  :class:`StateAccess` reads a variable where it lives (the trainer's state while ``fit`` holds
  it, the variable otherwise) without a sync, and a write syncs once (``model.jax_state_sync()``,
  which hands every variable its array back on the device; the trainer reads them again before
  the next step). Steps whose events change nothing write nothing and do not sync; masks are
  enforced inside the compiled step (:class:`recipe_spec_keras.pruning.StepMasks`). A change of
  the model's structure (trainable flags, QAT, removed layers) calls :meth:`StateAccess.sync`
  first and the step is traced again.

Importing this module does not import JAX.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["StateAccess", "is_jax", "track", "untrack", "tolerate_frozen", "untolerate_frozen", "check_recipe"]

_STATE_KEYS = ("trainable_variables", "non_trainable_variables", "optimizer_variables")
_RECIPE_ATTR = "_recipe_spec_step_variables"


def is_jax() -> bool:
    """Whether Keras runs on JAX (``KERAS_BACKEND=jax``)."""
    import keras

    return keras.backend.backend() == "jax"


def _inner(optimizer: Any) -> Any:
    return getattr(optimizer, "inner_optimizer", optimizer)


def track(optimizer: Any, variables: Iterable[Any]) -> None:
    """Make ``variables`` optimizer variables of ``optimizer`` (JAX only: they then travel
    through the compiled step as state), left out of ``save_own_variables`` /
    ``load_own_variables`` so a saved optimizer has Keras' own variables only."""
    if optimizer is None or not is_jax():
        return
    inner = _inner(optimizer)
    own: list[Any] = inner.__dict__.setdefault(_RECIPE_ATTR, [])
    for variable in variables:
        if not any(variable is v for v in inner._variables):
            inner._track_variable(variable)
            own.append(variable)
    if "save_own_variables" not in inner.__dict__:
        _exclude_from_saving(inner)


def untrack(optimizer: Any, variables: Iterable[Any] | None = None) -> None:
    """Undo :func:`track` for ``variables`` (all the recipe's when None)."""
    if optimizer is None:
        return
    inner = _inner(optimizer)
    own: list[Any] = inner.__dict__.get(_RECIPE_ATTR, [])
    drop = list(own) if variables is None else [v for v in variables if any(v is o for o in own)]
    for variable in drop:
        inner._variables[:] = [v for v in inner._variables if v is not variable]
        own[:] = [v for v in own if v is not variable]


def _exclude_from_saving(inner: Any) -> None:
    cls = type(inner)

    def keras_variables() -> list[Any]:
        own = inner.__dict__.get(_RECIPE_ATTR, [])
        return [v for v in inner.variables if not any(v is o for o in own)]

    def save_own_variables(store: Any) -> None:
        for i, variable in enumerate(keras_variables()):
            store[str(i)] = variable.numpy()

    def load_own_variables(store: Any) -> None:
        own = inner.__dict__.get(_RECIPE_ATTR, [])
        if not own:
            return cls.load_own_variables(inner, store)
        theirs = keras_variables()
        if len(store.keys()) != len(theirs):
            return cls.load_own_variables(inner, store)  # Keras' warning and skip
        for i, variable in enumerate(theirs):
            variable.assign(store[str(i)])
        return None

    object.__setattr__(inner, "save_own_variables", save_own_variables)
    object.__setattr__(inner, "load_own_variables", load_own_variables)


class StateAccess:
    """Reads and writes ``keras.Variable`` values of ``model`` wherever they live now (see the
    module docstring). On TensorFlow and torch it reads and assigns the variables."""

    def __init__(self) -> None:
        self.model: Any = None
        self._index: dict[int, tuple[str, int]] = {}
        self._index_for: Any = None

    def _state(self) -> dict[str, Any] | None:
        """The trainer's state while ``fit`` holds the variables in it, else None."""
        model = self.model
        if model is None:
            return None
        state = getattr(model, "_jax_state", None)
        if not state or getattr(model, "_jax_state_synced", True):
            return None
        return state

    def _locate(self, variable: Any) -> tuple[str, int] | None:
        model = self.model
        traced = getattr(model, "train_function", None)  # a new structure is traced again
        if self._index_for is not traced or not self._index:
            index: dict[int, tuple[str, int]] = {}
            optimizer = getattr(model, "optimizer", None)
            lists = (model.trainable_variables, model.non_trainable_variables,
                     optimizer.variables if optimizer is not None else [])
            for name, refs in zip(_STATE_KEYS, lists, strict=True):
                for i, ref in enumerate(refs):
                    index.setdefault(id(ref), (name, i))
            self._index, self._index_for = index, traced
        return self._index.get(id(variable))

    def value(self, variable: Any) -> Any:
        """The variable's current value (a backend array)."""
        state = self._state()
        if state is not None and getattr(variable, "_value", True) is None:
            where = self._locate(variable)
            if where is not None and state.get(where[0]) is not None:
                return state[where[0]][where[1]]
        return variable.value

    def read(self, variable: Any) -> np.ndarray:
        """The variable's current value as a NumPy array."""
        from .params import numpy_value

        state = self._state()
        if state is None or getattr(variable, "_value", True) is not None:
            return numpy_value(variable)
        return np.asarray(self.value(variable))

    def write(self, variable: Any, value: Any) -> None:
        """``variable = value``, seen by the next step. While ``fit`` holds the variables the
        first write of a step syncs the trainer's state (``model.jax_state_sync()``: each
        variable gets its array back, on the device, nothing is copied to the host) and the
        trainer reads them again before the next step; further writes of the step assign."""
        if self._state() is not None and getattr(variable, "_value", True) is None:
            self.sync()
        variable.assign(value)

    def sync(self) -> None:
        """Write the trainer's state back to the variables and let it read them again before
        the next step (a structural change follows: trainable flags, new or removed layers)."""
        model = self.model
        if model is not None and self._state() is not None:
            model.jax_state_sync()
        self._index = {}


def tolerate_frozen(optimizer: Any, model: Any) -> None:
    """Keras on JAX: let ``optimizer.stateless_apply`` take the trainable values of ``model``
    after a recipe froze some of its variables.

    The JAX trainer passes the values and gradients of ``model.trainable_variables`` (read when
    the step is traced), and ``stateless_apply`` wants one per variable the optimizer was built
    with. A variable frozen since then gets no gradient (``None``): Keras' ``apply`` leaves it
    and its optimizer slots alone, as PyTorch's optimizer skips a parameter without a gradient
    and Keras' TensorFlow trainer skips a non-trainable variable."""
    if optimizer is None or not is_jax():
        return
    inner = _inner(optimizer)
    cls_apply = type(inner).stateless_apply

    def stateless_apply(optimizer_variables: Any, grads: Any, trainable_variables: Any) -> Any:
        known = list(inner._trainable_variables)
        current = list(model.trainable_variables)
        if len(trainable_variables) == len(known) or len(current) != len(trainable_variables):
            return cls_apply(inner, optimizer_variables, grads, trainable_variables)
        import warnings

        import jax.numpy as jnp

        position = {id(v): i for i, v in enumerate(current)}
        values, full_grads = [], []
        for variable in known:
            i = position.get(id(variable))
            values.append(jnp.zeros(tuple(variable.shape), variable.dtype) if i is None else trainable_variables[i])
            full_grads.append(None if i is None else grads[i])
        with warnings.catch_warnings():  # "Gradients do not exist for variables ...": frozen
            warnings.simplefilter("ignore")
            new_values, new_optimizer = cls_apply(inner, optimizer_variables, full_grads, values)
        slot = {id(v): j for j, v in enumerate(known)}
        return [new_values[slot[id(v)]] for v in current], new_optimizer

    object.__setattr__(inner, "stateless_apply", stateless_apply)


def untolerate_frozen(optimizer: Any) -> None:
    """Undo :func:`tolerate_frozen`."""
    if optimizer is not None:
        _inner(optimizer).__dict__.pop("stateless_apply", None)


def check_recipe(optimizer: Any) -> None:
    """Refuse at ``modify()`` what the recipe needs and Keras on JAX does not run here, naming
    the backend and the feature (second-order and movement pruning, and distillation, refuse
    themselves when they attach: ``NotImplementedError``)."""
    if not is_jax():
        return
    if optimizer is not None and hasattr(optimizer, "inner_optimizer"):
        raise NotImplementedError(
            "a LossScaleOptimizer (mixed precision) on KERAS_BACKEND='jax': recipe-spec follows "
            "its skipped steps by reading the optimizer's iterations between steps, which the JAX "
            "trainer holds in its compiled step's state. Train in float32 on JAX, or set "
            "KERAS_BACKEND=tensorflow for mixed precision."
        )

