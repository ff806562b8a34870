"""Fixing one recipe file: find the fixes, make them, check the result.

:func:`fix_text` works in passes, as ruff does: each pass loads the current text, asks the
dialect's fix finder (:mod:`.stage`, :mod:`.tagged`) for its fixes, makes those that do not
overlap, and the next pass sees the result (a fix that overlapped another is made then), until
a pass finds nothing more to do. After each pass the text is validated again: a fix after
which a finding appears that the file did not have (a renamed argument whose value the new
name's type refuses, say) is not made, so a fixed file never has a finding the original
lacked. Running it again on its own result changes nothing.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..diagnostics.base import Diagnostic, RecipeError
from ..loader import check
from ..text.source import Source, from_text
from ..validation import validate
from .edits import Fix, Text
from .stage import stage_fixes
from .tagged import tagged_fixes

__all__ = ["FileFix", "fix_text", "fix_file", "finding_key", "MAX_PASSES"]

#: Passes before giving up on reaching a state with nothing more to fix.
MAX_PASSES = 10


@dataclass
class FileFix:
    """What fixing one file did.

    ``original``/``fixed``: the text before and after (``\\n`` line ends, no byte-order mark;
    :meth:`file_text` gives ``fixed`` as the file had them). ``passes``: the fixes made in
    each pass, each positioned in the text that pass started from (``applied``: all of them). ``unsafe``: the fixes left for
    ``--unsafe-fixes``. ``withheld``: fixes not made because a finding the file did not have
    would have appeared. ``before``/``after``: the findings of ``validate`` on each text.
    """

    path: str
    original: str
    fixed: str
    passes: list[list[Fix]] = field(default_factory=list)
    unsafe: list[Fix] = field(default_factory=list)
    withheld: list[Fix] = field(default_factory=list)
    before: list[Diagnostic] = field(default_factory=list)
    after: list[Diagnostic] = field(default_factory=list)
    newline: str = "\n"
    bom: bool = False

    @property
    def applied(self) -> list[Fix]:
        """Every fix made, pass after pass."""
        return [f for fixes in self.passes for f in fixes]

    @property
    def changed(self) -> bool:
        return self.fixed != self.original

    def file_text(self) -> str:
        """``fixed`` with the file's own line ends and byte-order mark."""
        text = self.fixed.replace("\n", self.newline) if self.newline != "\n" else self.fixed
        return ("\ufeff" if self.bom else "") + text


_NUMBERS = re.compile(r"\d+")
_ALSO = re.compile(r" \(also on lines? [^)]*\)")


def finding_key(d: Diagnostic) -> tuple[str, str, str]:
    """What a finding is, wherever it stands: code, severity and message without line
    numbers (a fix moves lines, and merges repeated deprecations' "also on lines" lists)."""
    return d.code, str(d.severity), _NUMBERS.sub("#", _ALSO.sub("", d.message))


def _new_findings(before: Counter[tuple[str, str, str]], after: Sequence[Diagnostic]) -> bool:
    return bool(Counter(finding_key(d) for d in after) - before)


def _source(text: str, path: str) -> Source:
    kind = ".md" if path.lower().endswith(".md") else ""
    return from_text(text, path, kind)


def _fixes(text: str, path: str, compat: Any) -> list[Fix]:
    recipe, _ = check(_source(text, path))
    if recipe is None:
        return []
    t = Text(text)
    return stage_fixes(t, recipe, compat) if recipe.dialect == "stage" else tagged_fixes(t, recipe)


def fix_text(text: str, path: str = "<string>", compat: Any = None,
             unsafe: bool | Callable[[Fix], bool] = False) -> FileFix:
    """Fix ``text`` (the contents of ``path``, ``\\n`` line ends). ``compat``: the
    :class:`~recipe_spec.stage_dialect.Compat` whose rules apply (stage/group recipes; None:
    every release); ``unsafe``: also make the unsafe fixes (all of them, or those for which
    it answers True).

    >>> r = fix_text("s_stage:\\n  m_modifiers:\\n    GPTQModifier:\\n      scheme: W4A16\\n"
    ...              "      percdamp: 0.01  # as in the paper\\n", "r.yaml")
    >>> print(r.fixed, end="")
    s_stage:
      m_modifiers:
        GPTQModifier:
          scheme: W4A16
          dampening_frac: 0.01  # as in the paper
    >>> [f.title for f in r.applied], len(r.before), len(r.after)
    (['rename percdamp to dampening_frac'], 1, 0)
    """
    before = validate(_source(text, path), compat=compat)
    baseline = Counter(finding_key(d) for d in before)
    result = FileFix(path, text, text, before=before, after=before)
    current = text
    for _ in range(MAX_PASSES):
        found = _fixes(current, path, compat)
        take = [f for f in found if f.safe or (unsafe(f) if callable(unsafe) else unsafe)]
        result.unsafe = [f for f in found if f not in take]
        t = Text(current)
        wanted = t.without_overlaps(take)
        accepted, after = _checked(t, wanted, path, compat, baseline)
        result.withheld = [f for f in wanted if f not in accepted]
        if not accepted:
            break
        result.passes.append(accepted)
        result.after = after
        current = t.apply(accepted)
    result.fixed = current
    return result


def _checked(t: Text, wanted: list[Fix], path: str, compat: Any,
             baseline: Counter[tuple[str, str, str]]) -> tuple[list[Fix], list[Diagnostic]]:
    """The fixes of ``wanted`` that bring no finding the original file lacked (all of them,
    or else those that do not, tried one after another), and the findings with them made."""
    found: list[Diagnostic] = []

    def clean(fixes: list[Fix]) -> bool:
        nonlocal found
        try:
            diags = validate(_source(t.apply(fixes), path), compat=compat)
        except RecipeError:
            return False
        if _new_findings(baseline, diags):
            return False
        found = diags
        return True

    if not wanted:
        return [], found
    if clean(wanted):
        return wanted, found
    accepted: list[Fix] = []
    for f in wanted:
        if clean([*accepted, f]):
            accepted.append(f)
    return accepted, found


def fix_file(path: str | Path, compat: Any = None, unsafe: bool = False) -> FileFix:
    """:func:`fix_text` of a file's contents (read as the loader reads it: UTF-8, a
    byte-order mark and ``\\r\\n`` line ends kept aside and restored by
    :meth:`FileFix.file_text`). Writes nothing."""
    raw = Path(path).read_bytes().decode("utf-8")
    bom = raw.startswith("\ufeff")
    raw = raw[1:] if bom else raw
    newline = "\r\n" if "\r\n" in raw else "\n"
    result = fix_text(raw.replace("\r\n", "\n"), str(path), compat, unsafe)
    result.newline, result.bom = newline, bom
    return result
