"""DistillationModifier on Keras 3: the teacher (a given model, or a frozen copy of the student
taken at the modifier's start step), the KL term in ``keras.ops``, and the hook that mixes it
into the loss ``model.fit`` computes; when a modifier is active and how the losses mix are the
core's (:mod:`recipe_spec.runtime.distillation`), as on PyTorch (:mod:`recipe_spec_torch.distillation`).

The KL term is SparseML's ``kl_logsoftmax``: KL(softmax(teacher / T) || softmax(student / T))
summed over the class axis and over every other position, times T², divided by the number of
positions (``student.size / classes``); then averaged over the distilled outputs.

A compiled train step is traced once and reused, so whether a modifier acts at step k is not
a Python ``if``: each modifier has a float32 variable holding its hardness while it is active
and 0.0 otherwise (assigned before each step, :meth:`KerasDistillation.begin`), and the traced
step computes ``cond(h > 0, (1 - h) * loss + h * distill, loss)``: outside the window the
teacher does not run and the loss is the plain loss, bit for bit. A self-distillation teacher
is a clone of the student made at ``modify()`` whose weights are assigned from the student at
the start step, so the traced step already holds it; at the end step it is dropped and
``fit``'s train function traced again (once).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import keras
from keras import ops
from recipe_spec.runtime.distillation import (
    DistillationTerm,
    check_loss_update_args,
    mean_loss,
    mix,
    output_pairs,
    saved_teacher_error,
    teacher_inputs_of,
    teacher_mode,
    terms_of,
    warn_disabled,
)

if TYPE_CHECKING:
    from recipe_spec.runtime import RecipeRuntime
    from recipe_spec.schedule.events import Event

__all__ = ["kl_logsoftmax", "kldiv_loss", "frozen_copy", "KerasDistillation"]

_LOW_PRECISION = ("float16", "bfloat16")


def kl_logsoftmax(x: Any, y: Any, temperature: float, axis: int = -1) -> Any:
    """SparseML's distillation term of student logits ``x`` and teacher logits ``y``
    (float16/bfloat16 logits are computed in float32)."""
    xs, ys = tuple(x.shape), tuple(y.shape)
    if len(xs) != len(ys) or any(a is not None and b is not None and a != b for a, b in zip(xs, ys, strict=True)):
        raise ValueError(
            "The teacher/student outputs must be of the same shape for distillation but got "
            f"Tensors of size {xs} and {ys}"
        )
    x, y = (ops.cast(v, "float32") if keras.backend.standardize_dtype(v.dtype) in _LOW_PRECISION else v
            for v in (x, y))
    log_student = ops.log_softmax(x / temperature, axis=axis)
    log_teacher = ops.log_softmax(y / temperature, axis=axis)
    kl = ops.sum(ops.exp(log_teacher) * (log_teacher - log_student))  # kl_div(log_target=True, "sum")
    classes = ys[axis] if ys[axis] is not None else ops.shape(y)[axis]
    number_items = ops.cast(ops.size(x), kl.dtype) / ops.cast(classes, kl.dtype)
    return kl * (temperature ** 2) / number_items


def kldiv_loss(student: Any, teacher: Any, temperature: float, keys: Sequence[Any] | None = None,
               axis: int = -1) -> Any:
    """SparseML's ``kldiv_loss``: the mean of :func:`kl_logsoftmax` over the distilled outputs."""
    pairs = output_pairs(student, teacher, keys, ops.is_tensor)
    return mean_loss([kl_logsoftmax(s, t, temperature, axis) for s, t in pairs])


def frozen_copy(model: Any) -> Any:
    """A non-trainable clone of ``model`` (``keras.models.clone_model``) holding its weights."""
    try:
        teacher = keras.models.clone_model(model)
    except Exception as exc:  # a subclassed model without a usable get_config()
        raise ValueError(
            "distillation_teacher='self' copies the student with keras.models.clone_model, which "
            f"cannot copy this {type(model).__name__} ({type(exc).__name__}); build the model with "
            "the functional or Sequential API, or pass a teacher model instead"
        ) from None
    if not teacher.built:
        raise ValueError(
            f"distillation_teacher='self': the clone of this {type(model).__name__} is not built; "
            "pass a teacher model instead"
        )
    teacher.trainable = False
    assign_weights(teacher, model)
    return teacher


