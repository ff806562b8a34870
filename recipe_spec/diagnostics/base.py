"""Diagnostics: what went wrong, where, and how to fix it.

A :class:`Diagnostic` is a frozen value, never an exception. Code that checks a recipe
yields diagnostics; :class:`RecipeError` carries them when loading cannot go on.

Positions are 1-based lines and columns of the file the user edits (for Markdown recipe
cards, the line in the ``.md`` file, not in the extracted front matter).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Span", "Severity", "Diagnostic", "RecipeError"]


@dataclass(frozen=True, slots=True)
class Span:
    """A region of a source file: 1-based ``line``/``column``, end exclusive.

    >>> Span(3, 5, 3, 9)
    Span(line=3, column=5, end_line=3, end_column=9)
    """

    line: int
    column: int
    end_line: int
    end_column: int

    # Written out: the generated __init__ of a frozen dataclass sets each field through
    # object.__setattr__; spans and diagnostics are made by the thousand.
    def __init__(self, line: int, column: int, end_line: int, end_column: int) -> None:
        _span_line(self, line)
        _span_column(self, column)
        _span_end_line(self, end_line)
        _span_end_column(self, end_column)

    @classmethod
    def point(cls, line: int, column: int = 1) -> Span:
        """A zero-width span at ``line:column``."""
        return cls(line, column, line, column)


class Severity(str, enum.Enum):
    """How bad a diagnostic is. Only ``error`` makes ``recipe-spec validate`` exit 1."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding about a recipe.

    ``code`` is a family letter plus three digits (``Y`` YAML syntax, ``S`` recipe structure,
    ``V`` variables and expressions, ``M`` modifier arguments, ``E`` epochs and schedules,
    ``P`` parameter patterns, ``B`` backend support). Every code has a page in ``docs/rules/``.
    """

    code: str
    severity: Severity
    message: str
    hint: str = ""
    file: str | None = None
    line: int = 1
    column: int = 1
    end_line: int | None = None
    end_column: int | None = None

    def __init__(
        self, code: str, severity: Severity, message: str, hint: str = "", file: str | None = None,
        line: int = 1, column: int = 1, end_line: int | None = None, end_column: int | None = None,
    ) -> None:
        _d_code(self, code)
        _d_severity(self, severity)
        _d_message(self, message)
        _d_hint(self, hint)
        _d_file(self, file)
        _d_line(self, line)
        _d_column(self, column)
        _d_end_line(self, end_line)
        _d_end_column(self, end_column)

    def at(self, span: Span | None) -> Diagnostic:
        """This diagnostic moved to ``span`` (unchanged when ``span`` is None)."""
        if span is None:
            return self
        return self.__class__(
            self.code, self.severity, self.message, self.hint, self.file,
            span.line, span.column, span.end_line, span.end_column,
        )

    def in_file(self, file: str | None) -> Diagnostic:
        return self.__class__(
            self.code, self.severity, self.message, self.hint, file,
            self.line, self.column, self.end_line, self.end_column,
        )

    def format(self) -> str:
        """``path:line:col: CODE message`` followed by the hint, as the CLI prints it."""
        where = f"{self.file or '<string>'}:{self.line}:{self.column}"
        text = f"{where}: {self.code} [{self.severity}] {self.message}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text

    def to_json(self) -> dict[str, object]:
        return {
            "code": self.code,
            "severity": str(self.severity),
            "message": self.message,
            "hint": self.hint,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line if self.end_line is not None else self.line,
            "end_column": self.end_column if self.end_column is not None else self.column,
        }


_span_line, _span_column, _span_end_line, _span_end_column = (
    getattr(Span, f).__set__ for f in ("line", "column", "end_line", "end_column")
)
_d_code, _d_severity, _d_message, _d_hint, _d_file, _d_line, _d_column, _d_end_line, _d_end_column = (
    getattr(Diagnostic, f).__set__ for f in (
        "code", "severity", "message", "hint", "file", "line", "column", "end_line", "end_column"
    )
)


class RecipeError(ValueError):
    """A recipe could not be loaded. ``diagnostics`` says every reason found, with positions.

    ``str(error)`` lists them as ``path:line:col: CODE message`` lines with hints.
    """

    def __init__(self, diagnostics: Sequence[Diagnostic]):
        if not diagnostics:
            raise ValueError("RecipeError needs at least one diagnostic")
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics)
        super().__init__("\n".join(d.format() for d in self.diagnostics))

    @property
    def first(self) -> Diagnostic:
        return self.diagnostics[0]


def errors_in(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """The diagnostics of error severity."""
    return [d for d in diagnostics if d.severity is Severity.ERROR]
