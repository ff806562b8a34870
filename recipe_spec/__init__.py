"""recipe-spec: the maintained, framework-neutral home for model-compression recipes.

>>> import recipe_spec
>>> recipe = recipe_spec.load('''
... modifiers:
...   - !GMPruningModifier
...     params: __ALL_PRUNABLE__
...     init_sparsity: 0.05
...     final_sparsity: 0.85
...     start_epoch: 0
...     end_epoch: 40
...     update_frequency: 1
... ''')
>>> [m.type for m in recipe.modifiers]
['GMPruningModifier']

This package never imports torch, tensorflow or keras; backends load only when asked for.
"""

from __future__ import annotations

from .diagnostics.base import Diagnostic, RecipeError, Severity, Span
from .loader import check, load, loads
from .manager import ScheduledModifierManager
from .oneshot.api import oneshot
from .recipe.model import Group, Modifier, Recipe, Stage
from .registry import available_backends, get_backend
from .text.frozen import FrozenDict

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "load",
    "loads",
    "check",
    "Recipe",
    "Stage",
    "Group",
    "Modifier",
    "Diagnostic",
    "RecipeError",
    "Severity",
    "Span",
    "FrozenDict",
    "available_backends",
    "get_backend",
    "ScheduledModifierManager",
    "oneshot",
]

