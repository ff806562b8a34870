"""Automatic recipes: Sparsify Create's ``initialize`` on recipe-spec.

Three lines turn a training script into a sparse (and quantized) one::

    from recipe_spec import create

    manager, optimizer = create.initialize(model, optimizer, steps_per_epoch=len(loader))
    end_epoch = manager.max_epochs  # the recipe's length replaces the script's

The recipe is SparseML's ``recipe_template`` (:mod:`.template`), with
:class:`~.variables.RecipeVariables` merged over its defaults and checked. This package imports
no framework: the backend that owns the model is found when ``initialize`` runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..diagnostics.base import RecipeError, Severity
from ..manager import ScheduledModifierManager
from ..registry import backend_for
from ..validation import validate
from .template import (
    LR_FUNCTIONS,
    LR_OPTIONS,
    LR_STEPS,
    PRUNING_OPTIONS,
    normalize_pruning,
    recipe_text,
)
from .variables import RecipeVariables

__all__ = ["initialize", "recipe_text", "RecipeVariables", "LR_FUNCTIONS", "LR_STEPS", "LR_OPTIONS", "PRUNING_OPTIONS",
           "normalize_pruning"]


def _prunable_params(model: Any) -> list[str] | str:
    """The prunable weights of ``model`` whose names do not contain ``input`` or ``output``
    (SparseML's template skips those layers); ``__ALL_PRUNABLE__`` when none can be listed."""
    try:
        records = backend_for(model).param_records(model)
    except (ValueError, LookupError, TypeError):
        return "__ALL_PRUNABLE__"
    names = [r.name for r in records if r.prunable and "input" not in r.name and "output" not in r.name]
    return names or "__ALL_PRUNABLE__"


def initialize(
    model: Any,
    optimizer: Any,
    steps_per_epoch: int,
    pruning: str | bool | None = True,
    quantization: bool = True,
    lr: str = "linear",
    distillation: bool = False,
    distillation_teacher: Any = None,
    scaler: Any = None,
    recipe_variables: Mapping[str, Any] | RecipeVariables | None = None,
    grad_sampler: Any = None,
) -> tuple[ScheduledModifierManager, Any]:
    """Build the automatic recipe for ``model`` and attach it: Sparsify 1.6's
    ``sparsify.create.initialize``, with its signature.

    - ``pruning``: True (magnitude pruning, global or layer-wise by the ``global_sparsity``
      variable; also ``"gmp"``), False / None (no pruning; False with quantization holds the
      model's zeros), ``"acdc"``, ``"mfac"``, ``"obs"``, ``"movement"`` (always layer-wise:
      an explicit ``global_sparsity: True`` is refused), ``"constant"`` / ``"transfer"`` /
      ``"sparse-transfer"`` (ConstantPruningModifier: the zeros the model has stay zero).
    - ``quantization``: quantization-aware training after pruning.
    - ``lr``: the LR function, ``"linear"``, ``"cosine"`` or ``"cyclic_linear"``, from the
      ``init_lr`` to the ``final_lr`` variable over ``num_epochs``, or a step-style schedule,
      ``"step"``, ``"multistep"`` or ``"exponential"`` (:data:`LR_STEPS`), from ``init_lr``
      down to ``final_lr`` by a constant factor; it replaces the optimizer's LR from the first
      step (remove the script's own LR scheduler).
    - ``distillation``: add a DistillationModifier; ``distillation_teacher``: its teacher (a
      model), or None for self-distillation. The loop calls ``manager.loss_update``.
    - ``scaler``: PyTorch's ``torch.amp.GradScaler`` for mixed precision; the second value
      returned is then that scaler wrapped (Sparsify's "scaler if provided otherwise
      optimizer"): ``scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()``
      drives the schedule (``scaler.step()`` without an argument too), a step the scaler skips
      (inf/NaN gradients) does not advance it, and when quantization starts the scaler is
      switched off (a warning says so once); autocast follows
      ``manager.autocast_enabled()``. See docs/pytorch.md, "Mixed precision".
    - ``recipe_variables``: a dict merged over :class:`RecipeVariables`' defaults, or a
      RecipeVariables; an unknown name or a mistyped value is a ``ValueError``.
    - ``grad_sampler``: ``{"data_loader_builder": f, "loss_function": loss}`` for M-FAC and
      OBS pruning; OBS cannot run without it (refused before training, M012).

    Returns ``(manager, optimizer)``: the :class:`~recipe_spec.ScheduledModifierManager`
    (``max_epochs``, ``quantization_modifiers``, ``finalize``...) and, for PyTorch, the
    optimizer whose ``step()`` drives the schedule, or with ``scaler`` the wrapped scaler. For
    a Keras model the second value is what the Keras backend's ``modify`` returns:
    ``(model, optimizer, callbacks)``.

    A modifier the backend does not run is refused here, before training, with a located
    :class:`~recipe_spec.RecipeError` (B001 or M001) naming it.
    """
    if not isinstance(steps_per_epoch, int) or isinstance(steps_per_epoch, bool) or steps_per_epoch < 1:
        raise ValueError(f"Argument `steps_per_epoch` must be an int >= 1. Received: steps_per_epoch={steps_per_epoch!r}")
    RecipeVariables.merged(recipe_variables)  # an unknown or mistyped variable fails here, first
    algo = normalize_pruning(pruning, quantization)
    if algo == "mfac" and grad_sampler is None:
        # the template prunes from epoch 0 with num_grads=64: SparseML crashed at the first
        # step ("only 1 were collected from the expected 64"); M012's hint here would suggest
        # editing the recipe, which create's user does not write
        raise ValueError(
            "pruning='mfac' prunes from the first step and needs num_grads=64 gradients then: pass "
            "grad_sampler={'data_loader_builder': build, 'loss_function': loss} to initialize() "
            "(build(kwargs) yields batches (args, kwargs, target)); see docs/second-order.md."
        )
    params = _prunable_params(model) if algo not in ("", "constant") else "__ALL_PRUNABLE__"
    text = recipe_text(pruning, quantization, lr, distillation, recipe_variables, params=params)
    # refuse, before training, what the model's backend cannot run: a modifier it lacks (B001)
    # or one recipe-spec does not declare yet (M001: modify() alone would skip it silently)
    backend = backend_for(model).name
    errors = [d for d in validate(text, backend=backend) if d.severity is Severity.ERROR]
    if errors:
        options = f"pruning={pruning!r}, quantization={quantization!r}, lr={lr!r}, distillation={distillation!r}"
        hint = (f"create.initialize({options}) generates this modifier, but the {backend} backend does not "
                "run it yet: choose another option (create.recipe_text() with the same options shows the recipe).")
        raise RecipeError([replace(d, hint=hint if d.code in ("B001", "M001") else d.hint).in_file("<create recipe>")
                           for d in errors])
    manager = ScheduledModifierManager.from_yaml(text)
    options: dict[str, Any] = {}
    if grad_sampler is not None:
        options["grad_sampler"] = grad_sampler
    if distillation:
        options["distillation_teacher"] = distillation_teacher if distillation_teacher is not None else "self"
    wrapped = manager.modify(model, optimizer, steps_per_epoch, **options)
    if scaler is not None:
        wrapped = manager.wrap_scaler(scaler)
    return manager, wrapped
