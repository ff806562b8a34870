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
import warnings
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
    "LinearPattern",
    "MAX_STATES",
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
    """A ``re:`` pattern does not compile, or is outside what the linear-time matcher runs."""

    def __init__(self, selector: str, message: str, hint: str):
        super().__init__(f"{selector!r}: {message}")
        self.selector, self.message, self.hint = selector, message, hint


#: The most NFA instructions a pattern may compile to (counted repetition is expanded:
#: ``a{1,100}`` is 100 copies of ``a``). Bounds the work per character of a name.
MAX_STATES = 1000

_ATOM_FLAGS = re.IGNORECASE | re.DOTALL | re.ASCII
_CATEGORY_SOURCE = {
    sre_constants.CATEGORY_DIGIT: r"\d",
    sre_constants.CATEGORY_NOT_DIGIT: r"\D",
    sre_constants.CATEGORY_SPACE: r"\s",
    sre_constants.CATEGORY_NOT_SPACE: r"\S",
    sre_constants.CATEGORY_WORD: r"\w",
    sre_constants.CATEGORY_NOT_WORD: r"\W",
}
_AT_SOURCE = {
    sre_constants.AT_BEGINNING: "^",
    sre_constants.AT_BEGINNING_STRING: r"\A",
    sre_constants.AT_END: "$",
    sre_constants.AT_END_STRING: r"\Z",
    sre_constants.AT_BOUNDARY: r"\b",
    sre_constants.AT_NON_BOUNDARY: r"\B",
}
_UNSUPPORTED = {
    sre_constants.GROUPREF: "a backreference",
    sre_constants.GROUPREF_EXISTS: "a conditional group",
    sre_constants.ASSERT: "a lookahead or lookbehind",
    sre_constants.ASSERT_NOT: "a negative lookahead or lookbehind",
}
for _name, _what in (("ATOMIC_GROUP", "an atomic group"), ("POSSESSIVE_REPEAT", "a possessive repeat")):
    if hasattr(sre_constants, _name):  # Python 3.11+
        _UNSUPPORTED[getattr(sre_constants, _name)] = _what


def _char(code: int) -> str:
    return f"\\U{code:08x}"


def _atom_source(op: Any, arg: Any) -> str:
    """A one-character Python regex equivalent to one parsed atom."""
    if op == sre_constants.LITERAL:
        return _char(arg)
    if op == sre_constants.NOT_LITERAL:
        return f"[^{_char(arg)}]"
    if op == sre_constants.ANY:
        return "."
    parts = []
    for item_op, item_arg in arg:  # IN
        if item_op == sre_constants.NEGATE:
            parts.insert(0, "^")
        elif item_op == sre_constants.LITERAL:
            parts.append(_char(item_arg))
        elif item_op == sre_constants.RANGE:
            parts.append(f"{_char(item_arg[0])}-{_char(item_arg[1])}")
        elif item_op == sre_constants.CATEGORY and item_arg in _CATEGORY_SOURCE:
            parts.append(_CATEGORY_SOURCE[item_arg])
        else:  # pragma: no cover - sre_parse yields nothing else inside [...]
            raise _Unsupported(f"the class item {item_op}")
    return "[" + "".join(parts) + "]"


class _Unsupported(Exception):
    pass


class _TooLarge(Exception):
    pass


