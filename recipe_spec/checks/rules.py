"""The recipe-wide rules beyond the schema (schema and number checks: :mod:`.arguments`).

Rules are small generators that yield :class:`~recipe_spec.recipe.findings.Finding` values (a
code, a message, a hint and *which argument* of *which modifier* is wrong); they never know
lines or columns. :data:`RULES` lists them in the order they run; a modifier's own rules (its
declaration's ``rules``) run through :func:`rule_declared`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ..diagnostics import codes
from ..modifiers import all_specs
from ..recipe.findings import Finding
from ..recipe.model import Modifier, Recipe
from ..schedule.epochs import max_epochs
from ..schedule.events import MAX_EVENTS
from ..schedule.kinds import track_kind
from ..text.frozen import FrozenDict
from .arguments import Fact, as_number, exact_params, fact_of, pattern_verdict, plain_names

__all__ = ["RULES", "WithoutModifiers"]

_NM = re.compile(r"^(\d+):(\d+)$")


def _facts(recipe: Recipe) -> list[tuple[Modifier, Fact]]:
    """Each modifier of ``recipe`` with its :data:`Fact` (shared by the rules of one
    :func:`validate_recipe` call through :class:`WithoutModifiers`)."""
    facts = getattr(recipe, "_facts", None)
    if facts is None:
        declaration = all_specs().get
        facts = [(m, fact_of(m, declaration)) for m in recipe.modifiers]
    return facts


def rule_end_before_start(recipe: Recipe) -> Iterator[Finding]:
    for m, (start, end, _, _, _) in _facts(recipe):
        if start is None or end is None:
            continue
        if end != -1 and end < start:
            yield Finding(
                codes.E001,
                f"end_epoch {end:g} is before start_epoch {start:g}",
                "Swap them, or use end_epoch: -1 for 'never ends'.",
                m, ("end_epoch",),
            )


def rule_nm_mask_gradual(recipe: Recipe) -> Iterator[Finding]:
    for m in recipe.modifiers:
        mask = m.args.get("mask_type")
        if not isinstance(mask, str):
            continue
        match = _NM.match(mask) if mask != "tensorrt" else _NM.match("2:4")
        if not match:
            continue
        n, mm = int(match.group(1)), int(match.group(2))
        if mm == 0 or n > mm:
            yield Finding(codes.M006, f"mask_type '{mask}' keeps {n} of every {mm}", "N:M needs 0 < N <= M.", m, ("mask_type",))
            continue
        target = 1 - n / mm
        for key in ("init_sparsity", "final_sparsity"):
            value = as_number(m.args.get(key))
            if value is not None and value != 0 and abs(value - target) > 1e-2:
                yield Finding(
                    codes.M010,
                    f"mask_type '{mask}' always gives sparsity {target:g}, but {key} is {value:g}",
                    f"Set init_sparsity and final_sparsity to {target:g}.",
                    m, (key,),
                )


def _lr_window(m: Modifier, fact: Fact) -> tuple[float, float] | None:
    declared = fact[4]
    if declared is not None and declared.schedule == "set_lr":
        start = fact[2]
        if start is None:
            return None
        s = 0.0 if start < 0 else start
        return (s, s)
    return fact[3]


def rule_lr_overlap(recipe: Recipe) -> Iterator[Finding]:
    lrs = [(m, _lr_window(m, f)) for m, f in _facts(recipe) if f[4] is not None and "lr" in f[4].emits]
    for i, (a, wa) in enumerate(lrs):
        for b, wb in lrs[i + 1:]:
            if a.stage != b.stage:
                continue
            groups_a, groups_b = a.args.get("param_groups"), b.args.get("param_groups")
            if isinstance(groups_a, tuple) and isinstance(groups_b, tuple) and not set(groups_a) & set(groups_b):
                continue
            if wa is None or wb is None:
                continue
            if wa[0] == wa[1] and wb[0] == wb[1]:
                clash = wa[0] == wb[0]
            elif wa[0] == wa[1]:
                clash = wb[0] < wa[0] < wb[1]
            elif wb[0] == wb[1]:
                clash = wa[0] < wb[0] < wa[1]
            else:
                clash = max(wa[0], wb[0]) < min(wa[1], wb[1])
            if clash:
                yield Finding(
                    codes.E004,
                    f"{b.type} and {a.type} (line {a.span.line}) both set the learning rate "
                    f"around epoch {max(wa[0], wb[0]):g}",
                    "Make their epoch ranges follow each other.",
                    b,
                )


def rule_double_pruning(recipe: Recipe) -> Iterator[Finding]:
    seen: dict[str, list[tuple[Modifier, tuple[float, float]]]] = {}  # by name, in order
    for m, (_, _, _, window, declared) in _facts(recipe):
        if window is None or declared is None or not declared.prunes:
            continue
        for i, name in exact_params(m):
            others = seen.get(name)
            if others is None:
                seen[name] = [(m, window)]
                continue
            for other, other_window in others:
                if other is m or other.stage != m.stage:
                    continue
                if max(window[0], other_window[0]) < min(window[1], other_window[1]):
                    yield Finding(
                        codes.E005,
                        f"'{name}' is also pruned by the {other.type} on line {other.span.line} "
                        "over overlapping epochs",
                        "Give each parameter to one pruning modifier, or make the ranges follow each other.",
                        m, ("params",) if i is None else ("params", i),
                    )
                    break
            others.append((m, window))  # (m's own entries are skipped above)


_SCALARS = frozenset({float, int, str, bool, type(None), tuple})  # never a Mapping


def rule_bad_regex(recipe: Recipe) -> Iterator[Finding]:
    from ..params.selectors import selector_items

    for m in recipe.modifiers:
        args: Mapping[Any, Any] = m.args._data if m.args.__class__ is FrozenDict else m.args
        params, final = args.get("params"), args.get("final_sparsity", ())
        mapping = final.__class__ is FrozenDict or (final.__class__ not in _SCALARS and isinstance(final, Mapping))
        if not mapping and (params is None or plain_names(params)):
            continue  # no selector, or no pattern
        groups: list[tuple[tuple[Any, ...], Any]] = [(("params",), params)]
        if mapping:
            groups += [(("final_sparsity", k), v) for k, v in final.items()]
        for path, params in groups:
            for index, selector in enumerate(params) if params.__class__ is tuple else selector_items(params):
                if not (isinstance(selector, str) and selector.startswith("re:")):
                    continue
                verdict = pattern_verdict(selector)
                if verdict is not None:
                    keys = path + ((index,) if index is not None else ())
                    yield Finding(codes.P005, f"{selector}: {verdict[0]}", verdict[1], m, keys)


def rule_declared(recipe: Recipe) -> Iterator[Finding]:
    """Each modifier's own rules (``ModifierSpec.rules``)."""
    for m, fact in _facts(recipe):
        declared = fact[4]
        if declared is not None and declared.rules:
            for rule in declared.rules:
                yield from rule(m)


