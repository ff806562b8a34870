"""What both backends' tests of shared Hessian products use: a count of the products a run
computes (:class:`recipe_spec.oneshot.shared.hessian.SharedInput`)."""

from __future__ import annotations

from typing import Any

import pytest

from recipe_spec.oneshot.shared.hessian import SharedInput


def count_products(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets, per call of ``SharedInput.product`` for the rest of the test, 1 when the
    call computed its product and 0 when it took one already computed for the same input."""
    counts: list[int] = []
    original = SharedInput.product

    def counting(self: SharedInput, x: Any, key: tuple[Any, ...], compute: Any) -> Any:
        before = self.computed
        out = original(self, x, key, compute)
        counts.append(self.computed - before)
        return out

    monkeypatch.setattr(SharedInput, "product", counting)
    return counts
