"""Knowledge distillation, framework-free: when each distillation modifier is active, how its
loss mixes with the task loss, which outputs and inputs take part, and what a teacher may be.

SparseML 1.x semantics (``sparseml/pytorch/sparsification/distillation/``): between
``start_epoch`` and ``end_epoch`` (steps ``[first, last)`` of the modifier's plan track) each
``loss_update(loss, ...)`` returns ``(1 - hardness) * loss + hardness * distill_loss``, where
``distill_loss`` is the mean over the distilled outputs of the temperature-scaled KL divergence
(the tensor half, ``kl_logsoftmax``, is each backend's). Several distillation modifiers compose
in recipe order, each mixing the loss the previous one returned (SparseML's manager loop).

The teacher (``distillation_teacher=`` at ``modify()``, SparseML's manager keyword): a model,
``"self"`` (a frozen copy of the student taken at the modifier's start step) or ``"disable"``
(SparseML's default: the modifier does nothing, with a warning).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..modifiers import schedule_of

if TYPE_CHECKING:
    from ..schedule.plan import Plan

__all__ = [
    "DistillationTerm", "terms_of", "teacher_mode", "mix", "output_pairs", "mean_loss",
    "teacher_inputs_of", "check_loss_update_args", "warn_disabled", "saved_teacher_error",
]


@dataclass
class DistillationTerm:
    """One distillation modifier of a compiled plan: its active steps and its arguments."""

    modifier: int
    type: str
    line: int
    first: int
    last: int | None
    hardness: float
    temperature: float
    output_keys: list[Any] | None
    teacher_input_keys: list[Any] | None

    def active(self, step: int) -> bool:
        """Whether the modifier changes the loss at optimizer step ``step``: ``[first, last)``."""
        return self.first <= step and (self.last is None or step < self.last)

    def ended(self, step: int) -> bool:
        """Whether the modifier's window is over at step ``step`` (it never acts again)."""
        return self.last is not None and step >= self.last

    def hardness_at(self, step: int) -> float:
        """The hardness mixed into the loss of step ``step``: ``hardness`` while active, else
        0.0 (``mix`` with 0 gives the loss itself); what a compiled step reads from a variable."""
        return self.hardness if self.active(step) else 0.0


def terms_of(plan: Plan) -> list[DistillationTerm]:
    """The plan's distillation modifiers, in recipe order."""
    out = []
    for track in sorted(plan.tracks, key=lambda t: t.index):
        m = track.modifier
        if schedule_of(m.type) != "distillation":
            continue
        events, k = [], track.first  # a start event and, unless it never ends, an end event
        while k is not None:
            events.extend(track.make(k))
            k = track.next_step(k + 1)
        first = min(e.step for e in events if e.action == "start")
        last = min((e.step for e in events if e.action == "end"), default=None)
        args = m.args
        out.append(DistillationTerm(
            modifier=track.index, type=m.type, line=m.span.line, first=first, last=last,
            hardness=float(args.get("hardness", 0.5)), temperature=float(args.get("temperature", 2.0)),
            output_keys=list(args["distill_output_keys"]) if args.get("distill_output_keys") else None,
            teacher_input_keys=list(args["teacher_input_keys"]) if args.get("teacher_input_keys") else None,
        ))
    return out


def teacher_mode(teacher: Any) -> str:
    """``"disable"``, ``"self"`` or ``"module"`` (a callable model); anything else is refused
    with SparseML's message."""
    if isinstance(teacher, str):
        if teacher in ("disable", "self"):
            return teacher
    elif callable(teacher):
        return "module"
    raise ValueError(
        f"unrecognized value for distillation_teacher: {teacher!r}; pass a teacher model, "
        "'self' (a frozen copy of the model taken when distillation starts) or 'disable'"
    )


def warn_disabled(terms: Sequence[DistillationTerm]) -> None:
    """SparseML disabled its distillation modifiers when no teacher was given: say so."""
    for term in terms:
        warnings.warn(
            f"{term.type} (line {term.line}) does nothing: distillation_teacher is 'disable' "
            "(the default, as in SparseML); pass distillation_teacher=<teacher model> or 'self' "
            "to modify()",
            UserWarning, stacklevel=4,
        )


