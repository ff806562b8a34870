"""Validation of a loaded recipe: modifier schemas and the rules beyond them.

Rules are small generators that yield :class:`Finding` values (a code, a message, a hint and
*which argument* of *which modifier* is wrong); they never know lines or columns. One
dispatcher, :func:`validate_recipe`, turns findings into positioned diagnostics.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .checks.arguments import (  # noqa: F401  (_jsonable: the JSON form, for tests and tools)
    FLOAT_INT_LIMIT,
    _args_ok,
    _bad_numbers,
    _deprecated_findings,
    _exact_params,
    _Fact,
    _fact,
    _jsonable,
    _num,
    _number_findings,
    _numbers_ok,
    _pattern_verdict,
    _plain_names,
    _schema_findings,
    _schema_ok,
)
from .checks.schemas import modifier_names
from .diagnostics import codes
from .diagnostics.base import Diagnostic
from .diagnostics.codes import Code
from .loader import RecipeInput, check
from .modifiers import all_specs, spec
from .recipe.findings import Finding
from .recipe.model import Modifier, Recipe
from .schedule.events import MAX_EVENTS
from .text.frozen import FrozenDict
from .text.locs import gc_paused
from .text.variables import did_you_mean

__all__ = [
    "Finding", "validate", "validate_recipe", "backend_findings", "positioned", "apply_noqa", "RULES",
    "CORE_DIALECT_MODIFIERS",
]

#: One-shot modifiers of SparseML's LLM ("core") dialect.
CORE_DIALECT_MODIFIERS = frozenset(
    {
        "SparseGPTModifier", "SparseOPTModifier", "SparseLlamaModifier", "GPTQModifier",
        "SmoothQuantModifier", "WandaPruningModifier", "LegacyQuantizationModifier",
        "LogarithmicEqualizationModifier", "OutputDistillationModifier",
    }
)
_NM = re.compile(r"^(\d+):(\d+)$")


# -- rules beyond the schema (schema and number checks: recipe_spec.checks.arguments) -------
def _range(m: Modifier) -> tuple[float, float] | None:
    return _fact(m, all_specs().get)[3]


def _facts(recipe: Recipe) -> list[tuple[Modifier, _Fact]]:
    """Each modifier of ``recipe`` with its :data:`_Fact` (shared by the rules of one
    :func:`validate_recipe` call through :class:`_WithoutModifiers`)."""
    facts = getattr(recipe, "_facts", None)
    if facts is None:
        declaration = all_specs().get
        facts = [(m, _fact(m, declaration)) for m in recipe.modifiers]
    return facts


def _rule_keys(m: Modifier) -> set[Any]:
    """The arguments a modifier's own rules report on."""
    declared = spec(m.type)
    return {f.keys[0] for rule in (declared.rules if declared else ()) for f in rule(m) if f.keys}


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
            value = _num(m.args.get(key))
            if value is not None and value != 0 and abs(value - target) > 1e-2:
                yield Finding(
                    codes.M010,
                    f"mask_type '{mask}' always gives sparsity {target:g}, but {key} is {value:g}",
                    f"Set init_sparsity and final_sparsity to {target:g}.",
                    m, (key,),
                )


def _lr_window(m: Modifier, fact: _Fact) -> tuple[float, float] | None:
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
        for i, name in _exact_params(m):
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
    from .params.selectors import selector_items

    for m in recipe.modifiers:
        args: Mapping[Any, Any] = m.args._data if m.args.__class__ is FrozenDict else m.args
        params, final = args.get("params"), args.get("final_sparsity", ())
        mapping = final.__class__ is FrozenDict or (final.__class__ not in _SCALARS and isinstance(final, Mapping))
        if not mapping and (params is None or _plain_names(params)):
            continue  # no selector, or no pattern
        groups: list[tuple[tuple[Any, ...], Any]] = [(("params",), params)]
        if mapping:
            groups += [(("final_sparsity", k), v) for k, v in final.items()]
        for path, params in groups:
            for index, selector in enumerate(params) if params.__class__ is tuple else selector_items(params):
                if not (isinstance(selector, str) and selector.startswith("re:")):
                    continue
                verdict = _pattern_verdict(selector)
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
        kind = declared.schedule
        if kind in ("gradual", "acdc"):
            key: tuple[Any, ...] = ("update_frequency",)
            every = _num(m.args.get("update_frequency"))
        elif kind == "lr_class" and m.args.get("lr_class") == "StepLR":
            kwargs = m.args.get("lr_kwargs")
            key = ("lr_kwargs", "step_size")
            every = _num(kwargs.get("step_size")) if isinstance(kwargs, Mapping) else None
        else:
            continue
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