def assign_weights(teacher: Any, model: Any) -> None:
    """Copy ``model``'s weights into its clone ``teacher``, variable by variable (matched by
    path, so variables the student gained since, e.g. QAT observers, are left out)."""
    source = {v.path: v for v in model.weights}
    paths = [v.path for v in teacher.weights]
    if len(set(paths)) == len(paths) and all(p in source for p in paths):
        pairs = [(v, source[v.path]) for v in teacher.weights]
    elif len(teacher.weights) == len(model.weights):
        pairs = list(zip(teacher.weights, model.weights, strict=True))
    else:
        raise ValueError(
            "the self-distillation teacher no longer matches the student's variables (the model's "
            "structure changed since modify()); pass a teacher model instead"
        )
    for target, value in pairs:
        if tuple(target.shape) != tuple(value.shape):
            raise ValueError(
                f"the self-distillation teacher's {target.path} has shape {tuple(target.shape)}, "
                f"the student's {tuple(value.shape)}; pass a teacher model instead"
            )
        target.assign(value)


def _call(teacher: Any, inputs: Any) -> Any:
    """The teacher's outputs, in inference mode, without gradients."""
    if isinstance(teacher, keras.layers.Layer):
        outputs = teacher(inputs, training=False)
    else:
        outputs = teacher(inputs)
    return keras.tree.map_structure(ops.stop_gradient, outputs)


def _scale_for_replicas(loss: Any) -> Any:
    """A term added to ``fit``'s loss is scaled for a ``tf.distribute`` strategy as Keras
    scales the compiled loss (1 / replicas in sync; the identity elsewhere)."""
    try:
        from keras.src.losses.loss import scale_loss_for_distribution
    except ImportError:  # a Keras without it: no strategy scaling to follow
        return loss
    return scale_loss_for_distribution(loss)


