"""How a one-shot modifier's ``targets`` and ``ignore`` name a module: compressed-tensors'
rule, shared by the pruning and the quantization modifiers."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["matches"]


def matches(target: str, name: str, classes: Sequence[str]) -> bool:
    """Whether ``target`` names module ``name`` (compressed-tensors: ``re:`` with
    ``re.match``, else the exact name or a class name).

    >>> matches("re:.*lm_head", "lm_head", ()), matches("lm_head", "lm_head", ()), matches("Linear", "x", ("Linear",))
    (True, True, True)
    """
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return target == name or target in classes
