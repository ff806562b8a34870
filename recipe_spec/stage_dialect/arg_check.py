"""Check one stage/group modifier entry (name + argument mapping) against the catalogue.

:func:`check_modifier` is pure: it takes the arguments as loaded from YAML and returns
:class:`Problem` values whose ``path`` points inside the arguments; the caller adds file
positions. With a :class:`~recipe_spec.stage_dialect.versions.Compat` it applies that
release's rules: every problem is an error (an argument that release lacks is an error even
where the release silently ignored it, since the setting has no effect), except
deprecations, which warn. Without one it checks every release that has the modifier: what
all of them reject is an error, what only some reject is a warning naming them.

Strings beginning with ``eval(`` are not type-checked (the caller evaluates or reports them).
The arguments may be frozen (FrozenDict, tuples): messages show values as plain dicts/lists.

>>> [(p.kind, p.hint) for p in check_modifier(
...     "QuantizationModifier", {"sheme": "W8A8"}, Compat.parse("llmcompressor"))]
[('unknown_arg', 'did you mean scheme?')]
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..text.frozen import thaw
from . import quant_args as qa
from .catalogue import all_stage_names, stage_variants, variant_in
from .legacy_scheme import check_legacy
from .quant_args import Rec, check_quant, type_problems
from .spec import Renamed
from .versions import TIMELINE, TOOLS, Compat, ToolVersion, summarize, tools_in_scope

__all__ = ["Problem", "check_modifier", "KINDS"]

#: Every ``Problem.kind``.
KINDS = frozenset({
    "unknown_modifier", "dotted_name", "unknown_arg", "removed_arg", "renamed_arg",
    "missing_required", "type", "enum", "preset", "null_args", "misplaced", "deprecated",
    "not_in_version", "range", "sparsity", "nm", "order",
})


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a modifier entry.

    ``path``: keys/indices inside the arguments (empty: the modifier itself); ``severity``:
    ``"error"`` or ``"warning"``; ``kind``: one of :data:`KINDS`; ``message``: what is
    wrong; ``hint``: what to write instead (may be empty); ``versions``: which releases
    reject it, in words (``"llm-compressor ≥0.8"``, ``"every version"``).
    """

    path: tuple[str | int, ...]
    severity: str
    kind: str
    message: str
    hint: str = ""
    versions: str = ""


def suggest(word: str, candidates: Sequence[str]) -> str | None:
    """The closest candidate to a misspelt ``word`` (case-insensitive first), or None."""
    for c in candidates:
        if c.lower() == word.lower():
            return c
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def _is_empty(args: Any) -> bool:
    return args is None or (isinstance(args, Mapping) and not args)