class LinearPattern:
    """A ``re:`` pattern matched in time linear in the name, with Python ``re.match``
    semantics (anchored at the start only, any end).

    The pattern is parsed by Python's own regex parser, then compiled (Thompson's
    construction) to at most MAX_STATES instructions and run as a set-of-states simulation:
    every character of the name is read once and moves each of at most MAX_STATES states
    once, so a name of n characters costs at most ``2 * n * MAX_STATES`` steps whatever the
    pattern, against the exponential worst case of a backtracking engine. The sets met are
    cached (a lazily built DFA), so the usual cost is one dictionary look-up per character.
    Characters are tested by the one-character Python regex of each atom (literal, class,
    ``.``) under the flags in force, and anchors (``^ $ \\A \\Z \\b \\B``) by Python's
    own, so both agree with ``re`` character for character. Whether a match exists is the
    same for every engine; only which text a group captures differs, and selectors use no
    captures. Backreferences, lookaround, conditional and atomic groups and possessive
    repeats are outside this class of patterns and refused.
    """

    def __init__(self, text: str, compiled: re.Pattern[str]):
        self.pattern = text
        self.flags = compiled.flags
        self.prog: list[tuple[Any, ...]] = []
        self._atoms: list[re.Pattern[str]] = []
        self._atom_ids: dict[tuple[str, int], int] = {}
        self._asserts: list[re.Pattern[str]] = []
        self._assert_ids: dict[tuple[str, int], int] = {}
        self._emit(sre_parse.parse(text, compiled.flags), compiled.flags)
        self._add(("match",))
        self._start = frozenset([0])
        self._closures: dict[Any, tuple[bool, frozenset[int]]] = {}
        self._steps: dict[Any, frozenset[int]] = {}
        self._tests: list[dict[str, bool]] = [{} for _ in self._atoms]
        self._dfa_ids: dict[frozenset[int], int] = {}
        self._dfa_rows: list[dict[str, int]] = []
        self._dfa_accepting: list[bool] = []
        self._dfa_consumers: list[frozenset[int]] = []

    # -- compilation -----------------------------------------------------------------------
    def _add(self, instr: tuple[Any, ...]) -> int:
        if len(self.prog) >= MAX_STATES:
            raise _TooLarge
        self.prog.append(instr)
        return len(self.prog) - 1

    def _emit(self, items: Any, flags: int) -> None:
        for op, arg in items:
            if op in _UNSUPPORTED:
                raise _Unsupported(_UNSUPPORTED[op])
            if op in (sre_constants.LITERAL, sre_constants.NOT_LITERAL, sre_constants.ANY, sre_constants.IN):
                key = (_atom_source(op, arg), flags & _ATOM_FLAGS)
                if key not in self._atom_ids:
                    self._atom_ids[key] = len(self._atoms)
                    self._atoms.append(re.compile(*key))
                self._add(("char", self._atom_ids[key]))
            elif op == sre_constants.AT:
                if arg not in _AT_SOURCE:  # pragma: no cover - parse yields only these
                    raise _Unsupported(f"the anchor {arg}")
                key = (_AT_SOURCE[arg], flags & (re.MULTILINE | re.ASCII))
                if key not in self._assert_ids:
                    self._assert_ids[key] = len(self._asserts)
                    self._asserts.append(re.compile(*key))
                self._add(("assert", self._assert_ids[key]))
            elif op == sre_constants.SUBPATTERN:
                _group, add, delete, sub = arg
                self._emit(sub, (flags | add) & ~delete)
            elif op == sre_constants.BRANCH:
                split = self._add(("split", ()))
                starts, jumps = [], []
                for alternative in arg[1]:
                    starts.append(len(self.prog))
                    self._emit(alternative, flags)
                    jumps.append(self._add(("jmp", -1)))
                end = len(self.prog)
                self.prog[split] = ("split", tuple(starts))
                for j in jumps:
                    self.prog[j] = ("jmp", end)
            elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
                low, high, sub = arg
                for _ in range(low):
                    self._emit(sub, flags)
                if high == sre_constants.MAXREPEAT:
                    loop = self._add(("split", ()))
                    self._emit(sub, flags)
                    self._add(("jmp", loop))
                    self.prog[loop] = ("split", (loop + 1, len(self.prog)))
                else:
                    skips = []
                    for _ in range(high - low):
                        skips.append(self._add(("split", ())))
                        self._emit(sub, flags)
                    end = len(self.prog)
                    for k in skips:
                        self.prog[k] = ("split", (k + 1, end))
            else:  # pragma: no cover - every other opcode is listed above
                raise _Unsupported(f"the regex construct {op}")

    # -- simulation ------------------------------------------------------------------------
    def _closure(self, kernel: frozenset[int], text: str, pos: int, context: tuple[bool, ...]) -> tuple[bool, frozenset[int]]:
        prog = self.prog
        seen: set[int] = set()
        consumers: list[int] = []
        accepting = False
        todo = list(kernel)
        while todo:
            pc = todo.pop()
            if pc in seen:
                continue
            seen.add(pc)
            instr = prog[pc]
            kind = instr[0]
            if kind == "char":
                consumers.append(pc)
            elif kind == "split":
                todo.extend(instr[1])
            elif kind == "jmp":
                todo.append(instr[1])
            elif kind == "assert":
                if context[instr[1]]:
                    todo.append(pc + 1)
            else:
                accepting = True
        return accepting, frozenset(consumers)

    def _dfa_state(self, kernel: frozenset[int]) -> int:
        """The number of the DFA state for ``kernel`` (patterns without anchors only)."""
        number = self._dfa_ids.get(kernel)
        if number is None:
            accepting, consumers = self._closure(kernel, "", 0, ())
            number = self._dfa_ids[kernel] = len(self._dfa_rows)
            self._dfa_rows.append({})
            self._dfa_accepting.append(accepting)
            self._dfa_consumers.append(consumers)
        return number

    def _dfa_match(self, text: str) -> bool:
        """The same simulation with the state sets numbered and every transition kept: one
        look-up per character once a name's path has been seen."""
        if len(self._dfa_rows) > 5_000:  # bounded memory: start the table afresh
            self._dfa_ids, self._dfa_rows, self._dfa_accepting, self._dfa_consumers = {}, [], [], []
        rows, accepting, consumers_of = self._dfa_rows, self._dfa_accepting, self._dfa_consumers
        state = self._dfa_state(self._start)
        for ch in text:
            if accepting[state]:
                return True
            nxt = rows[state].get(ch)
            if nxt is None:
                out = []
                for pc in consumers_of[state]:
                    atom = self.prog[pc][1]
                    seen = self._tests[atom]
                    ok = seen.get(ch)
                    if ok is None:
                        ok = seen[ch] = self._atoms[atom].fullmatch(ch) is not None
                    if ok:
                        out.append(pc + 1)
                nxt = rows[state][ch] = self._dfa_state(frozenset(out))
            state = nxt
            if not consumers_of[state] and not accepting[state]:
                return False
        return accepting[state]

    def match(self, name: str) -> bool:
        """Whether ``re.match(pattern, name)`` would find a match (``name`` cut to MAX_NAME)."""
        text = name[:MAX_NAME]
        if not self._asserts:
            return self._dfa_match(text)
        closures, steps, tests, atoms, prog = self._closures, self._steps, self._tests, self._atoms, self.prog
        if len(closures) + len(steps) > 20_000:  # bounded memory: start the cache afresh
            closures.clear()
            steps.clear()
        asserts = self._asserts
        kernel = self._start
        pos, n = 0, len(text)
        while True:
            context = tuple(a.match(text, pos) is not None for a in asserts) if asserts else ()
            key = (kernel, context)
            found = closures.get(key)
            if found is None:
                found = closures[key] = self._closure(kernel, text, pos, context)
            accepting, consumers = found
            if accepting:
                return True
            if pos == n or not consumers:
                return False
            ch = text[pos]
            step_key = (consumers, ch)
            nxt = steps.get(step_key)
            if nxt is None:
                out = []
                for pc in consumers:
                    atom = prog[pc][1]
                    seen = tests[atom]
                    ok = seen.get(ch)
                    if ok is None:
                        ok = seen[ch] = atoms[atom].fullmatch(ch) is not None
                    if ok:
                        out.append(pc + 1)
                nxt = steps[step_key] = frozenset(out)
            kernel = nxt
            pos += 1


