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
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

try:  # Python 3.11+: the regex parser lives in re._parser
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

__all__ = [
    "ParamRecord",
    "Resolution",
    "PatternError",
    "TOKENS",
    "resolve",
    "compile_selectors",
    "ParamIndex",
    "compile_pattern",
    "closest_names",
    "selector_items",
    "portable_alias",
    "read_manifest",
    "write_manifest",
    "MANIFEST_VERSION",
]

MANIFEST_VERSION = 1
TOKENS = ("__ALL__", "__ALL_PRUNABLE__")
#: The longest name a pattern is matched against; longer names are cut (bounds regex time).
MAX_NAME = 1000


@dataclass(frozen=True, slots=True)
class ParamRecord:
    """One parameter of a model, framework-free.

    ``name``: the framework's own name (PyTorch ``fc1.weight``; Keras path relative to the
    model, ``fc1/kernel``). ``alias``: the portable name (``fc1.weight``), or None when it is
    the name itself. ``layer_type``: the class of the owning layer (``Linear``, ``Dense``).
    ``prunable``: whether ``__ALL_PRUNABLE__`` selects it.
    """

    name: str
    shape: tuple[int, ...] = ()
    layer_type: str = ""
    prunable: bool = False
    alias: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The name and, if different, the alias."""
        return (self.name,) if not self.alias or self.alias == self.name else (self.name, self.alias)

    @property
    def is_bias_or_norm(self) -> bool:
        """Biases and normalisation parameters (what ``__ALL__`` adds to the prunable set)."""
        last = (self.alias or self.name).replace("/", ".").rsplit(".", 1)[-1].lower()
        norm = any(n in self.layer_type.lower() for n in ("norm", "batchnorm"))
        return last in ("bias", "beta", "running_mean", "running_var", "moving_mean", "moving_variance") or norm or len(self.shape) <= 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "shape": list(self.shape),
            "layer_type": self.layer_type,
            "prunable": self.prunable,
        }
        if self.alias and self.alias != self.name:
            out["alias"] = self.alias
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ParamRecord:
        return cls(
            str(data["name"]),
            tuple(int(d) for d in data.get("shape", ())),
            str(data.get("layer_type", "")),
            bool(data.get("prunable", False)),
            data.get("alias"),
        )


_KERAS_TO_TORCH = {
    "kernel": "weight",
    "embeddings": "weight",
    "gamma": "weight",
    "beta": "bias",
    "moving_mean": "running_mean",
    "moving_variance": "running_var",
}


def portable_alias(keras_path: str) -> str:
    """The portable (PyTorch-style) name of a Keras variable path.

    >>> portable_alias("fc1/kernel"), portable_alias("block_1/bn/moving_variance")
    ('fc1.weight', 'block_1.bn.running_var')
    """
    parts = keras_path.split("/")
    parts[-1] = _KERAS_TO_TORCH.get(parts[-1], parts[-1])
    return ".".join(parts)


class PatternError(ValueError):
    """A ``re:`` pattern does not compile, or could take exponential time to match."""

    def __init__(self, selector: str, message: str, hint: str):
        super().__init__(f"{selector!r}: {message}")
        self.selector, self.message, self.hint = selector, message, hint


def _nested_repeat(tree: Any, inside: bool = False) -> bool:
    """Whether a parsed pattern repeats something that itself repeats (star height > 1),
    the shape of every catastrophically backtracking pattern like ``(a+)+`` or ``(.*)*``."""
    for op, arg in tree:
        if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
            low, high, sub = arg
            unbounded = high == sre_constants.MAXREPEAT or high > 100
            if inside and unbounded:
                return True
            if _nested_repeat(sub, inside or unbounded):
                return True
        elif op == sre_constants.SUBPATTERN:
            if _nested_repeat(arg[-1], inside):
                return True
        elif op == sre_constants.BRANCH:
            if any(_nested_repeat(b, inside) for b in arg[1]):
                return True
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            if _nested_repeat(arg[1], inside):
                return True
    return False


def compile_pattern(selector: str) -> re.Pattern[str]:
    """Compile the pattern of a ``re:`` selector, refusing ones that do not compile or that
    nest unbounded repetition (which can take exponential time on a long name)."""
    text = selector[3:]
    try:
        compiled = re.compile(text)
    except re.error as exc:
        raise PatternError(selector, f"the regex does not compile: {exc}", "Fix the pattern (Python re syntax).") from None
    if _nested_repeat(sre_parse.parse(text)):
        raise PatternError(
            selector,
            "the regex repeats a group that itself repeats (like (a+)+); matching it can take "
            "exponential time",
            "Remove the inner or the outer repetition, e.g. write (a+)+ as a+.",
        )
    return compiled


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

    def select(self, selector: str, pattern: re.Pattern[str] | None = None) -> list[int]:
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
    for op, arg in sre_parse.parse(pattern):
        if op == sre_constants.LITERAL:
            out.append(chr(arg))
        else:
            break
    return "".join(out)


def compile_selectors(selectors: Iterable[str]) -> dict[str, re.Pattern[str]]:
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


def closest_names(selector: str, records: Sequence[ParamRecord], n: int = 3) -> list[str]:
    """The real names closest to a selector that matched nothing (for the error's hint)."""
    import difflib

    target = selector[3:] if selector.startswith("re:") else selector
    names = sorted({name for r in records for name in r.names})
    close = difflib.get_close_matches(target, names, n=n, cutoff=0.5)
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


def write_manifest(path: str | os.PathLike[str], records: Sequence[ParamRecord], framework: str, source: str = "") -> None:
    """Write a parameter manifest (``params.json``): enough to lint without a framework."""
    doc = {
        "version": MANIFEST_VERSION,
        "framework": framework,
        "source": source,
        "params": [r.to_json() for r in records],
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def read_manifest(path: str | os.PathLike[str]) -> tuple[str, list[ParamRecord]]:
    """(framework, records) of a manifest written by :func:`write_manifest`.

    Raises ValueError naming the file and what is wrong with it.
    """
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{os.fspath(path)}: not a readable parameter manifest ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION or not isinstance(doc.get("params"), list):
        raise ValueError(
            f"{os.fspath(path)}: not a parameter manifest of version {MANIFEST_VERSION} "
            "(write one with `recipe-spec params --model ... -o params.json`)"
        )
    try:
        return str(doc.get("framework", "")), [ParamRecord.from_json(p) for p in doc["params"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{os.fspath(path)}: a parameter entry is malformed ({exc})") from None
