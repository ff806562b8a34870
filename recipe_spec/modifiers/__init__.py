"""The modifier catalogue: one :class:`~recipe_spec.modifiers.spec.ModifierSpec` per modifier,
declared in the family modules of this package (``pruning``, ``second_order``,
``learning_rate``, ``training``, ``quantization``, ``distillation``; shared fragments in
``common``). Everything else (schemas, the schedule, validation, lint, reports, backend
support, docs) reads these declarations.

>>> spec("GMPruningModifier").schedule, sorted(spec("GMPruningModifier").needs)
('gradual', ['masks', 'scores:magnitude'])
>>> spec("NoSuchModifier") is None
True
"""

from __future__ import annotations

import functools
from typing import Any

from .spec import CAPABILITIES, EVENT_TARGETS, Arg, Look, ModifierSpec

__all__ = [
    "Arg", "Look", "ModifierSpec", "CAPABILITIES", "EVENT_TARGETS",
    "all_specs", "declared_in", "spec", "rule_keys", "schedule_of", "emits_of", "names", "pruning_names", "supported_by",
]


@functools.cache
def _catalogue() -> tuple[dict[str, ModifierSpec], dict[str, str]]:
    from . import distillation, learning_rate, pruning, quantization, second_order, training

    found: dict[str, ModifierSpec] = {}
    where: dict[str, str] = {}
    for module in (pruning, second_order, learning_rate, training, quantization, distillation):
        for s in module.SPECS:
            if s.name in found:
                raise RuntimeError(f"modifier {s.name} is declared twice")
            found[s.name] = s
            where[s.name] = module.__name__.rsplit(".", 1)[-1] + ".py"
    return dict(sorted(found.items())), where


def all_specs() -> dict[str, ModifierSpec]:
    """Every declared modifier by name, in name order."""
    return _catalogue()[0]


def declared_in(name: str) -> str:
    """The file of this package that declares modifier ``name`` (``"pruning.py"``).

    >>> declared_in("GMPruningModifier")
    'pruning.py'
    """
    return _catalogue()[1][name]


def spec(name: str) -> ModifierSpec | None:
    """The declaration of modifier ``name``, or None when there is none."""
    return all_specs().get(name)


def rule_keys(m: Any) -> set[Any]:
    """The arguments modifier ``m``'s own rules (its declaration's ``rules``) report on."""
    declared = spec(m.type)
    return {f.keys[0] for rule in (declared.rules if declared else ()) for f in rule(m) if f.keys}


def schedule_of(name: str) -> str | None:
    """The schedule kind modifier ``name`` compiles to; None when it has none or is unknown."""
    declared = spec(name)
    return declared.schedule if declared is not None else None


def emits_of(name: str) -> frozenset[str]:
    """The event targets modifier ``name`` emits (empty when it is unknown)."""
    declared = spec(name)
    return declared.emits if declared is not None else frozenset()


def names() -> list[str]:
    """Every declared modifier name, sorted."""
    return list(all_specs())


def pruning_names() -> frozenset[str]:
    """The modifiers that decide which weights are zero (``ModifierSpec.prunes``)."""
    return frozenset(n for n, s in all_specs().items() if s.prunes)


def supported_by(capabilities: frozenset[str] | set[str]) -> frozenset[str]:
    """The runtime modifiers a backend with ``capabilities`` runs: those whose every need it has.

    >>> sorted(supported_by({"lr"}))
    ['EpochRangeModifier', 'LearningRateFunctionModifier', 'LearningRateModifier', 'SetLearningRateModifier']
    """
    caps = frozenset(capabilities)
    return frozenset(n for n, s in all_specs().items() if s.runtime and s.needs <= caps)
