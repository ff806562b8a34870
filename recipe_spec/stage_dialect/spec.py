"""The parts a stage/group modifier is declared with: :class:`StageSpec` (one variant of a
modifier name over a range of tool releases), its arguments (:func:`arg`, :data:`BASE_ARGS`),
renamed and deprecated arguments, translations to the ``!Modifier`` dialect, and
:func:`declare`. The catalogue files (:mod:`.catalogue_prune`, :mod:`.catalogue_quant`,
:mod:`.catalogue_train`) declare with them; :mod:`.catalogue` assembles the catalogue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..modifiers.spec import ONESHOT_USES, Arg, Look, ModifierSpec
from .versions import Compat, ToolVersion, Version, in_range, versions_where

__all__ = ["arg", "BASE_ARGS", "Renamed", "Deprecation", "Translation", "StageSpec", "declare"]


def arg(name: str, description: str, tools: Mapping[str, str] | None = None, *, oneshot: str = "",
        **schema: Any) -> Arg:
    """An :class:`Arg` whose schema is ``{"description": ..., **schema}`` (a ``default`` there is
    the value a run takes when the recipe leaves the argument out); ``oneshot``: what
    :func:`recipe_spec.oneshot` does with it (:data:`~recipe_spec.modifiers.spec.ONESHOT_USES`)."""
    if oneshot not in ("", *ONESHOT_USES):
        raise ValueError(f"argument {name}: oneshot={oneshot!r} is not one of {', '.join(ONESHOT_USES)}")
    return Arg(name, {"description": description, **schema}, tools=dict(tools or {}), oneshot=oneshot)


#: Arguments of the base ``Modifier`` class, present on every modifier. ``group`` given
#: inside the arguments makes llm-compressor >= 0.7 fail (it passes ``group=`` itself).
BASE_ARGS: tuple[Arg, ...] = (
    arg("index", "Position of the modifier (set by the recipe parser).", oneshot="inert", type=["integer", "null"]),
    arg("group", "Group name (normally taken from the `<name>_modifiers` key).",
        {"sparseml": "", "llmcompressor": "<0.7"}, oneshot="inert", type=["string", "null"]),
    arg("start", "Start (epoch) of a training-time modifier; -1 = from the beginning.",
        oneshot="inert", type=["number", "null"], minimum=-1),
    arg("end", "End (epoch) of a training-time modifier; -1 = to the end.", oneshot="inert",
        type=["number", "null"],
        minimum=-1),
    arg("update", "Update interval (epochs) of a training-time modifier.", oneshot="inert", type=["number", "null"],
        minimum=-1),
    arg("requires_calibration_data", "Whether the modifier needs calibration data.",
        {"llmcompressor": ">=0.13"}, oneshot="inert", type="boolean"),
)


@dataclass(frozen=True)
class Renamed:
    """Where ``old`` is not accepted but ``new`` is, write ``new`` (``note`` says why)."""

    old: str
    new: str
    note: str = ""


@dataclass(frozen=True)
class Deprecation:
    """An argument still accepted in ``tools`` but with no (or a forced) effect."""

    arg: str
    tools: Mapping[str, str]
    message: str


@dataclass(frozen=True)
class Translation:
    """A core training-time modifier's arguments written for its ``!Modifier`` twin.

    ``refused``: reasons why some argument has no exact twin; when non-empty the modifier
    must be refused at run time rather than approximated (``args`` then holds what did map).
    """

    twin: str
    args: Mapping[str, Any]
    refused: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refused


#: The answers of StageSpec.args_in, required_in and deprecations_in, by (id of the
#: declaration, release), each stored with the declaration it is about (declarations hold
#: dicts, so they cannot be keys; a reused id is told apart).
_ARGS_IN: dict[tuple[int, ToolVersion], tuple[Any, Any]] = {}
_REQUIRED_IN: dict[tuple[int, ToolVersion], tuple[Any, Any]] = {}
_DEPRECATED_IN: dict[tuple[int, ToolVersion], tuple[Any, Any]] = {}


def _per_release(table: dict[tuple[int, ToolVersion], tuple[Any, Any]], spec: Any,
                 pair: ToolVersion, make: Callable[[str, Version], Any]) -> Any:
    """``make(tool, version)`` for ``spec`` in release ``pair``, worked out once."""
    found = table.get((id(spec), pair))
    if found is None or found[0] is not spec:
        found = table[(id(spec), pair)] = (spec, make(*pair))
    return found[1]


@dataclass(frozen=True)
class StageSpec:
    """One stage/group modifier (one meaning of a name).

    ``tools``: releases where it exists (tools map). ``required``: argument -> tools map of
    the releases that require it. ``renamed``/``deprecated``: see :class:`Renamed` and
    :class:`Deprecation`. ``quant``: argument -> ``"groups"`` (``config_groups``),
    ``"scheme"`` (preset or ``{PRESET: targets}``) or ``"args"`` (a QuantizationArgs mapping).
    ``twin``/``translate``: for training-time modifiers, the ``!Modifier`` twin and the pure
    function writing the core arguments as the twin's. ``renamed_to``: the modifier was
    renamed and this name exists in no release. ``instead``: argument -> what to write
    where the argument was removed. ``spec.runtime`` is False for one-shot
    modifiers (not run in a training loop). ``oneshot_needs``: the backend capabilities that
    running it in :func:`recipe_spec.oneshot` takes (empty: ``oneshot()`` does not run it).
    """

    spec: ModifierSpec
    tools: Mapping[str, str]
    required: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    renamed: tuple[Renamed, ...] = ()
    deprecated: tuple[Deprecation, ...] = ()
    quant: Mapping[str, str] = field(default_factory=dict)
    twin: str | None = None
    translate: Callable[[Mapping[str, Any], Compat | None], Translation] | None = None
    renamed_to: str | None = None
    instead: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""
    oneshot_needs: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def training(self) -> bool:
        """Training-time (runs inside a training loop) rather than one-shot."""
        return self.spec.runtime

    def exists_in(self, pair: ToolVersion) -> bool:
        tool, version = pair
        return tool in self.tools and in_range(self.tools[tool], version)

    def versions(self) -> list[ToolVersion]:
        """The releases where this modifier (this meaning of the name) exists."""
        return versions_where(self.tools)

    def args_in(self, pair: ToolVersion) -> Mapping[str, Arg]:
        """The arguments this modifier takes in a release, by name (do not modify)."""
        return _per_release(_ARGS_IN, self, pair, lambda tool, version: {
            a.name: a for a in self.spec.args
            if not a.tools or (tool in a.tools and in_range(a.tools[tool], version))
        })

    def required_in(self, pair: ToolVersion) -> list[str]:
        return list(_per_release(_REQUIRED_IN, self, pair, lambda tool, version: tuple(
            n for n, t in self.required.items() if tool in t and in_range(t[tool], version))))

    def deprecation_in(self, name: str, pair: ToolVersion) -> Deprecation | None:
        return self.deprecations_in(pair).get(name)

    def deprecations_in(self, pair: ToolVersion) -> Mapping[str, Deprecation]:
        """Argument -> its deprecation in a release (do not modify)."""
        def make(tool: str, version: Version) -> dict[str, Deprecation]:
            found: dict[str, Deprecation] = {}
            for d in self.deprecated:  # the first declaration of an argument speaks for it
                if tool in d.tools and in_range(d.tools[tool], version):
                    found.setdefault(d.arg, d)
            return found

        return _per_release(_DEPRECATED_IN, self, pair, make)


def declare(
    name: str, description: str, category: str, tools: Mapping[str, str],
    args: tuple[Arg, ...], *, training: bool = False, example: Mapping[str, Any] | None = None,
    **extra: Any,
) -> StageSpec:
    """A :class:`StageSpec` whose ModifierSpec gets the base arguments appended."""
    spec = ModifierSpec(
        name=name, description=description, category=category,
        args=(*args, *BASE_ARGS), example=dict(example or {}),
        look=Look(name.removesuffix("Modifier")), runtime=training,
        schema_extra={"additionalProperties": False},
    )
    return StageSpec(spec=spec, tools=dict(tools), **extra)
