"""What every backend runtime shares, framework-free: :class:`~.base.RecipeRuntime` (the event
dispatch and saved state), the checks before training (:mod:`.preflight`), resuming
(:mod:`.resume`), mixed precision and distillation.
"""

from ..params.selectors import ModelParams
from ..pruning.magnitude import global_mask_type_message, global_sparsity_of, non_finite_message
from .base import (
    RecipeRuntime,
    check_saved_state,
)
from .preflight import check_backend_runs, check_recipe_fits

__all__ = [
    "global_mask_type_message",
    "global_sparsity_of",
    "non_finite_message",
    "RecipeRuntime",
    "ModelParams",
    "check_recipe_fits",
    "check_backend_runs",
    "check_saved_state",
]