def check_modifier(name: str, args: Any, compat: Compat | None) -> list[Problem]:
    """Every problem of the entry ``{name: args}`` (see the module docstring)."""
    label = compat.label if compat else "every version"
    if "." in name:
        bare = name.rsplit(".", 1)[-1]
        hint = f"write {bare}" if stage_variants(bare) else ""
        return [Problem((), "error", "dotted_name", f"{name}: modifiers are named by their bare "
                        "class name, not an import path", hint, label)]
    variants = stage_variants(name)
    if not variants:
        close = suggest(name, all_stage_names())
        return [Problem((), "error", "unknown_modifier", f"no modifier {name} in this dialect",
                        f"did you mean {close}?" if close else "", label)]
    if variants[0].renamed_to:
        return [Problem((), "error", "not_in_version", f"{name} exists in no release",
                        f"write {variants[0].renamed_to}", label)]
    where, missing = _where(name)
    if compat is not None and compat.pair not in where:
        return [Problem((), "error", "not_in_version",
                        f"{name} does not exist in {compat.label} (it exists in "
                        f"{summarize(where)})", "", compat.label)]
    pairs = [compat.pair] if compat else list(where)
    out: list[Problem] = []
    if compat is None and missing:
        out.append(Problem((), "warning", "not_in_version",
                           f"{name} does not exist in {summarize(missing)}", "",
                           summarize(missing)))
    if _is_empty(args):
        return out + _empty(name, args, pairs, compat)
    if not isinstance(args, Mapping):
        return out + [Problem((), "error", "type", f"{name}'s arguments must be a mapping, got "
                              f"{type(thaw(args)).__name__}", "", label)]
    typed: dict[tuple[str, int], list[Rec]] = {}
    parts = [(lo, hi, group, mask, _check_in(name, args, steps, tail, group[0], typed))
             for lo, hi, group, mask, steps, tail in _alike(name, tuple(args), compat.pair if compat else None,
                                                           tools_in_scope())]
    return out + _merge(parts, compat) + _order(args, label)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def _order(args: Mapping[Any, Any], label: str) -> list[Problem]:
    """``end`` before ``start`` (every release runs such a modifier never, or for no step);
    ``end: -1`` means "to the end"."""
    start, end = _number(args.get("start")), _number(args.get("end"))
    if start is None or end is None or end == -1 or end >= start or start < -1 or end < -1:
        return []
    return [Problem(("end",), "error", "order", f"end {end:g} is before start {start:g}",
                    f"write an end after {start:g}, or end: -1 to run to the end of training", label)]


def _where(name: str) -> tuple[tuple[ToolVersion, ...], tuple[ToolVersion, ...]]:
    """The releases in scope that have a modifier ``name``, and those that lack it."""
    return _where_in(name, tools_in_scope())


@functools.lru_cache(maxsize=1024)
def _where_in(name: str, tools: tuple[str, ...]) -> tuple[tuple[ToolVersion, ...], tuple[ToolVersion, ...]]:
    where = tuple(p for p in TIMELINE if p[0] in tools and variant_in(name, p))
    return where, tuple(p for p in TIMELINE if p[0] in tools and p not in where)


#: Position of each release in the timeline (every tool, whatever the scope).
_POS: dict[ToolVersion, int] = {p: i for i, p in enumerate(TIMELINE)}


@functools.lru_cache(maxsize=4096)
def _alike(name: str, keys: tuple[Any, ...], only: ToolVersion | None,
           tools: tuple[str, ...]) -> tuple[tuple[Any, ...], ...]:
    """The releases to check (``only``, or all that have ``name``) in groups where arguments
    named ``keys`` meet the same rules (the same schemas, deprecations, renames, quantization
    fields and required arguments), so :func:`_check_in` finds the same problems in each
    release of a group. Each group as ``(position of its oldest release, of its newest,
    releases, bit mask of the positions, steps, tail)``, ordered by oldest release, where
    steps and tail are :func:`_plan`'s for the group's first release."""
    pairs = (only,) if only is not None else _where_in(name, tools)[0]
    known, renames = _known_and_renamed(name)
    given = frozenset(keys)
    groups: dict[tuple[Any, ...], list[ToolVersion]] = {}
    for pair in pairs:
        spec = variant_in(name, pair)
        assert spec is not None
        present = spec.args_in(pair)
        sig: list[Any] = [tuple(r for r in spec.required_in(pair) if r not in given)]
        for key in keys:
            if not isinstance(key, str):
                continue
            if key in present:
                shape = spec.quant.get(key)
                sig.append((0, id(present[key].schema), id(spec.deprecation_in(key, pair)),
                            shape, qa.ct_version(pair) if shape else None))
                continue
            rename = next((r for r in renames if r.old == key and r.new in present), None)
            if rename is not None:
                sig.append((1, id(rename)))
            elif key in known:
                sig.append((2, _absent(name, key, pair)))
            else:
                sig.append((3, frozenset(present)))
        groups.setdefault(tuple(sig), []).append(pair)
    parts = [(min(_POS[p] for p in g), max(_POS[p] for p in g), tuple(g),
              sum(1 << _POS[p] for p in g), *_plan(name, keys, g[0])) for g in groups.values()]
    return tuple(sorted(parts, key=lambda part: part[0]))


