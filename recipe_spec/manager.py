"""``ScheduledModifierManager``: the SparseML-compatible entry point.

A training script written for SparseML runs with an import changed::

    from recipe_spec import ScheduledModifierManager

    manager = ScheduledModifierManager.from_yaml("recipe.yaml")
    optimizer = manager.modify(model, optimizer, steps_per_epoch=len(train_loader))
    for epoch in range(manager.max_epochs):
        for batch in train_loader:
            ...
            optimizer.step()          # drives the schedule
    manager.finalize(model)

The class is framework-free: ``modify`` picks the backend that owns the model it is given
(:func:`recipe_spec.registry.backend_for`) and imports only that one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from .loader import load
from .modifiers import spec
from .recipe.model import Modifier, Recipe
from .registry import backend_for
from .runtime.preflight import refuse_invalid
from .schedule.epochs import max_epochs, min_epochs

__all__ = ["ScheduledModifierManager", "parse_recipe_variables"]


def parse_recipe_variables(variables: Any) -> dict[str, Any] | None:
    """SparseML's ``recipe_variables``: a mapping, a JSON object text, or ``k=v,k2=v2`` (also
    ``k:v``) with numeric values converted.

    >>> parse_recipe_variables('num_epochs=10,lr:0.1')
    {'num_epochs': 10.0, 'lr': 0.1}
    """
    if variables is None or isinstance(variables, Mapping):
        return dict(variables) if variables is not None else None
    if not isinstance(variables, str):
        raise TypeError(f"recipe_variables must be a mapping or a string, not {type(variables).__name__}")
    text = variables.strip()
    if not text:
        return None
    try:
        parsed = json.loads(text)
        if isinstance(parsed, dict):
            return parsed
    except json.JSONDecodeError:
        pass
    out: dict[str, Any] = {}
    for item in text.split(","):
        key, sep, value = item.replace(":", "=", 1).partition("=")
        if not sep or not key.strip():
            raise ValueError(f"recipe_variables: expected NAME=VALUE, got {item!r}")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            out[key.strip()] = value.strip()
    return out


class ScheduledModifierManager:
    """A recipe and, once :meth:`modify` ran, its backend runtime.

    A recipe with an error that ``recipe-spec validate`` reports is refused here, with every
    error located (:class:`~recipe_spec.RecipeError`); its warnings are given once
    (:func:`recipe_spec.runtime.preflight.refuse_invalid`)."""

    def __init__(self, recipe: Recipe):
        if not isinstance(recipe, Recipe):
            raise TypeError(f"ScheduledModifierManager takes a Recipe (from_yaml() loads a path or text), not {type(recipe).__name__}")
        refuse_invalid(recipe)
        self.recipe = recipe
        self.runtime: Any = None

    @classmethod
    def from_yaml(cls, file_path: str | os.PathLike[str] | Recipe, recipe_variables: Any = None) -> ScheduledModifierManager:
        """Load a recipe (a path, YAML text, or a Recipe) with optional variable overrides.
        Raises :class:`~recipe_spec.RecipeError` with every error ``recipe-spec validate``
        reports, each with its file, line, column and hint."""
        if isinstance(file_path, Recipe):
            if recipe_variables is not None:
                raise ValueError("recipe_variables apply when loading a recipe; this Recipe is loaded already: "
                                 "pass the path or text, or load it with recipe_spec.load(path, variables)")
            return cls(file_path)
        return cls(load(file_path, parse_recipe_variables(recipe_variables)))

    # -- recipe facts ----------------------------------------------------------------------
    @property
    def modifiers(self) -> list[Modifier]:
        return list(self.recipe.modifiers)

    @property
    def _scheduled(self) -> Recipe:
        """The recipe whose schedule runs: a stage/group recipe's ``!Modifier`` twins
        (:mod:`recipe_spec.stage_dialect.to_modifiers`) when it runs, else the recipe."""
        if self.runtime is not None:
            return self.runtime.recipe
        from .stage_dialect.to_modifiers import runnable

        return runnable(self.recipe, None)

    @property
    def max_epochs(self) -> int:
        return max_epochs(self._scheduled.modifiers)

    @property
    def min_epochs(self) -> int:
        return min_epochs(self._scheduled.modifiers)

    def _of(self, category: str) -> list[Modifier]:
        """The recipe's modifiers whose declaration is of ``category``."""
        out = []
        for m in self.recipe.modifiers:
            declared = spec(m.type)
            if declared is not None and declared.category == category:
                out.append(m)
        return out

    @property
    def pruning_modifiers(self) -> list[Modifier]:
        return self._of("pruning")

    @property
    def quantization_modifiers(self) -> list[Modifier]:
        return self._of("quantization")

    @property
    def learning_rate_modifiers(self) -> list[Modifier]:
        return self._of("learning_rate")

    @property
    def distillation_modifiers(self) -> list[Modifier]:
        return self._of("distillation")

    def __str__(self) -> str:
        return self.recipe.to_yaml(style="sparseml")

    def __repr__(self) -> str:
        return f"ScheduledModifierManager({self.recipe!r})"

    # -- running ---------------------------------------------------------------------------
    def modify(self, model: Any, optimizer: Any, steps_per_epoch: int, **options: Any) -> Any:
        """Attach the recipe: for PyTorch returns the optimizer whose ``step()`` drives the
        schedule; for Keras returns ``(model, optimizer, callbacks)``. ``grad_sampler=`` feeds
        M-FAC and OBS pruning (see :meth:`apply`)."""
        backend = backend_for(model)
        if self.runtime is not None:  # modify() again: let the previous attachment go
            self.runtime.detach()
        self.runtime = backend.compile(self.recipe)
        return self.runtime.modify(model, optimizer, steps_per_epoch, **options)

    def apply(self, model: Any, grad_sampler: Any = None, calibration: Any = None, **options: Any) -> None:
        """One-shot: prune ``model`` to each pruning modifier's final sparsity now and finalize
        (SparseML's ``manager.apply``). ``grad_sampler`` feeds M-FAC and OBS:
        ``{"data_loader_builder": f, "loss_function": loss}``.

        A stage/group recipe of one-shot modifiers (SparseGPT, Wanda, ...) runs through the
        one-shot pipeline of :func:`recipe_spec.oneshot`, fed ``calibration`` (tokenised
        samples; ``options`` are ``oneshot``'s: ``num_calibration_samples``,
        ``shuffle_calibration_samples``, ``batch_size``, ``pipeline``, ...)::

            manager = ScheduledModifierManager.from_yaml("sparsegpt.yaml")
            manager.apply(model, calibration=samples, shuffle_calibration_samples=False)
        """
        if calibration is not None or self._one_shot():
            from .oneshot.api import apply_oneshot

            _one_shot_options(options)
            from .oneshot.preflight import check_arguments

            check_arguments(sequential_offload_device=options.get("sequential_offload_device"))
            offload = str(options.pop("sequential_offload_device", "") or "").startswith("cpu")
            apply_oneshot(model, self.recipe, calibration, offload=offload, **options)
            return
        backend = backend_for(model)
        self.runtime = backend.compile(self.recipe)
        self.runtime.apply(model, grad_sampler=grad_sampler, **options)

    def _one_shot(self) -> bool:
        """Whether the recipe holds a one-shot modifier of the stage/group dialect."""
        if self.recipe.dialect != "stage":
            return False
        from .stage_dialect import stage_spec

        return any((d := stage_spec(m.type)) is not None and not d.training for m in self.recipe.modifiers)

    def loss_update(self, loss: Any, student_outputs: Any = None, student_inputs: Any = None,
                    teacher_inputs: Any = None) -> Any:
        """SparseML's ``manager.loss_update``: call it with the step's loss before ``backward()``
        and train on what it returns. While a DistillationModifier is active that is
        ``(1 - hardness) * loss + hardness * distill_loss`` against the teacher given to
        :meth:`modify` (``distillation_teacher=``); otherwise ``loss`` unchanged.
        ``student_outputs``: the model's outputs for ``student_inputs``; ``teacher_inputs``
        (default: the student's) are what the teacher runs on."""
        return self._need_runtime().loss_update(
            loss, student_outputs=student_outputs, student_inputs=student_inputs,
            teacher_inputs=teacher_inputs,
        )

    def autocast_enabled(self, epoch: float | None = None) -> bool:
        """Whether mixed precision may run: True until a quantization modifier is active at
        ``epoch`` (None: at the current step; before :meth:`modify`, epoch 0). Quantization-
        aware training runs in float32, so a PyTorch loop writes
        ``with torch.autocast(device, enabled=manager.autocast_enabled()):``; the step where
        it turns False warns once (see :mod:`recipe_spec.runtime.precision`)."""
        from .runtime.precision import autocast_enabled

        return autocast_enabled(self._scheduled, self.runtime, epoch)

    def wrap_scaler(self, scaler: Any) -> Any:
        """PyTorch: ``scaler = manager.wrap_scaler(scaler)`` after :meth:`modify` wraps a
        ``torch.amp.GradScaler`` so that ``scaler.step()`` drives the schedule and the scaler is
        switched off when quantization starts (``recipe_spec_torch.precision.RecipeScaler``).
        Keras wraps its optimizer in a ``LossScaleOptimizer`` itself: nothing to wrap there."""
        runtime = self._need_runtime()
        wrap = getattr(runtime, "wrap_scaler", None)
        if wrap is None:
            raise TypeError(
                f"wrap_scaler() is for PyTorch's GradScaler; the {runtime.framework} backend has no "
                "scaler to wrap (Keras: set the 'mixed_float16' dtype policy before building the model)"
            )
        return wrap(scaler)

    def emulated_step(self) -> None:
        """PyTorch: advance the schedule one optimizer step without stepping the optimizer (a
        batch skipped on purpose, e.g. gradient accumulation counted in batches): the step's
        events still apply. Keras custom loops call ``runtime.step_begin()`` and
        ``runtime.step_end()`` instead."""
        runtime = self._need_runtime()
        step = getattr(runtime, "emulated_step", None)
        if step is None:
            raise TypeError(f"emulated_step() is for PyTorch; on {runtime.framework} call runtime.step_begin() and runtime.step_end()")
        step()

    def _need_runtime(self) -> Any:
        if self.runtime is None:
            raise RuntimeError("call modify(model, optimizer, steps_per_epoch) first")
        return self.runtime

    def finalize(self, model: Any = None) -> None:
        """Apply the masks a last time and remove what the recipe hooked into the model."""
        self._need_runtime().finalize(model)

    def state_dict(self) -> dict[str, Any]:
        """The schedule's state (step, masks, structure, recipe) for a checkpoint."""
        return self._need_runtime().state_dict()

    def load_state_dict(self, state: Mapping[str, Any], allow_recipe_change: bool = False) -> None:
        """Restore a state from :meth:`state_dict`: after :meth:`modify`, before the model's and
        the optimizer's own ``load_state_dict``. A state saved with another recipe is refused
        with what changed (``RecipeChangedError``, a ``ValueError``) unless
        ``allow_recipe_change=True``."""
        self._need_runtime().load_state_dict(state, allow_recipe_change)


def _one_shot_options(options: dict[str, Any]) -> None:
    """A TypeError naming each option ``apply(calibration=...)`` does not take, and those it
    does (``apply_oneshot``'s keywords, and ``sequential_offload_device``)."""
    import inspect

    from .oneshot.api import apply_oneshot

    taken = [n for n in inspect.signature(apply_oneshot).parameters if n not in ("model", "recipe", "dataset", "offload")]
    taken.append("sequential_offload_device")
    unknown = [n for n in options if n not in taken]
    if unknown:
        raise TypeError(f"ScheduledModifierManager.apply(calibration=...) takes no option "
                        f"{', '.join(map(repr, unknown))}; it takes {', '.join(sorted(taken))} "
                        "(recipe_spec.oneshot takes llm-compressor's other keywords)")

