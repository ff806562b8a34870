"""The last one-shot run's report, kept for :func:`recipe_spec.oneshot.last_report`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .pipeline import OneShotReport

__all__ = ["last_report", "keep_report"]

_LAST: list[OneShotReport] = []


def last_report() -> OneShotReport | None:
    """The report of the last :func:`recipe_spec.oneshot` run in this process (samples fed,
    pipelines, per-module sparsity and loss), None before the first."""
    return _LAST[-1] if _LAST else None


def keep_report(report: OneShotReport) -> None:
    """Keep ``report`` as the last run's (:func:`last_report`)."""
    _LAST[:] = [report]
