"""Regex pitfalls in a stage/group recipe's ``targets`` and ``ignore``, found without a model.

SparseML and llm-compressor compare a target with a module's full dotted name (and its class
name): exactly, or, after ``re:``, with Python's ``re.match``, which is anchored at the start
of the name (../shared/reference/core-dialect.md, section 2c). The pitfalls users reported
(section 4), each a check here:

- a pattern that does not compile (llm-compressor #1428's "regex match error"), or that
  recipe-spec's linear-time module matcher (:mod:`recipe_spec.text.targets`) does not run
  (a backreference, lookaround, more than 1,000 states): P005;
- regex text without ``re:`` (``.*lm_head``, ``backbone\\.embeddings``, PR #2803): compared
  as a plain name, it matches nothing: P008;
- a ``re:`` pattern, or a plain name, that begins with a name found only *inside* a layer
  (``re:mlp.down_proj``, ``q_proj``): ``re.match`` and exact names start at the model's
  root, so it matches nothing (vLLM #48508): P008. Not checked in ``mappings``, which AWQ
  may match among a parent module's submodules. ``re:lm_head`` is not reported: most
  models have ``lm_head`` at the root (the exceptions, ``language_model.lm_head``, need the
  model: ``lint --model``);
- a YAML double-quoted string whose escapes change the regex (``"\\b"`` is a backspace, not
  a word boundary; #1230), and ``\\\\`` in a single-quoted or plain one (a literal
  backslash, from a pattern copied out of Python source): P008. An escape YAML does not know
  (``"re:model\\.layers"``) is already a YAML error (Y001);
- an unescaped ``.`` between two name characters (``re:mtp.layers.*``, PR #2803): it matches
  any character, so the pattern is looser than meant: P009, a warning where the same pattern
  escapes another dot (a slip), else an info (the SparseML idiom ``re:model.layers.\\d+$``).

:func:`pattern_findings` is pure (a string in, findings out); the caller adds positions.

>>> [(f.code.id, f.hint) for f in pattern_findings("re:mlp.down_proj")]
[('P008', "Write 're:.*mlp\\\\.down_proj': a leading '.*' stands for the layers before it.")]
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import Severity
from ..diagnostics.codes import Code
from ..text.patterns import PatternError
from ..text.targets import explain, linear_pattern

__all__ = ["PatternFinding", "pattern_findings", "pattern_items", "arg_strings", "arg_items",
           "PATTERN_KEYS", "SEARCHED"]

#: Arguments (at any depth: ``config_groups.<group>.targets``, SmoothQuant's nested
#: ``mappings``, AWQ's ``smooth_layer``/``balance_layers``) whose strings are module targets.
PATTERN_KEYS = frozenset({"targets", "ignore", "sequential_targets", "mappings", "norm_mappings",
                          "smooth_layer", "balance_layers"})
#: Of those, the ones a tool may match inside a parent module (AWQ looks for its balance
#: layers among the smooth layer's parent's submodules): not checked for root anchoring.
_RELATIVE_KEYS = frozenset({"mappings", "norm_mappings", "smooth_layer", "balance_layers"})
#: Modifiers whose ``ignore`` strings are regular expressions searched anywhere in a layer's name
#: (llm-compressor's REAP: ``re.search`` of the text as written), not targets: only P005 applies.
SEARCHED = frozenset({"REAPPruningModifier"})
_SPECIAL = frozenset({"__ALL__", "__ALL_PRUNABLE__", "__ALL_QUANTIZABLE__"})
#: Module names that sit inside a decoder layer in every Hugging Face LLM, never at the root.
_INNER = frozenset({
    "q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "gate_proj", "up_proj", "down_proj",
    "gate_up_proj", "self_attn", "mlp", "input_layernorm", "post_attention_layernorm", "experts",
    "shared_expert", "shared_experts", "linear_attn", "mixer",
})
_REGEX_ONLY = re.compile(r"[*+?^$|()\[\]{}\\]")  # characters no module or class name has
_FIRST = re.compile(r"\^?([A-Za-z_][A-Za-z0-9_]*)(?![A-Za-z0-9_*+?{])")
_NAME = re.compile(r"[A-Za-z0-9_]")
_BEFORE = re.compile(r"(?:[A-Za-z0-9_]+|\\d[+*]?)$")
#: YAML double-quote escapes that give the regex something else than the text meant.
_YAML_CHARS = {"b": "a backspace character, not a word boundary", "e": "an escape character",
               "_": "a non-breaking space", "N": "a next-line character",
               "L": "a line separator", "P": "a paragraph separator"}
_HEX = {"x": 2, "u": 4, "U": 8}
_METACHARS = frozenset(".^$*+?{}[]\\|()")


@dataclass(frozen=True)
class PatternFinding:
    """One pitfall of one string: its code, what is wrong, what to write (and a severity
    where it differs from the code's default)."""

    code: Code
    message: str
    hint: str
    severity: Severity | None = None


def arg_strings(value: Any, keys: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    """``(keys inside the arguments, string)`` for every string of a modifier's arguments."""
    if isinstance(value, str):
        yield keys, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from arg_strings(v, keys + (k,))
    elif isinstance(value, tuple):
        for i, v in enumerate(value):
            yield from arg_strings(v, keys + (i,))


def pattern_items(args: Any) -> Iterator[tuple[tuple[Any, ...], str, bool]]:
    """``(keys inside the arguments, string, matched from the model's root)`` for every
    target-like string of a modifier's arguments: below a :data:`PATTERN_KEYS` key, or a
    preset's list in ``scheme: {W4A16: [...]}``."""
    for keys, text in arg_strings(args):
        named = [k for k in keys if isinstance(k, str)]
        if any(k in PATTERN_KEYS for k in named) or (len(keys) >= 2 and keys[0] == "scheme"):
            yield keys, text, not any(k in _RELATIVE_KEYS for k in named)


def arg_items(args: Any) -> list[tuple[tuple[Any, ...], str, bool, bool]]:
    """In one walk, ``(keys, string, target-like, matched from the model's root)`` for every
    string of a modifier's arguments: what :func:`arg_strings` yields, each string marked as
    :func:`pattern_items` would take it (and with its third element)."""
    out: list[tuple[tuple[Any, ...], str, bool, bool]] = []
    if isinstance(args, Mapping):
        for k, v in args.items():
            named = isinstance(k, str)
            pattern = named and k in PATTERN_KEYS
            relative = named and k in _RELATIVE_KEYS
            if isinstance(v, str):
                out.append(((k,), v, pattern, not relative))
            else:  # strings below ``scheme`` are a preset's targets
                _walk(v, (k,), pattern or k == "scheme", relative, out)
    else:
        _walk(args, (), False, False, out)
    return out


def _walk(value: Any, keys: tuple[Any, ...], pattern: bool, relative: bool,
          out: list[tuple[tuple[Any, ...], str, bool, bool]]) -> None:
    if isinstance(value, str):
        out.append((keys, value, pattern, not relative))
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str):
                _walk(v, keys + (k,), pattern or k in PATTERN_KEYS, relative or k in _RELATIVE_KEYS, out)
            else:
                _walk(v, keys + (k,), pattern, relative, out)
    elif isinstance(value, tuple):
        for i, v in enumerate(value):
            _walk(v, keys + (i,), pattern, relative, out)


def _quoted(text: str) -> str:
    """``text`` as a YAML single-quoted scalar (backslashes are kept as typed there)."""
    return "'" + text.replace("'", "''") + "'"


def _loose_dots(body: str) -> tuple[list[int], bool]:
    """Positions of the unescaped ``.`` outside ``[...]`` that stand between two name parts
    (a name character or ``\\d``, as in ``model.layers.\\d+.mlp``), and whether the pattern
    escapes some other dot."""
    loose: list[int] = []
    escaped = in_class = False
    after_name = False  # the token before ends a name part
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            escaped |= body[i + 1:i + 2] == "."
            after_name = body[i + 1:i + 2] == "d"
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "." and after_name and (_NAME.match(body[i + 1:i + 2]) or body[i + 1:i + 3] == "\\d"):
            loose.append(i)
        after_name = bool(_NAME.match(c)) and not in_class or (c in "+*" and after_name and body[i - 1:i] != ".")
        i += 1
    return loose, escaped


def _tighten(body: str) -> str:
    """``body`` with its loose dots escaped."""
    loose, _ = _loose_dots(body)
    cuts = [0, *loose, len(body)]
    return "\\".join(body[a:b] for a, b in zip(cuts, cuts[1:], strict=False))


def _double_quote_problem(raw: str) -> tuple[str, str] | None:
    """(what YAML made of an escape, the text the author meant) for a double-quoted scalar
    whose escapes change the regex, else None. ``raw`` is the scalar as written, quotes and
    all."""
    body = raw[1:-1] if len(raw) >= 2 and raw[0] == raw[-1] == '"' else raw
    meant: list[str] = []
    problem = None
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            meant.append(c)
            i += 1
            continue
        nxt = body[i + 1:i + 2]
        if nxt in ("\\", '"'):
            meant.append(nxt)
            i += 2
            continue
        seq = body[i:i + 2 + _HEX.get(nxt, 0)]
        if nxt in _YAML_CHARS:
            problem = problem or f"'{seq}' as {_YAML_CHARS[nxt]}"
        elif nxt in _HEX:
            try:
                char = chr(int(seq[2:], 16))
            except ValueError:
                char = ""
            if char in _METACHARS and char:
                problem = problem or f"'{seq}' as '{char}', which the regex reads as a special character"
        meant.append(seq)
        i += len(seq)
    return (problem, "".join(meant)) if problem else None


def _compile_hint(body: str, exc: Exception) -> str:
    if body[:1] in ("*", "+", "?"):
        return (f"Write {_quoted('re:.' + body)}: in a regex '*' repeats what stands before "
                "it, so 'any text' is '.*'.")
    for needed, opener, closer in (("unterminated character set", "[", "]"), ("missing )", "(", ")")):
        if needed in str(exc):
            return (f"Close the '{opener}': {_quoted('re:' + body + closer)}, or write "
                    f"'\\{opener}' for a literal '{opener}'.")
    return ("Fix the regular expression (Python `re` syntax, as the tools compile it); write "
            "'\\' before a character meant literally.")


def pattern_findings(text: str, style: str | None = None, raw: str | None = None,
                     from_root: bool = True) -> tuple[PatternFinding, ...]:
    """The pitfalls of one ``targets``/``ignore`` string ``text`` (see the module docstring):
    at most one P005 or P008, else P009. ``style`` is the YAML scalar style (``'"'`` for
    double quotes) and ``raw`` the scalar as written, to see what its escapes did;
    ``from_root``: whether the tool matches it with names from the model's root."""
    if len(text) + len(raw or "") > _CACHED_LENGTH:
        return tuple(_findings(text, style, raw, from_root))
    return _cached(text, style, raw, from_root)


_CACHED_LENGTH = 1024


@functools.lru_cache(maxsize=4096)  # the same names recur in every layer and every recipe
def _cached(text: str, style: str | None, raw: str | None, from_root: bool) -> tuple[PatternFinding, ...]:
    return tuple(_findings(text, style, raw, from_root))


def _findings(text: str, style: str | None, raw: str | None, from_root: bool) -> list[PatternFinding]:
    if style == '"' and raw is not None and "\\" in raw:
        found = _double_quote_problem(raw)
        if found is not None:
            what, meant = found
            return [PatternFinding(codes.P008, f"{raw} is in double quotes, where YAML reads {what}",
                                   f"Write it in single quotes, where a backslash is kept as typed: "
                                   f"{_quoted(meant)}.")]
    if text.startswith("re:"):
        return _regex_findings(text, text[3:], from_root)
    if text in _SPECIAL:
        return []
    if _REGEX_ONLY.search(text):
        fixed = "re:" + _tighten(text)
        try:
            re.compile(fixed[3:])
            hint = f"Write {_quoted(fixed)}: only a 're:' string is a regular expression."
        except (re.error, OverflowError, RecursionError):
            hint = "Add 're:' in front of a regular expression, or write the exact module name."
        return [PatternFinding(codes.P008, f"'{text}' looks like a regular expression but has no "
                               "'re:' prefix: it is compared as an exact module or class name and "
                               "matches nothing", hint)]
    first = text.split(".", 1)[0]
    if first in _INNER and from_root:
        fixed = "re:.*" + re.escape(text) + "$"
        return [PatternFinding(codes.P008, f"'{text}' is compared with whole module names, which "
                               f"start at the model's root (model.layers.0.…), and '{first}' sits "
                               "inside a layer: it matches nothing",
                               f"Write {_quoted(fixed)} to match it in every layer, or give the "
                               "full name.")]
    return []


def _regex_findings(text: str, body: str, from_root: bool) -> list[PatternFinding]:
    try:
        re.compile(body)
    except (re.error, OverflowError, RecursionError) as exc:  # a count too large, too deep
        return [PatternFinding(codes.P005, f"'{text}' is not a valid regular expression ({exc})",
                               _compile_hint(body, exc))]
    try:  # what Python compiles, the one-shot run must be able to match in linear time
        linear_pattern(text)
    except PatternError as exc:
        return [PatternFinding(codes.P005, *explain(exc))]
    if "\\\\" in body:
        fixed = "re:" + body.replace("\\\\", "\\")
        return [PatternFinding(codes.P008, f"'{text}' asks for a backslash in the module name "
                               "(\\\\ is a literal backslash), and names have none: it matches "
                               "nothing", f"Write {_quoted(fixed)}: in single quotes or unquoted, "
                               "YAML keeps one backslash as typed (\\\\ is Python source).")]
    first = _FIRST.match(body)
    if from_root and first is not None and first.group(1) in _INNER and "|" not in body:
        fixed = "re:.*" + _tighten(body.removeprefix("^"))
        return [PatternFinding(codes.P008, f"'{text}' is matched with re.match, from the start of "
                               f"the full module name (model.layers.0.…), and no name starts with "
                               f"'{first.group(1)}': it matches nothing",
                               f"Write {_quoted(fixed)}: a leading '.*' stands for the layers "
                               "before it.")]
    loose, escaped = _loose_dots(body)
    if loose:
        fixed = "re:" + _tighten(body)
        word = _BEFORE.search(body[:loose[0]])
        return [PatternFinding(codes.P009, f"in '{text}' the unescaped '.' after "
                               f"'{word.group(0) if word else body[:loose[0]]}' matches any character, not "
                               "only a dot" + (", while the pattern escapes another dot" if escaped else ""),
                               f"Write {_quoted(fixed)}: '\\.' is a literal dot.",
                               Severity.WARNING if escaped else None)]
    return []
