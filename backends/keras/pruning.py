"""Masks on Keras variables: bool arrays, enforced after every optimizer step (and before a
step when they changed) while a pruning modifier holds them.

With an optimizer (``fit`` or a loop calling ``apply_gradients``), the masks are enforced
inside the compiled train step (:class:`StepMasks`): the optimizer's ``apply`` is wrapped so
that it masks the gradients, zeroes what this step's events pruned before the update, and
applies the held masks after it, reading bool ``keras.Variable`` masks that are assigned only
when a mask changes. A step with no event does no work per weight outside the compiled step and
copies nothing to the host; the masks work in eager, ``tf.function``, ``jit_compile`` and JAX
training alike and on every replica of a ``tf.distribute`` strategy.

Without an optimizer (one-shot ``apply()``), masks are applied by assignment between steps.
``MaskedVariable.mask`` (NumPy) is the mask; every change to it goes through :class:`MaskSet`
(``hold``, ``update``), which keeps a copy of it on the device: applying is
``variable.assign(where(mask, variable, 0))`` with ``keras.ops`` on the device, without copying
the weights to the host, and all-True masks are skipped. On TensorFlow the masks of all the
variables are applied by one ``tf.function`` call. Before a step (``apply(changed_only=True)``)
nothing is done unless a mask was held, changed or invalidated since the last apply. Code that
changes a mask array in place by itself, or writes masked weights between steps, calls
:meth:`MaskSet.invalidate` afterwards (or :meth:`MaskSet.apply` itself).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recipe_spec import masks as core
from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec.pruning.magnitude import NonFiniteWeightsError, update_masks

from .jax_state import StateAccess, is_jax, track, untrack
from .masks import MaskShapeError, kernel_layout

__all__ = ["MaskedVariable", "MaskSet", "NonFiniteWeightsError", "StepMasks"]


@dataclass(eq=False)
class MaskedVariable:
    name: str
    variable: Any
    layer_type: str
    mask: np.ndarray
    owner: int
    applied_sparsity: float | None = None
    # the copy of ``mask`` on the device: the array it was last copied from (None: copy again),
    # whether that array is all True, a bool ``keras.Variable`` holding it (made once, then
    # assigned), and a zero of the variable's dtype
    _synced: np.ndarray | None = field(default=None, init=False, repr=False)
    _dense: bool = field(default=True, init=False, repr=False)
    _on_device: Any = field(default=None, init=False, repr=False)
    _zero: Any = field(default=None, init=False, repr=False)

    def invalidate(self) -> None:
        """``mask`` was changed in place: copy it to the device again before the next apply."""
        self._synced = None

    def sync(self) -> bool:
        """Copy ``mask`` to the device if it was invalidated or replaced since the last copy;
        returns whether it is all True (then nothing is copied, nor ever applied)."""
        if self._synced is not self.mask:
            self._dense = bool(self.mask.all())
            if not self._dense:
                import keras

                copy = np.array(self.mask, dtype=bool)  # a private copy, never changed in place
                if self._on_device is None:
                    self._on_device = keras.Variable(copy, dtype="bool", trainable=False, name="mask")
                    self._zero = keras.ops.zeros((), dtype=self.variable.dtype)
                else:
                    self._on_device.assign(copy)
            self._synced = self.mask
        return self._dense


def _assign_masked(entry: MaskedVariable, access: StateAccess | None = None) -> None:
    """``variable = where(mask, variable, 0)`` on the device: masked entries become exactly 0.0,
    the others keep their bits. ``access``: where the value lives on JAX during ``fit``."""
    import keras

    # where, not multiply: a masked -0.0, inf or NaN becomes +0.0, like np.where
    if access is None:
        entry.variable.assign(keras.ops.where(entry._on_device.value, entry.variable.value, entry._zero))
    else:
        masked = keras.ops.where(entry._on_device.value, access.value(entry.variable), entry._zero)
        access.write(entry.variable, masked)


def _batched(entries: tuple[MaskedVariable, ...]) -> Any:
    """On TensorFlow, one ``tf.function`` that applies the masks of ``entries``: one call instead
    of two eager ops per variable. It reads the masks from their device variables, so a new mask
    needs no new trace. None on other backends."""
    import keras

    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    def apply_all() -> None:
        for entry in entries:
            _assign_masked(entry)

    return tf.function(apply_all, autograph=False)


class MaskSet:
    """Every mask of a model, keyed by variable name (the Keras path)."""

    def __init__(self) -> None:
        self.params: dict[str, MaskedVariable] = {}
        self._changed = True  # a mask was held or changed since the last apply()
        self._batch: tuple[tuple[MaskedVariable, ...], Any] | None = None  # (entries, _batched(entries))
        #: bumped by every change of which masks are held or of a mask's values (the gradient
        #: masks follow it: :class:`StepMasks`)
        self.generation = 0
        #: :meth:`update` leaves the weights for the optimizer's update to zero (:class:`StepMasks`)
        self.defer_zeroing = False
        #: masks released since :meth:`StepMasks.end` whose zeroing may still be due
        self.released: dict[str, np.ndarray] = {}
        #: reads and writes the variables where they live (Keras on JAX: the trainer's state)
        self.access = StateAccess()
        #: masks the compiled step itself enforces after the update (:class:`StepMasks`), as
        #: they were at :attr:`generation` ``in_step_generation``
        self.in_step: frozenset[str] = frozenset()
        self.in_step_generation = -1

    def hold(self, name: str, variable: Any, layer_type: str, owner: int, mask: np.ndarray | None = None) -> MaskedVariable:
        entry = self.params.get(name)
        if entry is None:
            initial = np.ones(tuple(variable.shape), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
            entry = MaskedVariable(name, variable, layer_type, initial.copy(), owner)
            self.params[name] = entry
            self._changed = True
            self.generation += 1
        else:
            entry.owner = owner
            if mask is not None:
                entry.mask[...] = mask
                entry.invalidate()
                self._changed = True
                self.generation += 1
        return entry

    def release(self, names: Any) -> None:
        for name in list(names):
            entry = self.params.pop(name, None)
            if entry is not None:
                self.released[name] = entry.mask
        self._batch = None
        self.generation += 1

    def release_all(self) -> None:
        self.params.clear()
        self._batch = None
        self.generation += 1

    def invalidate(self) -> None:
        """Masks were changed in place, or weights written, by code outside this class: copy
        the masks to the device again, and apply them at the next :meth:`apply` even with
        ``changed_only``."""
        for entry in self.params.values():
            entry.invalidate()
        self._changed = True
        self.generation += 1

    def apply(self, changed_only: bool = False) -> None:
        """``variable = where(mask, variable, 0)`` for every held mask (masked entries exactly 0.0).

        ``changed_only``: do nothing unless a mask was held, changed or invalidated since the
        last apply (used before a step: the apply after the previous step, or the update that
        computed the masks, left every variable masked)."""
        if changed_only and not self._changed:
            return
        entries = tuple(e for e in self.params.values() if not e.sync())
        if is_jax():
            self._batch = (entries, None)  # one where per variable: they may live in fit's state
            for entry in entries:
                _assign_masked(entry, self.access)
        elif entries:
            if self._batch is None or self._batch[0] != entries:
                self._batch = (entries, _batched(entries))
            batched = self._batch[1]
            if batched is None:
                for entry in entries:
                    _assign_masked(entry)
            else:
                batched()
        self._changed = False

    def after_step(self) -> None:
        """After an optimizer step: apply every mask the compiled step did not apply itself."""
        if not self.in_step or self.generation != self.in_step_generation:
            # no compiled step enforces them, or a mask changed during the step (second-order
            # pruning prunes once the step's gradients are in): apply them here
            self.apply()
            return
        entries = [e for n, e in self.params.items() if n not in self.in_step and not e.sync()]
        for entry in entries:
            _assign_masked(entry, self.access if is_jax() else None)

    def update(self, entries: list[MaskedVariable], sparsity: float, mask_type: Any, global_sparsity: bool, step: int) -> None:
        """Recompute the masks of ``entries`` for ``sparsity`` from the weights' magnitudes (the
        core's policy, :func:`recipe_spec.pruning.magnitude.update_masks`, on the kernels as
        Keras lays them out); the weights are zeroed now, or by the step (``defer_zeroing``)."""
        values = [self.access.read(e.variable) for e in entries]
        layouts = [kernel_layout(v.shape, e.layer_type) for v, e in zip(values, entries, strict=True)]
        try:
            masks = update_masks(NUMPY_OPS, values, sparsity, mask_type, global_sparsity,
                                 [e.name for e in entries], step, layouts)
        except core.MaskShapeError as err:
            native = next((lay.shape for lay in layouts if lay.canonical_shape == tuple(err.shape)), None)
            raise MaskShapeError(str(err), shape=err.shape, mask_type=err.mask_type, keras_shape=native) from None
        for entry, value, mask in zip(entries, values, masks, strict=True):
            entry.mask[...] = mask
            entry.invalidate()
            entry.applied_sparsity = sparsity
            if not self.defer_zeroing:
                self.access.write(entry.variable, np.where(mask, value, np.zeros((), value.dtype)))
        self.generation += 1


class PackedMasks:
    """The step masks of every weight in one flat uint8 variable, a bit per kind (JAX: the
    trainer carries each state array through every step, at a cost per array; three bool
    masks per weight would add three). :meth:`view` reads one weight's bit as a bool mask;
    :meth:`set` changes the host copy and :meth:`flush` writes it in one assign."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], bits: int):
        import keras

        self.layout: dict[str, tuple[int, tuple[int, ...]]] = {}
        offset = 0
        for name, shape in shapes.items():
            self.layout[name] = (offset, shape)
            offset += int(np.prod(shape))
        self.host = np.full(offset, (1 << bits) - 1, dtype=np.uint8)  # every mask all True
        self.variable = keras.Variable(self.host.copy(), dtype="uint8", trainable=False, name="step_masks")
        self.dirty = False

    def view(self, name: str, bit: int) -> PackedMask:
        offset, shape = self.layout[name]
        return PackedMask(self, offset, shape, 1 << bit)

    def set(self, view: PackedMask, mask: np.ndarray) -> None:
        part = self.host[view.offset:view.offset + view.size]
        flags = np.asarray(mask, dtype=bool).reshape(-1)
        part[...] = np.where(flags, part | view.bit, part & ~np.uint8(view.bit))
        self.dirty = True

    def flush(self, write: Any) -> None:
        if self.dirty:
            write(self.variable, self.host.copy())
            self.dirty = False