RULES: tuple[Callable[[Recipe], Iterable[Finding]], ...] = (
    rule_end_before_start,
    rule_update_count,
    rule_declared,
    rule_nm_mask_gradual,
    rule_lr_overlap,
    rule_double_pruning,
    rule_bad_regex,
)


def backend_findings(recipe: Recipe, backend: str, capabilities: frozenset[str]) -> Iterator[Finding]:
    """B001 for each declared modifier that ``backend`` (with ``capabilities``) cannot run, and
    for each argument given a non-default value that needs a capability it lacks."""
    for m in recipe.modifiers:
        declared = spec(m.type)
        if declared is None or not declared.runtime:
            continue
        missing = declared.needs - capabilities
        if missing:
            others = sorted(
                b for b, caps in _backend_capabilities().items() if b != backend and declared.needs <= caps
            )
            hint = (f"Backends with it: {', '.join(others)}." if others else
                    "No installed backend runs it yet; remove it, or validate without --backend.")
            yield Finding(
                codes.B001,
                f"{m.type} is not available on the {backend} backend (it needs "
                f"{', '.join(sorted(missing))})",
                hint, m,
            )
            continue
        for arg in declared.args:
            if arg.needs and arg.name in m.args and m.args[arg.name] != arg.default and not arg.needs <= capabilities:
                yield Finding(
                    codes.B001,
                    f"{m.type} argument `{arg.name}` is not supported on the {backend} backend "
                    f"(it needs {', '.join(sorted(arg.needs - capabilities))})",
                    f"Remove `{arg.name}` or set it to its default ({arg.default!r}).",
                    m, (arg.name,), on_key=True,
                )


def _backend_capabilities() -> dict[str, frozenset[str]]:
    from .registry import installed_backends

    return {b.name: frozenset(b.capabilities) for b in installed_backends()}


def _modifier_findings(
    recipe: Recipe, backend: str | None, numbers_ok: Mapping[int, bool] | None = None,
    checked: set[int] | frozenset[int] = frozenset(),
) -> Iterator[Finding]:
    """``checked``: the modifiers whose arguments already passed :func:`_args_ok`."""
    known = _known_names()
    dialect_reported = False
    for m in recipe.modifiers:
        if m.type in CORE_DIALECT_MODIFIERS:
            if not dialect_reported:
                dialect_reported = True
                yield Finding(
                    codes.S007,
                    f"{m.type} is a one-shot modifier of SparseML's 'core' (LLM) dialect, "
                    "not a training-time modifier",
                    "recipe-spec reads the training-time '!Modifier' dialect; run this file "
                    "with a core-dialect tool, or remove the one-shot modifiers.",
                    m,
                )
            continue
        if m.type not in known:
            hint = did_you_mean(m.type, known) or "`recipe-spec schema` lists every modifier."
            yield Finding(codes.M001, f"unknown modifier '{m.type}'", hint, m)
            continue
        if id(m) in checked:
            yield from _deprecated_findings(m)
            continue
        ok = numbers_ok.get(id(m)) if numbers_ok is not None else None
        numbers = [] if ok or (ok is None and _numbers_ok(m.args)) else _number_findings(m)
        if numbers:
            # The schema and the rules compute with the numbers: only these are reported.
            yield from numbers
        elif not _schema_ok(m):
            yield from _schema_findings(m)
    if backend is not None:
        caps = _backend_capabilities().get(backend)
        if caps is None:
            from .registry import available_backends

            raise ValueError(f"unknown backend {backend!r}; available: {', '.join(available_backends())}")
        yield from backend_findings(recipe, backend, caps)


@functools.cache
def _known_names() -> frozenset[str]:
    return frozenset(modifier_names())


def positioned(f: Finding, recipe: Recipe) -> Diagnostic:
    """The diagnostic of finding ``f`` at the argument (or modifier) it names."""
    span = f.modifier.key_span(f.keys[0]) if f.on_key and f.keys else (
        f.modifier.value_span(*f.keys) if f.keys else f.modifier.span
    )
    code = f.code
    if code.__class__ is Code and span is not None:  # what Code.__call__ and in_file give, made once
        return Diagnostic(
            code.id, f.severity or code.severity, f.message, f.hint, recipe.path,
            span.line, span.column, span.end_line, span.end_column,
        )
    return code(f.message, f.hint, span, f.severity).in_file(recipe.path)


