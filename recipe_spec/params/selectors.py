"""Parameter records, manifests and the resolution of a modifier's ``params``.

Backends describe a model as a list of neutral :class:`ParamRecord` values (name, shape,
layer type, prunable flag, portable alias); everything else, matching included, happens here.

Selectors (SPEC, "Parameter targeting"):

- an exact name, matching a record's ``name`` or its ``alias``;
- ``re:PATTERN``, Python ``re.match`` semantics (anchored at the start only, as in SparseML:
  ``re:.*conv`` matches any name containing ``conv``), against the name or the alias;
- ``__ALL__``: every parameter, biases and norms included; ``__ALL_PRUNABLE__``: the weights
  of Linear/Dense, Conv and ConvTranspose (1-3d), Embedding and their QAT variants.
  Tokens are case-insensitive and may stand alone or inside a list.

>>> records = [ParamRecord("fc1.weight", (4, 8), "Linear", True), ParamRecord("fc1.bias", (4,), "Linear", False)]
>>> [r.name for r in resolve(["re:fc1\\\\..*"], records).matched]
['fc1.weight', 'fc1.bias']
>>> resolve("__ALL_PRUNABLE__", records).names
('fc1.weight',)
"""

from __future__ import annotations

import bisect
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

try:  # Python 3.11+: the regex parser lives in re._parser
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

from ..text.patterns import LinearPattern, compile_pattern
from ..text.similar import CloseMatches
from .records import MAX_NAME, TOKENS, ParamRecord

__all__ = [
    "Resolution", "resolve", "compile_selectors", "ParamIndex", "closest_names", "names_matcher", "selector_items",
    "ModelParams",
]

def selector_items(params: Any) -> list[tuple[int | None, str]]:
    """``(index in the list or None, selector)`` for each selector of a ``params`` value."""
    if isinstance(params, str):
        return [(None, params)]
    if isinstance(params, (list, tuple)):
        return [(i, p) for i, p in enumerate(params) if isinstance(p, str)]
    return []


class ParamIndex:
    """The parameters of a model indexed for matching: built once, then every selector costs
    only the names that can match it (exact names by lookup, ``re:`` patterns with a literal
    prefix through a sorted range of names; only prefix-less patterns scan every name)."""

    def __init__(self, records: Sequence[ParamRecord]):
        self.records = list(records)
        by_name: dict[str, list[int]] = {}
        for i, r in enumerate(self.records):
            for name in r.names:
                by_name.setdefault(name, []).append(i)
        self.by_name = by_name
        self.sorted_names = sorted(by_name)
        self.prunable = [i for i, r in enumerate(self.records) if r.prunable]

    def select(self, selector: str, pattern: LinearPattern | None = None) -> list[int]:
        """Indexes of the records ``selector`` matches (``pattern``: its compiled regex)."""
        upper = selector.upper()
        if upper == "__ALL__":
            return list(range(len(self.records)))
        if upper == "__ALL_PRUNABLE__":
            return list(self.prunable)
        if not selector.startswith("re:"):
            return list(self.by_name.get(selector, ()))
        pat = pattern or compile_pattern(selector)
        prefix = "" if pat.flags & re.IGNORECASE else _literal_prefix(selector[3:])
        names = self.sorted_names
        lo = bisect.bisect_left(names, prefix) if prefix else 0
        hi = bisect.bisect_left(names, prefix + "\U0010ffff") if prefix else len(names)
        hits: list[int] = []
        for name in names[lo:hi]:
            if pat.match(name[:MAX_NAME]):
                hits.extend(self.by_name[name])
        return hits


def _literal_prefix(pattern: str) -> str:
    """The literal text every match of ``pattern`` (with re.match) starts with."""
    out = []
    with warnings.catch_warnings():  # re's FutureWarning on "[[", said when it compiled
        warnings.simplefilter("ignore")
        parsed = sre_parse.parse(pattern)
    for op, arg in parsed:
        if op == sre_constants.LITERAL:
            out.append(chr(arg))
        else:
            break
    return "".join(out)


def compile_selectors(selectors: Iterable[str]) -> dict[str, LinearPattern]:
    """The compiled regex of every ``re:`` selector (raises :class:`PatternError`)."""
    return {s: compile_pattern(s) for s in selectors if s.startswith("re:")}


@dataclass(frozen=True)
class Resolution:
    """What a ``params`` value selects: the matched records (in model order) and, for each
    selector, how many records it matched."""

    matched: tuple[ParamRecord, ...]
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.matched)

    @property
    def unmatched(self) -> list[str]:
        """Exact names and ``re:`` patterns that matched nothing (tokens never count)."""
        return [s for s, n in self.counts.items() if n == 0 and s.upper() not in TOKENS]


def resolve(params: Any, records: Sequence[ParamRecord] | ParamIndex) -> Resolution:
    """The records that ``params`` (a selector or a list of them) selects.

    A record matches when any selector matches its name or its alias. Raises
    :class:`PatternError` for a ``re:`` selector that does not compile or is unsafe.
    Pass a :class:`ParamIndex` when resolving many selectors against one model.
    """
    index = records if isinstance(records, ParamIndex) else ParamIndex(records)
    patterns = compile_selectors(s for _, s in selector_items(params))
    hit: set[int] = set()
    counts: dict[str, int] = {}
    for _, selector in selector_items(params):
        found = set(index.select(selector, patterns.get(selector)))
        counts[selector] = len(found)
        hit |= found
    return Resolution(tuple(index.records[i] for i in sorted(hit)), counts)


def names_matcher(records: Sequence[ParamRecord]) -> CloseMatches:
    """The records' names, sorted, to ask :func:`closest_names` about many selectors."""
    return CloseMatches(sorted({name for r in records for name in r.names}))


def closest_names(selector: str, records: Sequence[ParamRecord], n: int = 3,
                  matcher: CloseMatches | None = None) -> list[str]:
    """The real names closest to a selector that matched nothing (for the error's hint).
    ``matcher``: :func:`names_matcher` of ``records``, made once for many selectors."""
    target = selector[3:] if selector.startswith("re:") else selector
    if matcher is None:
        matcher = names_matcher(records)
    names = matcher.candidates
    close = matcher.get(target, n=n, cutoff=0.5)
    if close:
        return close
    # a pattern: the names sharing its longest literal prefix
    prefix = _literal_prefix(target) if selector.startswith("re:") else target
    while prefix:
        i = bisect.bisect_left(names, prefix)
        found = [x for x in names[i:i + n] if x.startswith(prefix)]
        if found:
            return found
        prefix = prefix[:-1]
    return names[:n]


class ModelParams:
    """A model's parameters indexed for the recipe: ``names_for`` resolves a modifier's
    selector once and remembers the answer (a runtime asks at every event)."""

    def __init__(self, records: Sequence[ParamRecord]):
        self.index = ParamIndex(records)
        self._resolved: dict[tuple[int, Any], list[str]] = {}

    @property
    def records(self) -> list[ParamRecord]:
        return self.index.records

    def names_for(self, modifier: int, selector: Any) -> list[str]:
        """The parameter names modifier ``modifier``'s ``selector`` resolves to."""
        key = (modifier, selector if isinstance(selector, (str, tuple)) else repr(selector))
        if key not in self._resolved:
            self._resolved[key] = list(resolve(selector, self.index).names) if selector is not None else []
        return self._resolved[key]
