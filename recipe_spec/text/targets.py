"""How a recipe's module targets meet a model's names: the one matcher of the one-shot checks,
cost estimate and run, on every backend, and of ``recipe-spec lint`` against a model.

compressed-tensors' rule (``is_match``): a ``re:`` target is a Python regular expression
tried with ``re.match`` on the name (anchored at the start only: a prefix match); any other
target is the exact module name or one of its class names. The ``re:`` patterns run on
:class:`~.patterns.LinearPattern`, in time linear in the name whatever the pattern
(``re:(a+)+$`` on a long name costs what ``re:a+$`` does), compiled once per process. A
pattern outside it (a backreference, lookaround, too many states) raises
:class:`~.patterns.PatternError`; ``recipe-spec validate`` refuses such a pattern first
(P005), so no run meets it.

>>> target_matches("re:.*lm_head", "lm_head"), target_matches("Linear", "x", ("Linear",))
(True, True)
>>> regex_match("re:(a+)+$", "a" * 5000 + "b")
False
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from .patterns import LinearPattern, PatternError, compile_pattern

__all__ = ["linear_pattern", "regex_match", "target_matches", "refused_patterns", "explain", "searched",
           "search_problem"]


@functools.lru_cache(maxsize=4096)  # the same few targets meet every module of a model
def _compiled(selector: str) -> LinearPattern:
    return compile_pattern(selector)


def linear_pattern(selector: str) -> LinearPattern:
    """The compiled pattern of the ``re:`` string ``selector`` (cached; raises
    :class:`PatternError` for a pattern the linear matcher does not run)."""
    return _compiled(selector)


def regex_match(selector: str, name: str) -> bool:
    """``re.match(selector[3:], name) is not None``, in linear time, for a ``re:`` string."""
    return _compiled(selector).run(name)


def target_matches(target: str, name: str, classes: Sequence[str] = ()) -> bool:
    """Whether ``target`` names module ``name`` (whose class names are ``classes``): a
    ``re:`` target by :func:`regex_match`, else the exact name or a class name."""
    if target.startswith("re:"):
        return _compiled(target).run(name)
    return target == name or target in classes


def refused_patterns(values: Iterable[str]) -> list[PatternError]:
    """The refusal of every ``re:`` string of ``values`` the linear matcher does not run."""
    out = []
    for value in values:
        if isinstance(value, str) and value.startswith("re:"):
            try:
                _compiled(value)
            except PatternError as exc:
                out.append(exc)
    return out


#: What to write instead of each construct the linear matcher does not run.
_INSTEAD = {
    "lookahead": "Write it without lookaround: the modules wanted as plain patterns, those to "
                 "leave out under the modifier's `ignore:` (e.g. 're:.*lm_head').",
    "backreference": "Spell out the text the group would repeat, or list several plain patterns.",
    "conditional": "Write each alternative as a pattern of its own in the list.",
    "atomic": "Write a plain group '(?:...)' or a plain repeat ('a+' for 'a++'); check that it "
              "selects the same layers with `recipe-spec lint --model`.",
    "possessive": "Write a plain repeat ('a+' for 'a++'); check that it selects the same layers "
                  "with `recipe-spec lint --model`.",
}


def explain(exc: PatternError) -> tuple[str, str]:
    """``(what is wrong, what to write instead)`` for a module pattern the linear matcher
    refuses, in the words of a stage/group recipe's checks."""
    text = exc.selector
    if exc.reason == "construct":
        hint = next((h for k, h in _INSTEAD.items() if k in exc.construct), _INSTEAD["lookahead"])
        return (f"'{text}' uses {exc.construct}, which recipe-spec's module matcher does not run "
                "(it matches names in linear time, without backtracking, so that no pattern can "
                "hang a run)", hint)
    return f"'{text}': {exc.message}", exc.hint


def searched(pattern: str) -> str:
    r"""A pattern searched anywhere in a name (``re.search``; ``re:`` in front or not, as
    llm-compressor's REAP reads its ``ignore``) as the ``re:`` selector :func:`regex_match`
    runs.

    >>> regex_match(searched(r"layers\.1\.mlp$"), "model.layers.1.mlp")
    True
    """
    return "re:.*(?:" + pattern.removeprefix("re:") + ")"


def search_problem(pattern: str) -> tuple[str, str] | None:
    """``(what is wrong, what to write instead)`` when :func:`searched` ``pattern`` is not a
    pattern the linear matcher runs, else None."""
    try:
        _compiled(searched(pattern))
    except PatternError as exc:
        what = exc.construct or exc.message
        return f"'{pattern}' is not a pattern recipe-spec's module matcher runs ({what})", exc.hint
    return None