def _old_parser(pair: ToolVersion) -> bool:
    """Releases whose parser evaluates args and fails on empty ones (before llmc 0.7)."""
    return pair[0] == "sparseml" or pair[1].parts < (0, 7)


def _empty(name: str, args: Any, pairs: list[ToolVersion], compat: Compat | None) -> list[Problem]:
    bad = []
    for p in pairs:
        spec = variant_in(name, p)
        if args is None or _old_parser(p) or (spec is not None and spec.required_in(p)):
            bad.append(p)
    if not bad:
        return []
    required = sorted({r for p in pairs for r in (variant_in(name, p) or _NONE).required_in(p)})
    what = "null" if args is None else "empty"
    msg = (f"{name} has {what} arguments: SparseML and llm-compressor <0.7 fail with 'args must "
           "be set before evaluating'" if args is not None else
           f"{name} has null arguments: every parser fails on them")
    if required:
        msg += f"; required: {', '.join(required)}"
    hint = (f"give {', '.join(required)}" if required else "write at least one argument")
    severity = "error" if compat is not None or len(bad) == len(pairs) else "warning"
    return [Problem((), severity, "null_args", msg, hint,
                    compat.label if compat else summarize(bad))]


def _plan(name: str, keys: tuple[Any, ...], pair: ToolVersion) -> tuple[tuple[Any, ...], tuple[Rec, ...]]:
    """What :func:`_check_in` does with arguments named ``keys`` in one release: per key a
    step ``(kind, record, schema, quantization shape, release's arguments)`` (kind 0: report
    ``record``; 1: a declared argument, check its value (``record``: its deprecation or
    None); 2: unknown here, ask :func:`_unknown`), and the records that follow them (the
    required arguments not given)."""
    spec = variant_in(name, pair)
    assert spec is not None
    present = spec.args_in(pair)
    known, renames = _known_and_renamed(name)
    steps: list[tuple[Any, ...]] = []
    for key in keys:
        if not isinstance(key, str):
            steps.append((0, Rec((key,), "type", f"argument names must be strings, got {key!r}"),
                          None, None, None))
            continue
        path = (key,)
        if key in present:
            dep = spec.deprecation_in(key, pair)
            steps.append((1, None if dep is None else Rec(path, "deprecated", dep.message),
                          present[key].schema, spec.quant.get(key), None))
            continue
        rename = next((r for r in renames if r.old == key and r.new in present), None)
        if rename is not None:
            steps.append((0, Rec(path, "renamed_arg", f"{name} has no argument {key}: it is called "
                                 f"{rename.new}" + (f" ({rename.note})" if rename.note else "")
                                 + "; SparseML ignores the old name, llm-compressor 0.7+ refuses it",
                                 f"write {rename.new}"), None, None, None))
        elif key in known:
            steps.append((0, _absent(name, key, pair), None, None, None))
        else:
            steps.append((2, None, None, None, present))
    tail = tuple(Rec((), "missing_required", f"{name} requires {req}", f"give {req}", subject=req)
                 for req in spec.required_in(pair) if req not in keys)
    return tuple(steps), tail


