"""What ``recipe-spec convert`` is asked for and what it answers.

:class:`Target` is the ``--to`` choice: the ``!Modifier`` dialect (``modifier``), the
stage/group dialect read as the backends read it (``stage``, or its other name ``core``), or
the stage/group dialect of one tool release (``llmcompressor==0.13``, ``sparseml==1.7``).
:class:`Conversion` holds the converted text, or the :class:`Refusal` s that stopped it, each
at the line and column of the source file it is about, saying what has no equivalent and
what to do; :class:`Note` s say what the user must carry over by hand (a setting that moved to
the ``oneshot()`` call, a training length).

>>> Target.parse("llmcompressor==0.13").label, Target.parse("modifier").dialect
('llm-compressor 0.13', 'modifier')
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..diagnostics.base import Diagnostic
from ..stage_dialect import Compat

__all__ = ["Target", "Refusal", "Note", "Conversion", "DIALECTS"]

#: The ``--to`` words naming a dialect (``core`` is another name for ``stage``).
DIALECTS = {"modifier": "modifier", "stage": "stage", "core": "stage"}


@dataclass(frozen=True)
class Target:
    """``dialect``: ``"modifier"`` or ``"stage"``; ``compat``: the release of a stage/group
    target (None: as recipe-spec's backends read the dialect, checked against every
    release)."""

    dialect: str
    compat: Compat | None = None

    @classmethod
    def parse(cls, text: str) -> Target:
        """``modifier``, ``stage``/``core`` or ``TOOL[==VERSION]``; ``ValueError`` listing the
        choices otherwise."""
        word = text.strip().lower()
        if word in DIALECTS:
            return cls(DIALECTS[word])
        try:
            return cls("stage", Compat.parse(text))
        except ValueError as exc:
            raise ValueError(f"{exc}; or a dialect: modifier, stage") from None

    @property
    def label(self) -> str:
        if self.compat is not None:
            return self.compat.label
        return "the !Modifier dialect" if self.dialect == "modifier" else "the stage/group dialect"


@dataclass(frozen=True)
class Refusal:
    """Something of the source at ``line``:``column`` that has no exact equivalent in the
    target: ``what`` and ``how`` to go on."""

    line: int
    column: int
    what: str
    how: str

    def format(self, path: str) -> str:
        return f"{path}:{self.line}:{self.column}: cannot convert: {self.what}\n    hint: {self.how}"


@dataclass(frozen=True)
class Note:
    """What the converted recipe no longer says and the user must do (at the source's
    ``line``)."""

    line: int
    message: str

    def format(self, path: str) -> str:
        return f"{path}:{self.line}: note: {self.message}"


@dataclass
class Conversion:
    """The result of converting one recipe: ``text`` (None when refused), ``refusals``,
    ``notes``, and ``findings``, what ``recipe-spec validate`` says of ``text`` for the
    target (never an error)."""

    path: str
    source_dialect: str
    target: Target
    text: str | None = None
    refusals: list[Refusal] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    findings: list[Diagnostic] = field(default_factory=list)
    evaluated: bool = False

    @property
    def ok(self) -> bool:
        return self.text is not None and not self.refusals
