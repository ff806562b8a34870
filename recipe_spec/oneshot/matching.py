"""How a one-shot modifier's ``targets`` and ``ignore`` name a module: compressed-tensors'
rule, shared by the pruning and the quantization modifiers, the smoothing mappings, the
sequential targets, the checkpoint checks and the cost estimate; the ``re:`` patterns run on
the linear-time matcher of :mod:`recipe_spec.text.targets`."""

from __future__ import annotations

from collections.abc import Sequence

from ..text.targets import regex_match, target_matches

__all__ = ["matches", "regex_match"]


def matches(target: str, name: str, classes: Sequence[str]) -> bool:
    """Whether ``target`` names module ``name`` (compressed-tensors: ``re:`` with
    ``re.match``, else the exact name or a class name).

    >>> matches("re:.*lm_head", "lm_head", ()), matches("lm_head", "lm_head", ()), matches("Linear", "x", ("Linear",))
    (True, True, True)
    """
    return target_matches(target, name, classes)
