"""The typed object model of a loaded recipe: Recipe -> Stage -> Group -> Modifier.

Every value is immutable (mappings are :class:`~recipe_spec.text.frozen.FrozenDict`, lists are
tuples) and every modifier remembers where each of its values was written, so later checks
can point at the exact line and column.

Equality is semantic: two recipes are equal when they have the same stages, groups, modifier
types, arguments as written, variables and metadata, wherever they came from.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..diagnostics.base import Diagnostic, Span
from ..text.frozen import FrozenDict

if TYPE_CHECKING:
    from ..text.nodes import Document
    from ..text.source import Source

__all__ = ["Modifier", "Group", "Stage", "Recipe", "DialectName"]

Path = tuple[Any, ...]

#: Former names of a dialect, still equal to it (with a DeprecationWarning).
_FORMER_NAMES = {"stage": "core"}


class DialectName(str):
    """The name of a recipe's dialect: ``"modifier"`` or ``"stage"``.

    A plain string, except that the stage/group dialect's former name ``"core"`` still compares
    equal to ``"stage"``, with a :class:`DeprecationWarning`, so that code written against
    earlier releases keeps working while it moves to the one name.

    >>> import warnings
    >>> name = DialectName("stage")
    >>> name == "stage", name == "modifier", str(name)
    (True, False, 'stage')
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     name == "core"
    True
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str) and _FORMER_NAMES.get(str(self)) == str(other):
            warnings.warn(f"the dialect {str(other)!r} is now called {str(self)!r}; compare with {str(self)!r}",
                          DeprecationWarning, stacklevel=2)
            return True
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


_FORMER_NAMES_TO_NOW = {former: now for now, former in _FORMER_NAMES.items()}


@dataclass(frozen=True, eq=False)
class Modifier:
    """One modifier of a recipe.

    ``type`` is its name (``"GMPruningModifier"``); ``args`` its arguments with every variable
    and ``eval(...)`` expression evaluated; ``raw_args`` the arguments as written.

    >>> from recipe_spec import load
    >>> m = load("n: 4\\nmodifiers:\\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: eval(n)}").modifiers[0]
    >>> m.type, dict(m.args), m.raw_args["end_epoch"], m.span.line
    ('EpochRangeModifier', {'start_epoch': 0, 'end_epoch': 4}, 'eval(n)', 3)
    """

    type: str
    args: FrozenDict
    raw_args: FrozenDict
    group: str
    stage: str | None = None
    span: Span = field(default_factory=lambda: Span.point(1))
    path: Path = ()
    args_path: Path = ()
    document: Document | None = field(default=None, repr=False)
    file: str | None = field(default=None, repr=False)

    def value_span(self, *keys: Any) -> Span:
        """Where the argument at ``keys`` (e.g. ``("params", 2)``) was written.

        Falls back to the closest enclosing value, then to the modifier itself.
        """
        if self.document is not None:
            loc = self.document.loc(self.args_path + keys)
            if loc is not None:
                return loc.span
        return self.span

    def key_span(self, key: str) -> Span:
        """Where the argument name ``key`` was written (the modifier itself if absent)."""
        if self.document is not None:
            loc = self.document.locs.get(self.args_path + (key,))
            if loc is not None and loc.key_span is not None:
                return loc.key_span
        return self.span

    def _key(self) -> tuple[Any, ...]:
        return (self.type, self.raw_args, self.group, self.stage)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Modifier):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.type, self.raw_args))


@dataclass(frozen=True, eq=False)
class Group:
    """A modifier group: a top-level (or stage-level) key whose name contains ``modifiers``."""

    name: str
    modifiers: tuple[Modifier, ...]
    span: Span = field(default_factory=lambda: Span.point(1))

    def _key(self) -> tuple[Any, ...]:
        return (self.name, tuple(m._key() for m in self.modifiers))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Group) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self.name)


