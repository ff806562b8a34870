"""The old name of :mod:`recipe_spec.oneshot`, kept for old imports: ``last_report``,
``oneshot`` and ``apply_oneshot`` (write ``recipe_spec.oneshot.last_report()`` and
``recipe_spec.oneshot(...)``)."""

from __future__ import annotations

from recipe_spec.oneshot.api import apply_oneshot, oneshot
from recipe_spec.oneshot.reports import last_report

__all__ = ["oneshot", "apply_oneshot", "last_report"]
