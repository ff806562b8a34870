"""The tools that read stage/group recipes, their releases, and version ranges.

Two tools read the stage/group dialect: SparseML 1.6 to 1.9 (``sparseml.core``)
and llm-compressor (every minor release from 0.1). Catalogue entries say where something
exists with a *tools map*: tool name -> version range string (``""`` means every release of
that tool; a tool missing from the map does not have it).

>>> Version.parse("0.13") > Version.parse("0.9")
True
>>> in_range(">=0.7,<0.12", Version.parse("0.11"))
True
>>> Compat.parse("llmcompressor==0.8").label
'llm-compressor 0.8'
>>> summarize(versions_where({"llmcompressor": ">=0.8"}))
'llm-compressor ≥0.8'
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = [
    "Version", "Compat", "TOOLS", "TOOL_LABELS", "RELEASES", "ToolVersion",
    "in_range", "all_versions", "versions_where", "summarize", "newest", "scope", "tools_in_scope", "affects",
]


class Version(tuple[int, ...]):
    """A dotted release number compared as a tuple of integers (``0.9 < 0.13``).

    A tuple itself, so that the release pairs keying dictionaries everywhere hash and
    compare at C speed."""

    __slots__ = ()

    def __new__(cls, parts: tuple[int, ...]) -> Version:
        return tuple.__new__(cls, parts)

    @property
    def parts(self) -> tuple[int, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"Version({tuple(self)!r})"

    @classmethod
    def parse(cls, text: str) -> Version:
        """``"1.8"`` -> ``Version((1, 8))``; a ValueError for anything but dotted integers."""
        return _parse_version(text) if cls is Version else cls(_parse_version(text).parts)

    def __str__(self) -> str:
        return ".".join(map(str, self))


@functools.lru_cache(maxsize=256)
def _parse_version(text: str) -> Version:
    if not re.fullmatch(r"\d+(\.\d+)*", text.strip()):
        raise ValueError(f"not a version number: {text!r}")
    return Version(tuple(int(p) for p in text.strip().split(".")))


#: The released minor versions of each tool, oldest first (verified against the tags of
#: neuralmagic/sparseml and vllm-project/llm-compressor; 0.14 is the release the one-shot
#: conformance data was made with, 0.14.0.1, whose catalogue is 0.13's).
RELEASES: dict[str, tuple[Version, ...]] = {
    "sparseml": tuple(Version.parse(v) for v in ("1.6", "1.7", "1.8", "1.9")),
    "llmcompressor": tuple(Version.parse(f"0.{m}") for m in range(1, 15)),
}

#: Tool names as the CLI spells them, in timeline order (llm-compressor continues SparseML).
TOOLS: tuple[str, ...] = ("sparseml", "llmcompressor")

#: Tool names as messages spell them.
TOOL_LABELS: dict[str, str] = {"sparseml": "SparseML", "llmcompressor": "llm-compressor"}

#: One release of one tool.
ToolVersion = tuple[str, Version]

_CLAUSE = re.compile(r"^(>=|<=|==|!=|>|<)?\s*(\d+(?:\.\d+)*)$")


@functools.lru_cache(maxsize=4096)  # the catalogue asks the same few questions all the time
def in_range(spec: str, version: Version) -> bool:
    """Whether ``version`` satisfies ``spec``: comma-joined clauses such as ``">=0.7,<0.12"``
    (operators ``>= <= > < == !=``; a bare number means ``==``; ``""`` matches everything).

    >>> [in_range("<=0.7", Version.parse(v)) for v in ("0.7", "0.8")]
    [True, False]
    """
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = _CLAUSE.match(clause)
        if m is None:
            raise ValueError(f"bad version range clause {clause!r} in {spec!r}")
        op, bound = m.group(1) or "==", Version.parse(m.group(2))
        ok = {
            ">=": version >= bound, "<=": version <= bound, ">": version > bound,
            "<": version < bound, "==": version == bound, "!=": version != bound,
        }[op]
        if not ok:
            return False
    return True


#: The tools a check without ``--compat`` is about (:func:`scope`); every tool by default.
_SCOPE: ContextVar[tuple[str, ...]] = ContextVar("recipe_spec_tools_in_scope", default=TOOLS)


@contextmanager
def scope(tools: Iterable[str]) -> Iterator[None]:
    """Within the block, "every release" means every release of ``tools`` only: what
    :func:`all_versions`, :func:`versions_where` and :func:`summarize` answer. Used when the
    tool a recipe was written for is known (inferred from the recipe) and no ``--compat``
    chose one release.

    >>> with scope(["llmcompressor"]):
    ...     summarize(versions_where({"sparseml": "", "llmcompressor": "<=0.4"}))
    'llm-compressor ≤0.4'
    """
    chosen = tuple(t for t in TOOLS if t in set(tools))
    token = _SCOPE.set(chosen or TOOLS)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def tools_in_scope() -> tuple[str, ...]:
    """The tools "every release" covers here (:func:`scope`)."""
    return _SCOPE.get()


def all_versions() -> list[ToolVersion]:
    """Every known release of every tool in scope (:func:`scope`; by default every tool),
    SparseML first, each oldest first."""
    return [(tool, v) for tool in _SCOPE.get() for v in RELEASES[tool]]


#: Every release of every tool, whatever the scope (the timeline).
TIMELINE: tuple[ToolVersion, ...] = tuple((tool, v) for tool in TOOLS for v in RELEASES[tool])


def versions_where(tools_map: Mapping[str, str]) -> list[ToolVersion]:
    """The releases a tools map covers, in :func:`all_versions` order.

    >>> [str(v) for _, v in versions_where({"sparseml": ">=1.8"})]
    ['1.8', '1.9']
    """
    for tool in tools_map:
        if tool not in RELEASES:
            raise ValueError(f"unknown tool {tool!r}; valid: {', '.join(TOOLS)}")
    return [(t, v) for t, v in all_versions() if t in tools_map and in_range(tools_map[t], v)]


def newest(tool: str) -> Version:
    """The newest known release of ``tool``."""
    return RELEASES[tool][-1]


def _runs(tool: str, chosen: set[Version]) -> list[str]:
    releases = RELEASES[tool]
    runs: list[list[int]] = []
    for i, v in enumerate(releases):
        if v in chosen:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
    out = []
    for run in runs:
        first, last = releases[run[0]], releases[run[-1]]
        if run[0] == 0 and run[-1] == len(releases) - 1:
            out.append("")
        elif len(run) == 1:
            out.append(str(first))
        elif run[0] == 0:
            out.append(f"≤{last}")
        elif run[-1] == len(releases) - 1:
            out.append(f"≥{first}")
        else:
            out.append(f"{first}–{last}")
    return out


def summarize(pairs: Iterable[ToolVersion]) -> str:
    """A short human phrase for a set of releases, e.g. ``"SparseML 1.8–1.9, llm-compressor
    ≤0.7"``; ``"every version"`` when it is all of them, ``""`` when it is none.

    >>> summarize(all_versions())
    'every version'
    >>> summarize([("sparseml", Version.parse("1.6")), ("sparseml", Version.parse("1.7"))])
    'SparseML ≤1.7'
    """
    return _summarize(frozenset(pairs), _SCOPE.get())


@functools.lru_cache(maxsize=2048)  # messages name the same few sets of releases again and again
def _summarize(chosen: frozenset[ToolVersion], tools: tuple[str, ...]) -> str:
    if chosen >= {(t, v) for t in tools for v in RELEASES[t]}:
        return "every version"
    parts = []
    for tool in TOOLS:
        runs = _runs(tool, {v for t, v in chosen if t == tool})
        if runs:
            label = TOOL_LABELS[tool]
            parts.append(label if runs == [""] else f"{label} {', '.join(runs)}")
    return ", ".join(parts)


@dataclass(frozen=True)
class Compat:
    """The tool release a recipe is checked against (the CLI's ``--compat``)."""

    tool: str
    version: Version

    @classmethod
    def parse(cls, text: str) -> Compat:
        """``"sparseml"``, ``"sparseml==1.8"``, ``"llmcompressor"``, ``"llmcompressor==0.13"``;
        no version means the newest. Unknown tools or versions raise a ValueError that lists
        the valid choices.

        >>> str(Compat.parse("sparseml"))
        'sparseml==1.9'
        """
        tool, sep, ver = text.strip().partition("==")
        tool = tool.strip().lower().replace("-", "").replace("_", "")
        if tool not in RELEASES:
            raise ValueError(
                f"unknown tool {text.strip()!r}; valid: "
                + ", ".join(f"{t}[=={'|'.join(str(v) for v in RELEASES[t])}]" for t in TOOLS)
            )
        if not sep:
            return cls(tool, newest(tool))
        try:
            parsed = Version.parse(ver)
        except ValueError:
            parsed = None
        if parsed is not None and len(parsed.parts) > 2:
            parsed = Version(parsed.parts[:2])  # 0.7.1 reads as its minor release 0.7
        if parsed not in RELEASES[tool]:
            raise ValueError(
                f"unknown {TOOL_LABELS[tool]} version {ver.strip()!r}; valid: "
                + ", ".join(str(v) for v in RELEASES[tool])
            )
        return cls(tool, parsed)

    @property
    def pair(self) -> ToolVersion:
        return (self.tool, self.version)

    @property
    def label(self) -> str:
        """``"SparseML 1.8"`` / ``"llm-compressor 0.13"``."""
        return f"{TOOL_LABELS[self.tool]} {self.version}"

    def __str__(self) -> str:
        return f"{self.tool}=={self.version}"


def affects(tools: Mapping[str, str], compat: Compat | None) -> tuple[bool, str]:
    """Whether the releases a tools map covers include the chosen one (or, without a choice,
    any release in scope), and those releases in words.

    >>> affects({"llmcompressor": ">=0.11"}, None)
    (True, 'llm-compressor ≥0.11')
    """
    where = versions_where(tools)
    if compat is None:
        return bool(where), summarize(where)
    return compat.pair in where, compat.label
