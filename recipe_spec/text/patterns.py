"""Parameter patterns compiled to linear-time matchers: a ``re:`` selector (Python ``re.match``
semantics) becomes a :class:`LinearPattern`, a bounded automaton that matches every name of a
large model in time linear in its length, or a :class:`PatternError` that says why not."""

from __future__ import annotations

import re
import warnings
from typing import Any

try:  # Python 3.11+: the regex parser lives in re._parser
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]


#: The longest parameter name a selector is matched against (longer ones are cut): a bound on
#: the work one match does.
MAX_NAME = 1000

__all__ = ["PatternError", "MAX_STATES", "LinearPattern", "compile_pattern"]

class PatternError(ValueError):
    """A ``re:`` pattern does not compile, or is outside what the linear-time matcher runs.
    ``reason``: ``"syntax"`` (Python's ``re`` refuses it), ``"construct"`` (it uses
    ``construct``, e.g. ``"a backreference"``) or ``"size"`` (more than MAX_STATES states)."""

    def __init__(self, selector: str, message: str, hint: str, reason: str = "syntax", construct: str = ""):
        super().__init__(f"{selector!r}: {message}")
        self.selector, self.message, self.hint = selector, message, hint
        self.reason, self.construct = reason, construct


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
        self._dfa_kernels: list[frozenset[int]] = []
        self._blank = (False,) * len(self._asserts)
        #: False when an anchor may hold inside a name (``\b``, MULTILINE): no DFA then
        self._dfa_ok = not any(a.pattern not in ("^", r"\A", "$", r"\Z") or a.flags & re.MULTILINE
                               for a in self._asserts)

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
        """The number of the DFA state for ``kernel``, every anchor false (as it is for a
        pattern without anchors, and away from the ends of the name for ``^ \\A $ \\Z``)."""
        number = self._dfa_ids.get(kernel)
        if number is None:
            accepting, consumers = self._closure(kernel, "", 0, self._blank)
            number = self._dfa_ids[kernel] = len(self._dfa_rows)
            self._dfa_rows.append({})
            self._dfa_accepting.append(accepting)
            self._dfa_consumers.append(consumers)
            self._dfa_kernels.append(kernel)
        return number

    def _dfa_run(self, text: str, kernel: frozenset[int], pos: int, stop: int | None) -> bool | frozenset[int]:
        """The simulation from ``pos`` with the state sets numbered and every transition kept
        (one look-up per character once a name's path has been seen): True or False once
        decided, else (``stop`` given) the kernel at ``stop``."""
        if len(self._dfa_rows) > 5_000:  # bounded memory: start the table afresh
            self._dfa_ids, self._dfa_rows, self._dfa_accepting = {}, [], []
            self._dfa_consumers, self._dfa_kernels = [], []
        rows, accepting, consumers_of = self._dfa_rows, self._dfa_accepting, self._dfa_consumers
        state = self._dfa_state(kernel)
        for i in range(pos, len(text) if stop is None else stop):
            if accepting[state]:
                return True
            ch = text[i]
            nxt = rows[state].get(ch)
            if nxt is None:
                nxt = rows[state][ch] = self._dfa_state(self._step(consumers_of[state], ch))
            state = nxt
            if not consumers_of[state] and not accepting[state] and i + 1 != stop:
                return False  # (at ``stop`` an anchor may hold and open a path)
        return accepting[state] if stop is None else self._dfa_kernels[state]

    def _step(self, consumers: frozenset[int], ch: str) -> frozenset[int]:
        out = []
        for pc in consumers:
            atom = self.prog[pc][1]
            seen = self._tests[atom]
            ok = seen.get(ch)
            if ok is None:
                ok = seen[ch] = self._atoms[atom].fullmatch(ch) is not None
            if ok:
                out.append(pc + 1)
        return frozenset(out)

    def _simulate(self, text: str, kernel: frozenset[int], pos: int, stop: int | None,
                  search: bool = False, full: bool = False) -> bool | frozenset[int]:
        """The set-of-states simulation from ``pos``, each anchor tested where it stands:
        True or False once decided, else (``stop`` given) the kernel at ``stop``."""
        closures, steps, asserts = self._closures, self._steps, self._asserts
        if len(closures) + len(steps) > 20_000:  # bounded memory: start the cache afresh
            closures.clear()
            steps.clear()
        n = len(text)
        while pos != stop:
            if search:  # a match may also start here
                kernel = kernel | self._start
            context = tuple(a.match(text, pos) is not None for a in asserts)
            key = (kernel, context)
            found = closures.get(key)
            if found is None:
                found = closures[key] = self._closure(kernel, text, pos, context)
            accepting, consumers = found
            if accepting and (not full or pos == n):
                return True
            if pos == n or not (consumers or search):
                return False
            step_key = (consumers, text[pos])
            kernel = steps.get(step_key)  # type: ignore[assignment]
            if kernel is None:
                kernel = steps[step_key] = self._step(consumers, text[pos])
            pos += 1
        return kernel

    def match(self, name: str) -> bool:
        """Whether ``re.match(pattern, name)`` would find a match (``name`` cut to MAX_NAME)."""
        return self.run(name[:MAX_NAME])

    def run(self, text: str, *, search: bool = False, full: bool = False) -> bool:
        """Whether ``re.match(pattern, text)`` finds a match, or ``re.search`` with
        ``search``, ``re.fullmatch`` with ``full``: the whole of ``text``, in time linear in
        its length (module names are matched uncut). Patterns whose only anchors are
        ``^ \\A $ \\Z`` (no MULTILINE) run on the DFA except at the ends of the name."""
        if search or full or not self._dfa_ok:
            return bool(self._simulate(text, self._start, 0, None, search, full))
        if not self._asserts:
            return bool(self._dfa_run(text, self._start, 0, None))
        n = len(text)
        tail = n - 1 if n and text[-1] == "\n" else n  # where `$` may hold
        if tail <= 1:
            return bool(self._simulate(text, self._start, 0, None))
        got = self._simulate(text, self._start, 0, 1)  # `^` and `\A` hold at 0 only
        if not isinstance(got, bool):
            got = self._dfa_run(text, got, 1, tail)
        if not isinstance(got, bool):
            got = self._simulate(text, got, tail, None)
        return bool(got)


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
            "construct", str(exc),
        ) from None
    except _TooLarge:
        raise PatternError(
            selector,
            f"the regex expands to more than {MAX_STATES} states (counted repetition like "
            "a{1,100} is written out once per count)",
            "Use * or + instead of large counts, e.g. (a{1,100}){1,100} as a+.",
            "size",
        ) from None