def mix(loss: Any, distill_loss: Any, hardness: float) -> Any:
    """SparseML's ``compute_total_loss``: ``(1 - hardness) * loss + hardness * distill_loss``."""
    return ((1.0 - hardness) * loss) + (hardness * distill_loss)


def output_pairs(student: Any, teacher: Any, keys: Sequence[Any] | None,
                 is_tensor: Callable[[Any], bool]) -> list[tuple[Any, Any]]:
    """The (student, teacher) output pairs to distill (SparseML's ``kldiv_loss``): a single
    tensor; a mapping's ``keys`` (default: all of the student's); a sequence's ``keys`` (indices,
    default: all)."""
    if type(student) is not type(teacher):
        raise ValueError(
            f"Student output type of {type(student)} must match teacher output type of {type(teacher)}"
        )
    if is_tensor(student):
        return [(student, teacher)]
    if isinstance(student, Mapping):
        return [(student[k], teacher[k]) for k in (keys or list(student))]
    if isinstance(student, Sequence) and not isinstance(student, str):
        return [(student[i], teacher[i]) for i in (keys or range(len(student)))]
    raise TypeError(f"cannot distill model outputs of type {type(student).__name__}")


def saved_teacher_error(terms: Sequence[DistillationTerm], key: Any, detail: Any) -> ValueError:
    """The error for a saved self-distillation teacher that does not fit the model."""
    term = next((t for t in terms if t.modifier == int(key)), None)
    return ValueError(
        f"{term.type if term else 'DistillationModifier'} (line {term.line if term else '?'}): "
        f"the saved self-distillation teacher does not fit the model's structure: {detail}"
    )


def mean_loss(losses: Sequence[Any]) -> Any:
    """The mean of the per-output losses (0.0 when there are none, as SparseML)."""
    return sum(losses) / len(losses) if losses else 0.0


def teacher_inputs_of(student_inputs: Any, teacher_inputs: Any, keys: Sequence[Any] | None) -> Any:
    """What the teacher is run on: ``teacher_inputs`` if given, else the student's inputs,
    filtered to ``teacher_input_keys`` when the recipe sets them."""
    if teacher_inputs is not None:
        return teacher_inputs
    if not keys:
        return student_inputs
    if isinstance(student_inputs, Mapping):
        return {k: student_inputs[k] for k in keys}
    return [student_inputs[k] for k in keys]


def check_loss_update_args(term: DistillationTerm, step: int, student_outputs: Any,
                           student_inputs: Any, teacher_inputs: Any, traced: bool = False) -> None:
    """An active distillation modifier needs the student's outputs and inputs. ``traced``: a
    backend whose train step is traced once and reused (Keras) needs them at every step until
    the modifier's end, since the traced step keeps the terms it saw."""
    missing = [
        name for name, value in (("student_outputs", student_outputs),
                                 ("student_inputs", student_inputs if teacher_inputs is None else 0))
        if value is None
    ]
    if missing:
        when = (f"distils on steps {term.first} to {'the end' if term.last is None else term.last - 1}, "
                "and a traced train step keeps the terms it was traced with"
                if traced and not term.active(step) else f"is active at step {step}")
        raise ValueError(
            f"{term.type} (line {term.line}) {when}: loss_update() needs "
            f"{' and '.join(missing)}: call loss = manager.loss_update(loss, "
            "student_outputs=outputs, student_inputs=inputs) with outputs = model(inputs) "
            "(teacher_inputs= gives the teacher other inputs)"
        )
    keys = term.teacher_input_keys
    by_position = isinstance(student_inputs, (list, tuple)) and all(
        isinstance(k, int) and not isinstance(k, bool) and -len(student_inputs) <= k < len(student_inputs) for k in keys or ())
    if keys and teacher_inputs is None and not by_position and not (
        isinstance(student_inputs, Mapping) and all(k in student_inputs for k in keys)
    ):
        what = (f"a mapping without {[k for k in keys if k not in student_inputs]}"
                if isinstance(student_inputs, Mapping)
                else f"a {type(student_inputs).__name__}, not a mapping (or a list for int keys)")
        raise ValueError(
            f"{term.type} (line {term.line}) is active at step {step}: its teacher_input_keys "
            f"{list(keys)} pick the teacher's inputs from student_inputs by key, but they are {what}: "
            "pass student_inputs as a mapping with those keys, or teacher_inputs= to loss_update()"
        )