def _check_in(name: str, args: Mapping[Any, Any], steps: tuple[tuple[Any, ...], ...],
              tail: tuple[Rec, ...], pair: ToolVersion, typed: dict[tuple[Any, int], list[Rec]]) -> list[Rec]:
    """Problems of ``args`` in one release, following :func:`_plan`'s ``steps`` and ``tail``
    (made for the same keys, in the same order). ``typed``: what was found so far for an
    argument and a schema, or an argument and a release's argument set (the same in every
    release that declares them alike)."""
    recs: list[Rec] = []
    for (key, value), (kind, rec, schema, shape, present) in zip(args.items(), steps, strict=True):
        if kind == 1:
            if rec is not None:
                recs.append(rec)
            found = typed.get((key, id(schema)))
            if found is None:
                found = typed[(key, id(schema))] = type_problems(value, schema, (key,))
            if found:
                recs += found
            if shape is not None and value is not None:
                recs += (check_legacy(shape[7:], value, (key,)) if shape.startswith("legacy:")
                         else check_quant(shape, value, pair, (key,)))
        elif kind == 2:
            # the same answer in every release that takes the same arguments
            found = typed.get((key, id(present)))
            if found is None:
                found = typed[(key, id(present))] = [_unknown(name, key, value, present)]
            recs += found
        else:
            recs.append(rec)
    if tail:
        # a misspelt required argument is reported once: as the unknown key, with its hint
        typos = {r.hint[len("did you mean "):-1] for r in recs
                 if r.kind == "unknown_arg" and r.hint.startswith("did you mean ")}
        recs += [r for r in tail if r.subject not in typos]
    return recs


@functools.lru_cache(maxsize=1024)
def _known_and_renamed(name: str) -> tuple[frozenset[str], tuple[Renamed, ...]]:
    """Every argument name ``name`` takes in some release, and its renames."""
    variants = stage_variants(name)
    return (frozenset(a.name for s in variants for a in s.spec.args),
            tuple(r for s in variants for r in s.renamed))


@functools.lru_cache(maxsize=4096)
def _absent(name: str, key: str, pair: ToolVersion) -> Rec:
    """``key`` exists in some release but not this one: removed, or not there yet."""
    spec = variant_in(name, pair)
    assert spec is not None
    tool, version = pair
    earlier = [p for p in TIMELINE
               if (p[0] == tool and p[1] < version) or TOOLS.index(p[0]) < TOOLS.index(tool)]
    had = any(key in (s.args_in(p)) for p in earlier for s in stage_variants(name) if s.exists_in(p))
    hint = spec.instead.get(key, "")
    if key == "group" and not hint:
        hint = "delete it: the group comes from the `<group>_modifiers:` key"
    kind = "removed_arg" if had else "not_in_version"
    return Rec((key,), kind, f"{name} has no argument {key}" + (" (removed)" if had else ""),
               hint)


def _unknown(name: str, key: str, value: Any, present: Mapping[str, Any]) -> Rec:
    """``key`` is in no release of ``name``: misplaced, or misspelt."""
    group_like = isinstance(value, Mapping) and not _SCHEME_KEYS.isdisjoint(value)
    return _unknown_cached(name, key, group_like, frozenset(present))


_SCHEME_KEYS = frozenset(f.name for f in qa.SCHEME_FIELDS)


@functools.lru_cache(maxsize=4096)
def _unknown_cached(name: str, key: str, group_like: bool, present: frozenset[str]) -> Rec:
    path = (key,)
    if key in all_stage_names() or key.endswith("Modifier"):
        return Rec(path, "misplaced", f"modifier {key} is nested inside {name}'s arguments",
                   f"move {key}: out, next to {name}: in the same group")
    if "config_groups" in present:
        scheme_keys = {f.name for f in qa.SCHEME_FIELDS}
        args_keys = {f.name for f in qa.ARGS_FIELDS}
        if group_like:
            return Rec(path, "misplaced", f"{key} looks like a quantization group but sits "
                       f"directly under {name}", "move it under config_groups:")
        if key in scheme_keys - {"targets"} or key in args_keys:
            where = "config_groups: → <group>:" if key in scheme_keys else \
                "config_groups: → <group> → weights: (or input_activations:)"
            return Rec(path, "misplaced", f"{key} is a quantization scheme field, not an "
                       f"argument of {name}", f"move it under {where}")
    close = suggest(key, sorted(present))
    if close:
        return Rec(path, "unknown_arg", f"{name} has no argument {key}", f"did you mean {close}?")
    for other in all_stage_names():
        if other == name:
            continue
        other_args = {a.name for s in stage_variants(other) for a in s.spec.args}
        hit = suggest(key, sorted(other_args))
        if hit and hit not in present:
            return Rec(path, "unknown_arg", f"{name} has no argument {key}",
                       f"{hit} is an argument of {other}, not of {name}")
    return Rec(path, "unknown_arg", f"{name} has no argument {key}",
               f"{name} takes: {', '.join(sorted(present))}")


