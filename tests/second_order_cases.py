"""What the second-order conformance tests of both backends share: recording every pruning
step (scores, masks, corrected weights) while a run goes on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def recorded() -> Iterator[list[Any]]:
    """Every scoring + mask update (M-FAC step, OBS recomputation) while inside, in order."""
    from recipe_spec.pruning.second_order import pruner as pruner_module

    results: list[Any] = []
    originals = {name: getattr(pruner_module, name) for name in ("mfac_step", "obs_step")}

    def wrap(fn: Any) -> Any:
        def step(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            results.append(result)
            return result
        return step

    for name, fn in originals.items():
        setattr(pruner_module, name, wrap(fn))
    try:
        yield results
    finally:
        for name, fn in originals.items():
            setattr(pruner_module, name, fn)