@dataclass(frozen=True, eq=False)
class Stage:
    """A stage of a staged recipe, or the single unnamed stage (``name is None``) of a plain one.

    ``variables`` are the stage's own variables, evaluated; they shadow the recipe's globals
    inside this stage's modifiers.
    """

    name: str | None
    groups: tuple[Group, ...]
    variables: FrozenDict = field(default_factory=FrozenDict)
    raw_variables: FrozenDict = field(default_factory=FrozenDict)
    metadata: FrozenDict | None = None
    span: Span = field(default_factory=lambda: Span.point(1))

    @cached_property
    def modifiers(self) -> tuple[Modifier, ...]:
        """Every modifier of the stage, in file order."""
        return tuple(m for g in self.groups for m in g.modifiers)

    def _key(self) -> tuple[Any, ...]:
        return (self.name, tuple(g._key() for g in self.groups), self.raw_variables, self.metadata)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stage) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self.name)


@dataclass(frozen=True, eq=False)
class Recipe:
    """A loaded recipe. Build one with :func:`recipe_spec.load`.

    - ``modifiers``: every modifier of every stage, in file order;
    - ``stages``: one unnamed stage for a plain recipe, the named stages of a staged one;
    - ``variables`` / ``raw_variables``: top-level variables, evaluated / as written;
    - ``version`` and ``metadata`` (the ``version`` and ``__metadata__`` keys);
    - ``warnings``: diagnostics of warning or info severity found while loading;
    - ``dialect``: ``"modifier"`` for SparseML's training-time ``!Modifier`` lists,
      ``"stage"`` for the stage/group recipes of SparseML 1.6+ and llm-compressor
      (``ModifierName: {args}`` mappings; see docs/stage-dialect.md). A
      :class:`DialectName`: the former name ``"core"`` still compares equal to ``"stage"``,
      with a :class:`DeprecationWarning`.
    """

    stages: tuple[Stage, ...]
    variables: FrozenDict = field(default_factory=FrozenDict)
    raw_variables: FrozenDict = field(default_factory=FrozenDict)
    version: Any = None
    metadata: FrozenDict | None = None
    staged: bool = False
    path: str | None = None
    source: Source | None = field(default=None, repr=False)
    document: Document | None = field(default=None, repr=False)
    warnings: tuple[Diagnostic, ...] = ()
    dialect: str = "modifier"

    def __post_init__(self) -> None:
        name = _FORMER_NAMES_TO_NOW.get(str(self.dialect), str(self.dialect))
        object.__setattr__(self, "dialect", DialectName(name))

    @cached_property
    def modifiers(self) -> tuple[Modifier, ...]:
        """Every modifier of every stage, in file order."""
        return tuple(m for s in self.stages for m in s.modifiers)

    def __iter__(self) -> Iterator[Modifier]:
        return iter(self.modifiers)

    def stage(self, name: str | None) -> Stage:
        """The stage called ``name`` (``KeyError`` naming the stages there are)."""
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage {name!r}; the recipe has {[s.name for s in self.stages]}")

    def to_yaml(self, evaluated: bool = False, style: str = "recipe") -> str:
        """The recipe as YAML text.

        - ``evaluated=False``: variables and expressions as written; loads back to an equal
          :class:`Recipe`.
        - ``evaluated=True``: every variable and expression inlined as its value.
        - ``style="sparseml"``: SparseML's serialized form (``version: 1.1.0``, one
          ``modifiers:`` list per stage, evaluated values), readable by SparseML itself.
        """
        from .serialize import to_yaml

        return to_yaml(self, evaluated=evaluated, style=style)

    def plan(self, steps_per_epoch: int) -> Any:
        """The schedule of this recipe at ``steps_per_epoch``: a
        :class:`recipe_spec.schedule.Plan` (see docs/schedule.md)."""
        from ..schedule import compile_plan

        return compile_plan(self, steps_per_epoch)

    def compile(self, backend: str, **options: Any) -> Any:
        """A manager that runs this recipe on ``backend`` (``"torch"`` or ``"keras"``).

        The backend, and its framework, are imported only now.
        """
        from ..registry import get_backend

        return get_backend(backend).compile(self, **options)

    def _key(self) -> tuple[Any, ...]:
        return (
            self.dialect,
            self.staged,
            tuple(s._key() for s in self.stages),
            self.raw_variables,
            self.version,
            self.metadata,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Recipe) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(len(self.stages))

    def __repr__(self) -> str:
        where = f" from {self.path}" if self.path else ""
        return f"<Recipe{where}: {len(self.modifiers)} modifiers in {len(self.stages)} stage(s)>"

