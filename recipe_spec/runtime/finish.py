"""The warning at ``finalize()`` for a pruning modifier that started but whose masks do not
hold its final sparsity yet (training stopped before its last update): said at the caller's
line, naming the recipe file, and silent when the masks already hold the count the final
update would give (whole blocks, channels or N:M groups for a grouped ``mask_type``; all the
parameters together for a global ranking) and after one-shot ``apply()``."""

from __future__ import annotations

import math
from typing import Any

from ..pruning.magnitude import global_sparsity_of
from .preflight import caller_stacklevel

__all__ = ["warn_unfinished"]


def warn_unfinished(runtime: Any) -> None:
    """(``runtime``: a :class:`~recipe_spec.runtime.base.RecipeRuntime`.) Warn, at the caller's ``finalize()`` line, for each pruning modifier that started
    but whose masks do not hold its final sparsity yet (its last update was still ahead):
    not after one-shot :meth:`oneshot`, which applied every final target."""
    if runtime.plan is None or getattr(runtime, "_oneshot_applied", False):
        return
    import warnings

    started = {e.owner for e in runtime.masks.params.values()}
    for index, last in sorted(runtime.plan.updates_after(runtime.step_count).items()):
        if index not in started or _holds_final(runtime, index, last):
            continue
        m = runtime.recipe.modifiers[index]
        where = f"{runtime.recipe.path}:{m.span.line}" if runtime.recipe.path else f"line {m.span.line}"
        warnings.warn(
            f"{m.type} ({where}) has not reached its final sparsity: its last update is due "
            f"at step {last} (the first step at or after end_epoch), and training stopped "
            f"after {runtime.step_count} steps. Train at least {last + 1} steps, or end the "
            "modifier earlier.", UserWarning, stacklevel=caller_stacklevel(),
        )

def _holds_final(runtime: Any, index: int, last: int) -> bool:
    """Whether every mask of modifier ``index`` already holds as many zeros as its final
    sparsity update (at step ``last``) would give it: for a grouped ``mask_type`` (blocks,
    channels, N:M) the count that mask type reaches at that sparsity, and for a global
    ranking the count over all its parameters together."""
    assert runtime.plan is not None
    finals = [e for e in runtime.plan.iter_events(last, last + 1)
              if e.modifier == index and e.target == "sparsity"]
    if not finals:
        return False
    m = runtime.recipe.modifiers[index]
    mask_type, pooled = m.args.get("mask_type", "unstructured"), global_sparsity_of(m)
    total = [0, 0]  # zeros held, zeros due (global ranking)
    for event in finals:
        if not isinstance(event.value, (int, float)) or isinstance(event.value, bool):
            return False
        for name in runtime.names_for(index, event.params):
            entry = runtime.masks.params.get(name)
            if entry is None or entry.owner != index:
                continue
            zeros, size = runtime._mask_zeros(entry)
            due = (round(float(event.value) * size) if pooled or mask_type == "unstructured"
                   else _zeros_due(mask_type, float(event.value), runtime._mask_layout(entry)))
            if pooled:
                total[0] += zeros
                total[1] += size
            elif zeros < due:
                return False
    return not pooled or total[0] >= round(float(finals[-1].value) * total[1])



def _zeros_due(mask_type: Any, sparsity: float, layout: Any) -> int:
    """How many entries a ``mask_type`` mask of ``layout``'s shape prunes at ``sparsity``: the
    mask rules' own count (whole blocks, channels or N:M groups), from a mask computed on
    distinct magnitudes."""
    import numpy as np

    from ..masks.algorithms import compute_mask
    from ..masks.numpy_ops import NUMPY_OPS

    distinct = np.arange(1, math.prod(layout.shape) + 1, dtype=np.float64).reshape(layout.shape)
    try:
        mask = compute_mask(NUMPY_OPS, distinct, sparsity, mask_type, layout)
    except ValueError:  # a shape or target the mask type refuses: the update would have said so
        return round(sparsity * distinct.size)
    return int(distinct.size - np.count_nonzero(mask))