_VERSIONED = frozenset({"removed_arg", "not_in_version", "renamed_arg", "preset",
                        "missing_required", "deprecated"})


def _merge(parts: Sequence[tuple[int, int, tuple[ToolVersion, ...], int, list[Rec]]],
           compat: Compat | None) -> list[Problem]:
    """One Problem per place. ``parts``: groups of releases that found the same records (see
    :func:`_alike`), with those records. Without compat, a place is judged over the releases
    that accept every enclosing key: error where all of them reject it, else a warning.

    Works group by group: the answer is the one of judging each release on its own (places
    in the order the releases, oldest first, find them; the newest release's record speaks
    for a place)."""
    firsts: list[dict[tuple[Any, ...], Rec]] = []  # per part: place -> its first record
    slots: dict[tuple[Any, ...], None] = {}
    for part in parts:
        first: dict[tuple[Any, ...], Rec] = {}
        for rec in part[4]:
            slot = (rec.path, rec.subject)
            if slot not in first:
                first[slot] = rec
        firsts.append(first)
        slots.update(dict.fromkeys(first))
    flagged: list[set[tuple[Any, ...]]] | None = None  # per part: places its releases reject
    everywhere = len(parts)
    out: list[Problem] = []
    for slot in slots:
        path = slot[0]
        having = [i for i, first in enumerate(firsts) if slot in first]
        newest = firsts[having[-1] if len(having) == 1 else max(having, key=lambda i: parts[i][1])][slot]
        if compat is not None:
            sev = "warning" if newest.kind == "deprecated" else "error"
            msg = newest.message + (f" in {compat.label}" if newest.kind in _VERSIONED else "")
            out.append(Problem(path, sev, newest.kind, msg, newest.hint, compat.label))
            continue
        if len(path) <= 1:
            relevant = range(everywhere)
        else:
            if flagged is None:
                flagged = [{r.path for r in first.values() if r.path} for first in firsts]
            relevant = [i for i, rejects in enumerate(flagged)
                        if not any(path[:k] in rejects for k in range(1, len(path)))]
        if newest.kind != "deprecated" and (len(having) == everywhere
                                            or all(slot in firsts[i] for i in relevant)):
            mask = 0
            for i in relevant:
                mask |= parts[i][3]
            out.append(Problem(path, "error", newest.kind, newest.message, newest.hint,
                               _summarize_mask(mask)))
            continue
        by_kind: dict[str, list[int]] = {}
        for i in having:
            by_kind.setdefault(firsts[i][slot].kind, []).append(i)
        for kind, where in by_kind.items():
            rec = firsts[max(where, key=lambda i: parts[i][1])][slot]
            mask = 0
            for i in where:
                mask |= parts[i][3]
            words = _summarize_mask(mask)
            out.append(Problem(path, "warning", kind, f"{rec.message} in {words}", rec.hint, words))
    return out


def _summarize_mask(mask: int) -> str:
    """:func:`summarize` of the releases whose positions are the bits of ``mask``."""
    return _summarize_mask_in(mask, tools_in_scope())


@functools.lru_cache(maxsize=1024)
def _summarize_mask_in(mask: int, tools: tuple[str, ...]) -> str:
    return summarize([p for p, i in _POS.items() if mask >> i & 1])


class _NoSpec:
    def required_in(self, pair: ToolVersion) -> list[str]:
        return []


_NONE = _NoSpec()
