"""What every check reports: a :class:`Diagnostic` (code, severity, message, span, hint), the
:class:`RecipeError` that carries them, and the registry of codes (:mod:`.codes`)."""

from .base import Diagnostic, RecipeError, Severity, Span

__all__ = ["Span", "Severity", "Diagnostic", "RecipeError"]
