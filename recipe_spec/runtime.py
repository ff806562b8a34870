"""What every backend runtime shares, framework-free: resolving a recipe's selectors against a
model once, refusing a recipe whose patterns do not fit the model before training starts, and
checking a saved schedule state before it is restored.

Backends keep only what touches their framework (masks on tensors or variables, optimizer
values, model structure).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .diagnostics import RecipeError, Severity
from .params import ParamIndex, ParamRecord, resolve
from .recipe import Recipe

__all__ = ["ModelParams", "check_recipe_fits", "check_saved_state", "non_finite_message", "global_mask_type_message"]

#: Lint codes that stop ``modify()``: the recipe cannot run on this model as written.
BLOCKING_CODES = ("P001", "P004", "P005", "P006")


class ModelParams:
    """A model's parameters indexed for the recipe: ``names_for`` resolves a modifier's
    selector once and remembers the answer (a runtime asks at every event)."""

    def __init__(self, records: Sequence[ParamRecord]):
        self.index = ParamIndex(records)
        self._resolved: dict[tuple[int, Any], list[str]] = {}

    @property
    def records(self) -> list[ParamRecord]:
        return self.index.records

    def names_for(self, modifier: int, selector: Any) -> list[str]:
        """The parameter names modifier ``modifier``'s ``selector`` resolves to."""
        key = (modifier, selector if isinstance(selector, (str, tuple)) else repr(selector))
        if key not in self._resolved:
            self._resolved[key] = list(resolve(selector, self.index).names) if selector is not None else []
        return self._resolved[key]


def check_recipe_fits(recipe: Recipe, records: Sequence[ParamRecord], framework: str) -> None:
    """Raise :class:`RecipeError` (pattern, line, closest names) when the recipe's patterns,
    mask shapes or QAT layers do not fit the model: at ``modify()``, not at run time."""
    from .lint import lint_recipe

    problems = [
        d for d in lint_recipe(recipe, records, framework)
        if d.severity is Severity.ERROR and d.code in BLOCKING_CODES
    ]
    if problems:
        raise RecipeError(problems)


def check_saved_state(state: Mapping[str, Any], version: int, steps_per_epoch: int, attached: bool) -> None:
    """Refuse a saved state that cannot continue this schedule, saying why."""
    if not attached:
        raise RuntimeError("call modify(model, optimizer, steps_per_epoch) before load_state_dict()")
    if state.get("version") != version:
        raise ValueError(f"unsupported recipe-spec state version {state.get('version')!r}")
    if state.get("steps_per_epoch") not in (None, steps_per_epoch):
        raise ValueError(
            f"the saved schedule ran at steps_per_epoch={state['steps_per_epoch']}, but modify() "
            f"was given {steps_per_epoch}; resume with the same steps_per_epoch"
        )


def non_finite_message(name: str, step: int, sparsity: float) -> str:
    return (
        f"parameter '{name}' holds NaN or infinite values at step {step}, when its mask is "
        f"updated to sparsity {sparsity:.4g}: the training diverged (lower the learning rate or "
        "check the loss) before pruning can rank weights"
    )


def global_mask_type_message(mask_type: Any) -> str:
    return (
        f"global sparsity ranks single weights across parameters; mask_type {mask_type!r} "
        "is not supported with it (use unstructured, or a layer-wise pruning modifier)"
    )
