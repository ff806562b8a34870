"""A rule's verdict about one modifier, before it has a position: :class:`Finding`.

Rules (schema checks, the rules of :mod:`recipe_spec.validation`, a modifier declaration's own
``rules``, lint's parameter rules) yield findings; :func:`recipe_spec.validation.positioned`
turns one into a diagnostic at the argument it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..diagnostics.base import Diagnostic
from ..diagnostics.codes import Code

if TYPE_CHECKING:
    from ..diagnostics.base import Severity
    from .model import Modifier, Recipe

__all__ = ["Finding"]


@dataclass(frozen=True)
class Finding:
    """A rule's verdict about one modifier: ``keys`` is the path of the argument at fault
    (empty for the modifier itself); ``on_key`` points at the argument's name, not its value."""

    code: Code
    message: str
    hint: str
    modifier: Modifier
    keys: tuple[Any, ...] = ()
    on_key: bool = False
    severity: Severity | None = None

    def __init__(
        self, code: Code, message: str, hint: str, modifier: Modifier, keys: tuple[Any, ...] = (),
        on_key: bool = False, severity: Severity | None = None,
    ) -> None:
        # written out: the generated __init__ of a frozen dataclass sets each field through
        # object.__setattr__, and rules make findings by the thousand
        self.__dict__.update(code=code, message=message, hint=hint, modifier=modifier, keys=keys,
                             on_key=on_key, severity=severity)


def positioned(f: Finding, recipe: Recipe) -> Diagnostic:
    """The diagnostic of finding ``f`` at the argument (or modifier) it names."""
    span = f.modifier.key_span(f.keys[0]) if f.on_key and f.keys else (
        f.modifier.value_span(*f.keys) if f.keys else f.modifier.span
    )
    code = f.code
    if code.__class__ is Code and span is not None:  # what Code.__call__ and in_file give, made once
        return Diagnostic(
            code.id, f.severity or code.severity, f.message, f.hint, recipe.path,
            span.line, span.column, span.end_line, span.end_column,
        )
    return code(f.message, f.hint, span, f.severity).in_file(recipe.path)