def validate_recipe(recipe: Recipe, backend: str | None = None, compat: Any = None) -> list[Diagnostic]:
    """Every finding about ``recipe`` (schemas and rules), positioned, in file order.

    ``compat``: for a stage/group recipe (``recipe.dialect == "core"``), the tool release
    whose rules apply (a :class:`recipe_spec.core_dialect.Compat` or its text, e.g.
    ``"llmcompressor==0.8"``); None checks every release."""
    if recipe.dialect == "core":
        from .core_dialect.validate import validate_core

        return validate_core(recipe, backend, compat)
    known = _known_names()
    checked = {id(m) for m in recipe.modifiers if m.type in known and _args_ok(m)}  # the usual case
    numbers_ok = {id(m): id(m) in checked or _numbers_ok(m.args) for m in recipe.modifiers}
    findings = list(_modifier_findings(recipe, backend, numbers_ok, checked))
    bad = {id(f.modifier) for f in findings if f.code.id in ("M001", "S007")}
    bad |= {key for key, ok in numbers_ok.items() if not ok}
    view = _WithoutModifiers(recipe, bad)  # rules never see bad arguments
    for rule in RULES:
        found = rule(view)  # type: ignore[arg-type]
        findings.extend([f for f in found if id(f.modifier) not in bad] if bad else found)
    out = [positioned(f, recipe) for f in findings]
    return sorted(out, key=lambda d: (d.line, d.column, d.code))


class _WithoutModifiers:
    """``recipe`` as the rules see it: its modifiers without those whose arguments already
    failed (a wrong type, a number beyond a float's range), which the rules could not read;
    ``_facts``: each with what the rules read of it, computed once for all the rules."""

    def __init__(self, recipe: Recipe, bad: set[int]):
        self._recipe = recipe
        self.modifiers = [m for m in recipe.modifiers if id(m) not in bad] if bad else recipe.modifiers
        declaration = all_specs().get
        self._facts = [(m, _fact(m, declaration)) for m in self.modifiers]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._recipe, name)


_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]\d{3}(?:\s*,\s*[A-Z]\d{3})*))?", re.I)


def apply_noqa(diagnostics: Sequence[Diagnostic], text: str) -> list[Diagnostic]:
    """``diagnostics`` without those silenced by ``# noqa`` / ``# noqa: CODE`` on their line."""
    if not diagnostics or "noqa" not in text.lower():  # most files have none (lower(): 7x a re.I search)
        return list(diagnostics)
    lines = text.splitlines()
    kept = []
    for d in diagnostics:
        line = lines[d.line - 1] if 0 < d.line <= len(lines) else ""
        match = _NOQA.search(line)
        if match:
            listed = match.group("codes")
            if listed is None or d.code in {c.strip().upper() for c in listed.split(",")}:
                continue
        kept.append(d)
    return kept


def validate(
    recipe: RecipeInput,
    variables: Mapping[str, Any] | None = None,
    backend: str | None = None,
    compat: Any = None,
) -> list[Diagnostic]:
    """Load and validate ``recipe`` (a path or text): every diagnostic, in file order.
    ``compat`` as in :func:`validate_recipe`.

    >>> [d.code for d in validate("modifiers:\\n  - !EpochRangeModifier {start_epoch: 5, end_epoch: 2}")]
    ['E001']
    """
    with gc_paused():  # what one file makes dies with it: no collection need look at it
        loaded, diagnostics = check(recipe, variables)
        if loaded is not None:
            diagnostics = diagnostics + validate_recipe(loaded, backend, compat)
        text = loaded.source.text if loaded is not None and loaded.source is not None else _text_of(recipe)
        del loaded
        return apply_noqa(diagnostics, text) if text else diagnostics


def _text_of(recipe: RecipeInput) -> str:
    import os

    try:
        if isinstance(recipe, str) and ("\n" in recipe or not os.path.exists(recipe)):
            return recipe
        with open(os.fspath(recipe), encoding="utf-8", errors="replace") as f:  # type: ignore[arg-type]
            return f.read(4 * 1024 * 1024)
    except (OSError, TypeError):
        return ""
