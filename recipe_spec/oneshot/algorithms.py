"""The registry of one-shot algorithms: every folder of :mod:`recipe_spec.oneshot` imported
once, each algorithm by name (:data:`ALGORITHMS`) and by the modifier it runs
(:data:`BY_MODIFIER`). A new algorithm is a folder with an :class:`~.algorithm.Algorithm`
registered in its ``__init__`` and one line here.

>>> BY_MODIFIER["GPTQModifier"].name, ALGORITHMS["wanda"].modifiers
('gptq', ('WandaPruningModifier',))
"""

from __future__ import annotations

from .algorithm import Algorithm, OneShotModifier, algorithm_named
from .awq import AWQ_ALGORITHM
from .gptq import GPTQ_ALGORITHM
from .magnitude import CONSTANT, MAGNITUDE
from .rtn import ROUND_TO_NEAREST
from .smoothquant import SMOOTHQUANT
from .sparsegpt import SPARSEGPT
from .wanda import WANDA

__all__ = ["ALGORITHMS", "BY_MODIFIER", "algorithm_of"]

#: Every algorithm by name (:attr:`OneShotModifier.kind`), in the order a person reads them.
ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    SPARSEGPT, WANDA, MAGNITUDE, CONSTANT, GPTQ_ALGORITHM, ROUND_TO_NEAREST, SMOOTHQUANT, AWQ_ALGORITHM)}
#: The algorithm that runs each modifier.
BY_MODIFIER: dict[str, Algorithm] = {m: a for a in ALGORITHMS.values() for m in a.modifiers}


def algorithm_of(mod: OneShotModifier) -> Algorithm:
    """The algorithm that runs ``mod``."""
    return algorithm_named(mod.kind)
