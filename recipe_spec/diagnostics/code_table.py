"""The table every diagnostic code is registered in (:mod:`.codes` fills it; the parameter
codes, family ``P``, are in :mod:`.codes_params`)."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Diagnostic, Severity, Span

__all__ = ["Code", "CODES", "code", "register"]


@dataclass(frozen=True)
class Code:
    """A rule code: its identity, default severity and documentation."""

    id: str
    severity: Severity
    title: str
    why: str
    example: str = ""
    fix: str = ""

    def __call__(
        self,
        message: str,
        hint: str = "",
        span: Span | None = None,
        severity: Severity | None = None,
    ) -> Diagnostic:
        """A diagnostic of this code at ``span``."""
        d = Diagnostic(self.id, severity or self.severity, message, hint)
        return d.at(span)


CODES: dict[str, Code] = {}


def register(id: str, severity: str, title: str, why: str, example: str = "", fix: str = "") -> Code:
    c = Code(id, Severity(severity), title, why, example, fix)
    if id in CODES:
        raise RuntimeError(f"duplicate diagnostic code {id}")
    CODES[id] = c
    return c


def code(id: str) -> Code:
    """The :class:`Code` named ``id`` (``KeyError`` if there is none)."""
    return CODES[id]
