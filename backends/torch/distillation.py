"""DistillationModifier on PyTorch: the teacher (a given model, or a frozen copy of the student
taken at the modifier's start step) and the KL term; when a modifier is active and how the
losses mix are the core's (:mod:`recipe_spec.runtime.distillation`).

The KL term is SparseML's ``kl_logsoftmax``
(``sparseml/pytorch/sparsification/distillation/modifier_distillation_base.py``)::

    kl_div(input=log_softmax(student / T, dim), target=log_softmax(teacher / T, dim),
           log_target=True, reduction="sum") * T**2 / (student.numel() / teacher.size(dim))

i.e. KL(softmax(teacher / T) || softmax(student / T)) summed over the class dimension, averaged
over every other position (batch, sequence...), times T², then averaged over the distilled
outputs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
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

__all__ = ["kl_logsoftmax", "kldiv_loss", "frozen_copy", "TorchDistillation"]


def kl_logsoftmax(x: torch.Tensor, y: torch.Tensor, temperature: float, dim: int = -1) -> torch.Tensor:
    """SparseML's distillation term of student logits ``x`` and teacher logits ``y``."""
    if x.shape != y.shape:
        raise ValueError(
            "The teacher/student outputs must be of the same shape for distillation but got "
            f"Tensors of size {tuple(x.shape)} and {tuple(y.shape)}"
        )
    number_items = x.numel() / y.size(dim)
    return (
        F.kl_div(
            input=F.log_softmax(x / temperature, dim=dim),
            target=F.log_softmax(y / temperature, dim=dim),
            log_target=True,
            reduction="sum",
        )
        * (temperature ** 2)
        / number_items
    )


def kldiv_loss(student: Any, teacher: Any, temperature: float, keys: Sequence[Any] | None = None,
               dim: int = -1) -> Any:
    """SparseML's ``kldiv_loss``: the mean of :func:`kl_logsoftmax` over the distilled outputs."""
    pairs = output_pairs(student, teacher, keys, lambda v: isinstance(v, torch.Tensor))
    return mean_loss([kl_logsoftmax(s, t, temperature, dim) for s, t in pairs])


def frozen_copy(model: torch.nn.Module, hook_ids: set[int] = frozenset()) -> torch.nn.Module:  # type: ignore[assignment]
    """A deep copy of ``model`` in eval mode, no parameter requiring gradients, without the
    forward pre-hooks ``hook_ids`` (the mask hooks of the student, which would act on it)."""
    teacher = copy.deepcopy(model)
    for module in teacher.modules():
        for hook_id in hook_ids & set(module._forward_pre_hooks):
            del module._forward_pre_hooks[hook_id]
    teacher.requires_grad_(False)
    return teacher.eval()


def module_forward(module: torch.nn.Module, inputs: Any) -> Any:
    """SparseML's ``tensors_module_forward``: a mapping as keywords, a list/tuple as
    positional arguments, anything else as the one argument."""
    if isinstance(inputs, Mapping):
        return module(**inputs)
    if isinstance(inputs, (list, tuple)):
        return module(*inputs)
    return module(inputs)


def device_of(inputs: Any) -> torch.device | None:
    """The device of the first tensor in ``inputs``."""
    if isinstance(inputs, torch.Tensor):
        return inputs.device
    values = inputs.values() if isinstance(inputs, Mapping) else inputs if isinstance(inputs, (list, tuple)) else ()
    for value in values:
        found = device_of(value)
        if found is not None:
            return found
    return None


class TorchDistillation:
    """The distillation modifiers of one manager and their teachers.

    ``teachers``: modifier index -> the teacher module (the given one, or the student's frozen
    copy once its start step came). A self-distillation copy is saved in the manager's state
    (its weights) and rebuilt on resume, so a resumed run distils from the same teacher.
    """

    def __init__(self, terms: list[DistillationTerm], teacher: Any):
        self.terms = terms
        self.mode = teacher_mode(teacher) if terms else "disable"
        self.given = teacher if self.mode == "module" else None
        self.teachers: dict[int, torch.nn.Module] = {}
        if terms and self.mode == "disable":
            warn_disabled(terms)

    @classmethod
    def attach(cls, plan: Any, teacher: Any) -> TorchDistillation:
        return cls(terms_of(plan), teacher)

    def start(self, modifier: int, model: torch.nn.Module, hook_ids: set[int]) -> None:
        """The modifier's start step: a self-distillation teacher is copied now (once)."""
        if self.mode == "self" and modifier not in self.teachers:
            self.teachers[modifier] = frozen_copy(model, hook_ids)

    def end(self, modifier: int) -> None:
        """The modifier's end step: its copy of the student is no longer needed."""
        if self.mode == "self":
            self.teachers.pop(modifier, None)

    def teacher(self, term: DistillationTerm, model: torch.nn.Module, hook_ids: set[int]) -> torch.nn.Module:
        if self.mode == "module":
            return self.given
        self.start(term.modifier, model, hook_ids)
        return self.teachers[term.modifier]

    def loss_update(self, loss: Any, step: int, model: torch.nn.Module, hook_ids: set[int],
                    student_outputs: Any, student_inputs: Any, teacher_inputs: Any) -> Any:
        """The loss of step ``step`` with every active modifier's distillation term mixed in."""
        if self.mode == "disable":
            return loss
        for term in self.terms:
            if not term.active(step):
                continue
            check_loss_update_args(term, step, student_outputs, student_inputs, teacher_inputs)
            inputs = teacher_inputs_of(student_inputs, teacher_inputs, term.teacher_input_keys)
            teacher = self.teacher(term, model, hook_ids)
            teacher.eval()
            target = device_of(inputs)
            first = next(iter(teacher.parameters()), None)
            if target is not None and first is not None and first.device != target:
                teacher.to(target)
            with torch.no_grad():
                teacher_outputs = module_forward(teacher, inputs)
            distill = kldiv_loss(student_outputs, teacher_outputs, term.temperature, term.output_keys)
            loss = mix(loss, distill, term.hardness)
        return loss

    # -- saving, resuming ------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The self-distillation copies' weights (a given teacher is the caller's to give)."""
        if self.mode != "self":
            return {}
        return {str(k): {n: v.detach().clone() for n, v in t.state_dict().items()} for k, t in self.teachers.items()}

    def load(self, state: Mapping[str, Any], model: torch.nn.Module, hook_ids: set[int]) -> None:
        self.teachers = {}
        if self.mode != "self":
            return
        for key, weights in state.items():
            teacher = frozen_copy(model, hook_ids)
            try:
                teacher.load_state_dict(weights)
            except RuntimeError as exc:
                raise saved_teacher_error(self.terms, key, exc) from None
            self.teachers[int(key)] = teacher