def compile_pattern(selector: str) -> LinearPattern:
    """Compile the pattern of a ``re:`` selector for the linear-time matcher, refusing ones
    that do not compile, that need backtracking (backreferences, lookaround) or that
    expand to more than MAX_STATES instructions."""
    text = selector[3:]
    try:
        with warnings.catch_warnings():  # e.g. re's FutureWarning on "[[": not the user's concern here
            warnings.simplefilter("ignore")
            compiled = re.compile(text)
            return LinearPattern(text, compiled)
    except re.error as exc:
        raise PatternError(selector, f"the regex does not compile: {exc}", "Fix the pattern (Python re syntax).") from None
    except (RecursionError, OverflowError):
        raise PatternError(selector, "the regex nests too deeply to compile", "Simplify the pattern.") from None
    except _Unsupported as exc:
        raise PatternError(
            selector,
            f"the regex uses {exc}, which parameter patterns do not support (they are matched "
            "in linear time, without backtracking)",
            "Select the names with plain patterns instead, or list several selectors.",
        ) from None
    except _TooLarge:
        raise PatternError(
            selector,
            f"the regex expands to more than {MAX_STATES} states (counted repetition like "
            "a{1,100} is written out once per count)",
            "Use * or + instead of large counts, e.g. (a{1,100}){1,100} as a+.",
        ) from None


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
    for op, arg in sre_parse.parse(pattern):
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
    from ..atomic import write_text

    write_text(path, json.dumps(doc, indent=1) + "\n")


def read_manifest(path: str | os.PathLike[str]) -> tuple[str, list[ParamRecord]]:
    """(framework, records) of a manifest written by :func:`write_manifest`.

    Raises ValueError ``path:line:column: what is wrong`` (see :mod:`.manifest_json`).
    """
    from .manifest_json import parse

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{os.fspath(path)}: not a readable parameter manifest ({exc})") from None
    doc, entries = parse(text, os.fspath(path))
    try:
        return str(doc.get("framework", "")), [ParamRecord.from_json(p) for p in entries]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{os.fspath(path)}: a parameter entry is malformed ({exc})") from None