@dataclass
class PackedMask:
    """One weight's mask of one kind inside :class:`PackedMasks` (``value``: a bool array of
    the weight's shape, read from the packed variable's current value, traced or not)."""

    packed: PackedMasks
    offset: int
    shape: tuple[int, ...]
    bit: int

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def value(self) -> Any:
        import keras

        part = self.packed.variable.value[self.offset:self.offset + self.size]
        return keras.ops.not_equal(keras.ops.bitwise_and(keras.ops.reshape(part, self.shape), self.bit), 0)


class StepMasks:
    """The masks the optimizer's update reads inside the compiled step, in SparseML's order on
    PyTorch (:func:`recipe_spec_keras.optim.mask_gradients`), for every variable the recipe
    may mask (one bool ``keras.Variable`` of its shape each, assigned between steps: no
    retracing):

    - the *gradient masks* hold the masks in force when the step's gradient was computed (they
      follow the held masks at :meth:`end`): a weight pruned at step k still gets step k's
      gradient into its momentum, and one released at step k first gets one at step k + 1;
    - the *update masks* hold the masks computed at this step (:meth:`begin`, after the step's
      events; a mask released at this step included): with ``MaskSet.defer_zeroing`` the
      pruning events leave the weights as they are, so the step's forward pass sees the
      previous step's weights, and the update zeroes them after the gradient, before the
      update. A step whose events changed no mask does not zero anything: the bool scalar
      ``pending`` says whether one did (on JAX, where the trainer pays per state array per
      step, there is no flag: the update masks are all True but at a step whose events changed
      a mask, and :meth:`end` sets them all True again).

    - the *after masks* hold the masks in force after this step's events, applied after the
      update: a pruned weight that its optimizer state (momentum) would move stays 0.

    On Keras' JAX backend the trainer holds the weights as the compiled step's state, and
    every mask variable is an optimizer variable (:func:`recipe_spec_keras.jax_state.track`):
    ``stateless_apply`` maps it to the step's state and calls the wrapped ``apply``.

    Without an optimizer nothing is installed and the events zero the weights themselves.
    """

    def __init__(self, masks: MaskSet):
        self.masks = masks
        self.optimizer: Any = None
        self.gradient: dict[str, Any] = {}
        self.update: dict[str, Any] = {}
        self.pending: Any = None
        self.after: dict[str, Any] = {}
        self.packed: PackedMasks | None = None  # JAX: the step masks in one variable
        self._generation = -1
        self._pending = False  # whether ``pending`` was set True since the last end()

    def install(self, optimizer: Any, variables: dict[str, Any]) -> bool:
        """Mask ``optimizer``'s updates of ``variables`` (name: variable); returns whether the
        graph that ran before must be traced again."""
        import keras

        from .optim import mask_gradients

        self.uninstall()
        self.packed = PackedMasks({n: tuple(v.shape) for n, v in variables.items()}, 3) if is_jax() else None
        self.pending = (None if self.packed is not None else
                        keras.Variable(False, dtype="bool", trainable=False, name="update_mask_pending"))
        self._generation = -1
        self._pending = False
        kinds: list[dict[str, Any]] = [{}, {}, {}]  # gradient, update, after
        for n, v in variables.items():
            for bit, kind in enumerate(kinds):
                kind[n] = (self.packed.view(n, bit) if self.packed is not None else
                           keras.Variable(np.ones(tuple(v.shape), dtype=bool), dtype="bool", trainable=False,
                                          name=("gradient_mask", "update_mask", "after_mask")[bit]))
        self.gradient, self.update = kinds[0], kinds[1]
        if optimizer is None or not variables:
            return False
        self.after = kinds[2]
        self.masks.in_step = frozenset(self.after)
        if self.packed is not None:
            track(optimizer, [self.packed.variable])
        mask_gradients(optimizer, [(variables[n], v) for n, v in self.gradient.items()],
                       [(variables[n], v) for n, v in self.update.items()], self.pending,
                       [(variables[n], v) for n, v in self.after.items()], lambda: self._pending)
        self.optimizer = optimizer
        self.masks.defer_zeroing = True
        return True

    def uninstall(self) -> None:
        """Stop masking the optimizer's updates; events zero the weights themselves again. A
        step traced with the wrapper keeps it, with all-True masks and nothing pending."""
        from .optim import unmask_gradients

        unmask_gradients(self.optimizer)
        untrack(self.optimizer, [*([self.packed.variable] if self.packed is not None else []),
                                 *([self.pending] if self.pending is not None else [])])
        self.optimizer = None
        self.after = {}
        self.masks.defer_zeroing = False
        self.masks.in_step = frozenset()
        self.sync(force=True)
        if self.pending is not None:
            self.pending.assign(False)
        self._pending = False

    def begin(self) -> None:
        """After the step's events: the masks computed at this step zero their weights before
        the update (or now, where no update runs masked)."""
        if not self.masks.defer_zeroing:
            self.masks.apply(changed_only=True)
            return
        self.masks.in_step_generation = self.masks.generation  # the after masks, once written below
        if self.masks.generation == self._generation and not self.masks.released:
            return
        write = self._write
        for name, variable in self.update.items():
            entry = self.masks.params.get(name)
            mask = entry.mask if entry is not None else self.masks.released.get(name)
            write(variable, mask if mask is not None else np.ones(tuple(variable.shape), dtype=bool))
        for name, variable in self.after.items():
            write(variable, self._held(name, variable))
        self._flush()
        if self.pending is not None:
            self.masks.access.write(self.pending, True)
        self._pending = True

    def end(self) -> None:
        """After the optimizer step: nothing pending, and the gradient masks follow the masks
        now in force."""
        if self.masks.defer_zeroing and self._pending:
            if self.pending is not None:
                self.masks.access.write(self.pending, False)
            else:  # JAX: the update masks all True again (one write with the sync's)
                for variable in self.update.values():
                    self._write(variable, np.ones(variable.shape, dtype=bool))
            self._pending = False
        self.masks.released.clear()
        self.sync()
        self._flush()

    def sync(self, force: bool = False) -> None:
        """Assign the held masks (all True where none is held) to the gradient masks, when a
        mask changed since the last call: an assign per changed step."""
        if not self.gradient or (not force and self.masks.generation == self._generation):
            return
        for name, variable in [*self.gradient.items(), *self.after.items()]:
            self._write(variable, self._held(name, variable))
        self._flush()
        self._generation = self.masks.generation

    def _write(self, target: Any, mask: np.ndarray) -> None:
        if isinstance(target, PackedMask):
            target.packed.set(target, mask)
        else:
            self.masks.access.write(target, mask)

    def _flush(self) -> None:
        if self.packed is not None:
            self.packed.flush(self.masks.access.write)

    def _held(self, name: str, variable: Any) -> np.ndarray:
        """The mask held for ``name`` now, all True when none is (the shape of ``variable``)."""
        entry = self.masks.params.get(name)
        return entry.mask if entry is not None else np.ones(tuple(variable.shape), dtype=bool)