class KerasDistillation:
    """The distillation modifiers of one manager and their teachers.

    ``hardness``: modifier index -> the variable holding its hardness for the current step (0.0
    outside its window). ``slots``: with ``"self"``, the frozen clone each modifier's traced
    loss reads, made at ``modify()``; ``teachers``: the slots whose weights were taken from the
    student (at the start step), which the manager's state saves and a resume restores.
    """

    def __init__(self, terms: list[DistillationTerm], teacher: Any):
        self.terms = terms
        self.mode = teacher_mode(teacher) if terms else "disable"
        self.given = teacher if self.mode == "module" else None
        self.hardness: dict[int, Any] = {}
        self._values: dict[int, float] = {}
        self.slots: dict[int, Any] = {}
        self.teachers: dict[int, Any] = {}
        if terms and self.mode == "disable":
            warn_disabled(terms)

    @classmethod
    def attach(cls, runtime: RecipeRuntime, teacher: Any) -> KerasDistillation:
        """The distillation of ``runtime``'s plan; unless it is disabled, the hardness variables,
        the self-distillation clones and ``model.compute_loss`` wrapped for ``fit``."""
        dist = cls(terms_of(runtime.plan), teacher)
        unwrap_compute_loss(runtime.model)
        if dist.mode == "disable":
            return dist
        if keras.backend.backend() == "jax":
            raise NotImplementedError(
                "DistillationModifier on Keras runs on the TensorFlow and torch backends, not on "
                "KERAS_BACKEND='jax': the teacher and each step's hardness are variables the JAX "
                "trainer's stateless compiled step does not read. Set KERAS_BACKEND=tensorflow."
            )
        for term in dist.terms:
            dist.hardness[term.modifier] = keras.Variable(
                0.0, dtype="float32", trainable=False, name=f"distillation_hardness_{term.modifier}")
            if dist.mode == "self" and not term.ended(runtime.step_count):
                dist.slots[term.modifier] = frozen_copy(runtime.model)
        wrap_compute_loss(runtime.model, dist, runtime)
        runtime._retrace()
        return dist

    # -- the schedule ---------------------------------------------------------------------
    def begin(self, step: int, model: Any) -> None:
        """Before step ``step``'s events: take the self-distillation copies of the modifiers
        active from now (the student as the previous step left it, as PyTorch's first
        ``loss_update`` of the step does) and assign each modifier's hardness for the step."""
        for term in self.terms:
            if self.mode == "self" and term.active(step) and term.modifier not in self.teachers:
                self.take(term.modifier, model)
            value = term.hardness_at(step) if self.mode != "disable" else 0.0
            variable = self.hardness.get(term.modifier)
            if variable is not None and self._values.get(term.modifier) != value:
                variable.assign(value)
                self._values[term.modifier] = value

    def take(self, modifier: int, model: Any) -> None:
        """The student's weights into the modifier's frozen clone, now (once)."""
        slot = self.slots.get(modifier)
        if slot is None:
            return
        assign_weights(slot, model)
        self.teachers[modifier] = slot

    def on_event(self, event: Event, runtime: RecipeRuntime) -> None:
        """A start event takes the copy (unless :meth:`begin` did); an end event drops it and
        traces ``fit``'s step again without it."""
        if self.mode != "self":
            return
        if event.action == "start" and event.modifier not in self.teachers:
            self.take(event.modifier, runtime.model)
        elif event.action == "end":
            self.teachers.pop(event.modifier, None)
            if self.slots.pop(event.modifier, None) is not None:
                runtime._retrace()

    # -- the loss -------------------------------------------------------------------------
    def loss_update(self, loss: Any, step: int, student_outputs: Any, student_inputs: Any,
                    teacher_inputs: Any, scale: Any = None) -> Any:
        """``loss`` with the distillation term of every modifier not over at step ``step``
        mixed in, gated by its hardness variable (traced once, right at every later step)."""
        if self.mode == "disable":
            return loss
        for term in self.terms:
            teacher = self.given if self.mode == "module" else self.slots.get(term.modifier)
            if term.ended(step) or teacher is None:
                continue
            check_loss_update_args(term, step, student_outputs, student_inputs, teacher_inputs, traced=True)
            loss = self._mixed(term, teacher, ops.convert_to_tensor(loss), student_outputs,
                               teacher_inputs_of(student_inputs, teacher_inputs, term.teacher_input_keys), scale)
        return loss

    def _mixed(self, term: DistillationTerm, teacher: Any, loss: Any, student_outputs: Any,
               inputs: Any, scale: Any) -> Any:
        hardness = self.hardness[term.modifier]

        def distilled() -> Any:
            distill = kldiv_loss(student_outputs, _call(teacher, inputs), term.temperature, term.output_keys)
            distill = ops.cast(scale(distill) if scale is not None else distill, loss.dtype)
            return mix(loss, distill, ops.cast(hardness, loss.dtype))

        return ops.cond(hardness > 0, distilled, lambda: loss)

    # -- ending, saving, resuming ---------------------------------------------------------
    def close(self, model: Any) -> None:
        """``finalize()``: drop the teachers and give ``model`` its own ``compute_loss`` back."""
        self.teachers.clear()
        self.slots.clear()
        self.given = None
        self.mode = "disable"
        unwrap_compute_loss(model)

    def state(self) -> dict[str, Any]:
        """The self-distillation copies' weights (a given teacher is the caller's to give)."""
        if self.mode != "self":
            return {}
        return {str(k): [np.array(ops.convert_to_numpy(v)) for v in t.weights] for k, t in self.teachers.items()}

    def load(self, state: Mapping[str, Any], runtime: RecipeRuntime) -> None:
        self.teachers = {}
        if self.mode != "self":
            return
        for key, weights in state.items():
            modifier = int(key)
            if modifier not in self.slots:
                self.slots[modifier] = frozen_copy(runtime.model)
                runtime._retrace()
            slot = self.slots[modifier]
            shapes = [tuple(np.shape(w)) for w in weights]
            if shapes != [tuple(v.shape) for v in slot.weights]:
                raise saved_teacher_error(
                    self.terms, key, f"saved shapes {shapes}, model {[tuple(v.shape) for v in slot.weights]}")
            for variable, value in zip(slot.weights, weights, strict=True):
                variable.assign(value)
            self.teachers[modifier] = slot
        for term in self.terms:  # a modifier over at the restored step needs no copy
            if term.ended(runtime.step_count):
                self.slots.pop(term.modifier, None)
        self._values.clear()


# -- model.fit: the distillation term inside Model.compute_loss --------------------------------
def wrap_compute_loss(model: Any, dist: KerasDistillation, runtime: RecipeRuntime) -> None:
    """Replace ``model.compute_loss`` on the instance by one that mixes the distillation terms
    into the training loss (the teacher runs on ``x``); evaluation losses are left alone."""
    original = model.compute_loss
    has_training = "training" in inspect.signature(original).parameters

    def compute_loss(x: Any = None, y: Any = None, y_pred: Any = None, sample_weight: Any = None,
                     training: bool = True) -> Any:
        if has_training:
            loss = original(x, y, y_pred, sample_weight, training=training)
        else:
            loss = original(x, y, y_pred, sample_weight)
        if not training or loss is None:
            return loss
        return dist.loss_update(loss, runtime.step_count, y_pred, x, None, scale=_scale_for_replicas)

    compute_loss.recipe_original = original  # type: ignore[attr-defined]
    model.compute_loss = compute_loss


def unwrap_compute_loss(model: Any) -> None:
    """Undo :func:`wrap_compute_loss` (a no-op when ``model`` has its own)."""
    if model is not None and hasattr(vars(model).get("compute_loss"), "recipe_original"):
        del model.compute_loss
