"""The registry of one-shot algorithms: every folder of :mod:`recipe_spec.oneshot` imported
once, each algorithm by name (:data:`ALGORITHMS`) and by the modifier it runs
(:data:`BY_MODIFIER`). A new algorithm is a folder with an :class:`~.algorithm.Algorithm`
registered in its ``__init__`` and its name in the import here.

>>> BY_MODIFIER["GPTQModifier"].name, ALGORITHMS["wanda"].modifiers
('gptq', ('WandaPruningModifier',))
"""

from __future__ import annotations

# each folder registers its algorithms when imported: a new one is one more name here
from . import (  # noqa: F401
    autoround,
    awq,
    gptq,
    magnitude,
    quip,
    reap,
    rtn,
    smoothquant,
    sparsegpt,
    spinquant,
    wanda,
)
from .algorithm import Algorithm, OneShotModifier, algorithm_named, registered

__all__ = ["ALGORITHMS", "BY_MODIFIER", "algorithm_of"]

#: Every algorithm by name (:attr:`OneShotModifier.kind`).
ALGORITHMS: dict[str, Algorithm] = registered()
#: The algorithm that runs each modifier.
BY_MODIFIER: dict[str, Algorithm] = {m: a for a in ALGORITHMS.values() for m in a.modifiers}


def algorithm_of(mod: OneShotModifier) -> Algorithm:
    """The algorithm that runs ``mod``."""
    return algorithm_named(mod.kind)