def rule_update_count(recipe: Recipe) -> Iterator[Finding]:
    """M005 when a modifier's update grid (``update_frequency`` for gradual pruning and AC/DC,
    ``lr_kwargs.step_size`` for StepLR) has more than :data:`MAX_EVENTS` points between its
    start and end epochs: no run could make that many updates, and a schedule preview or a
    plan that enumerated them would never finish."""
    for m, (_, _, _, window, declared) in _facts(recipe):
        if window is None or window[1] == math.inf or declared is None:
            continue
        grid = track_kind(m.type).grid
        if grid is None or not grid.applies(m):
            continue
        key, every = grid.key, as_number(grid.every(m))
        if every is None or every <= 0:
            continue
        updates = (window[1] - window[0]) / every
        if updates > MAX_EVENTS:
            yield Finding(
                codes.M005,
                f"'{'.'.join(key)}' {every:g} over epochs {window[0]:g} to {window[1]:g} makes "
                f"{updates:.3g} updates; the limit is {MAX_EVENTS:,}",
                f"Raise {key[-1]} or shorten the epoch range (at most {MAX_EVENTS:,} updates "
                "per modifier).",
                m, key,
            )


def rule_after_end(recipe: Recipe) -> Iterator[Finding]:
    """E006: what a recipe schedules at or after its end (``max_epochs``) never happens: a
    MultiStepLR milestone of a modifier that runs to the end; an EpochRangeModifier ending
    before another modifier's end does not end training."""
    mods = [m for m in recipe.modifiers if isinstance(m.args, Mapping)]
    end = max_epochs(mods)
    if end <= 0:
        return
    last = max(mods, key=lambda m: max((v for k in ("start_epoch", "end_epoch")
                                        if (v := as_number(m.args.get(k))) is not None and v != -1),
                                       default=-1.0))
    for m in mods:
        args = m.args
        if m.type == "EpochRangeModifier":
            stop, begin = as_number(args.get("end_epoch")), as_number(args.get("start_epoch"))
            if begin is not None and stop is not None and stop != -1 and stop < begin:
                continue  # end before start: E001
            if stop is not None and stop != -1 and stop < end and last is not m:
                yield Finding(
                    codes.E006, f"EpochRangeModifier ends at epoch {stop:g}, but {last.type} "
                    f"(line {last.span.line}) runs to epoch {end}: the recipe lasts {end} epochs "
                    "(max_epochs), and what is scheduled after this end still runs",
                    f"End {last.type} by epoch {stop:g}, or set this end_epoch to {end}.",
                    m, ("end_epoch",),
                )
            continue
        if args.get("lr_class") != "MultiStepLR" or as_number(args.get("end_epoch", -1)) != -1:
            continue
        kwargs = args.get("lr_kwargs")
        marks = kwargs.get("milestones") if isinstance(kwargs, Mapping) else None
        for i, ms in enumerate(marks if isinstance(marks, tuple) else ()):
            value = as_number(ms)
            if value is not None and value >= end:
                yield Finding(
                    codes.E006, f"milestone {ms!r} is at or after the recipe's end (epoch {end}, "
                    "max_epochs): the learning rate never changes there",
                    f"Use milestones before epoch {end}, or make the recipe last longer.",
                    m, ("lr_kwargs", "milestones", i),
                )


RULES: tuple[Callable[[Recipe], Iterable[Finding]], ...] = (
    rule_end_before_start,
    rule_update_count,
    rule_declared,
    rule_nm_mask_gradual,
    rule_lr_overlap,
    rule_double_pruning,
    rule_bad_regex,
    rule_after_end,
)


class WithoutModifiers:
    """``recipe`` as the rules see it: its modifiers without those whose arguments already
    failed (a wrong type, a number beyond a float's range), which the rules could not read;
    ``_facts``: each with what the rules read of it, computed once for all the rules."""

    def __init__(self, recipe: Recipe, bad: set[int]):
        self._recipe = recipe
        self.modifiers = [m for m in recipe.modifiers if id(m) not in bad] if bad else recipe.modifiers
        declaration = all_specs().get
        self._facts = [(m, fact_of(m, declaration)) for m in self.modifiers]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._recipe, name)
