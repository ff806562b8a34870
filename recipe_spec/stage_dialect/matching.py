"""How SparseML and llm-compressor match a modifier's ``targets`` and ``ignore`` to a model.

The rules, per tool, release and kind of argument (read from the tools' sources):

- **SparseML 1.6-1.9**, and llm-compressor before 0.11 for pruning and layer targets
  (``utils/pytorch/module.py::match_layers_params``): for every module, its name (exact, or
  ``re:`` with ``re.match``, i.e. anchored at the start only), then ``type(module).__name__``
  exactly (no inheritance), then each *direct parameter* name ``"{module}.{param}"``. With
  ``kind="pruning"`` (Constant/Magnitude pruning, ``get_layers_params``) a module-name match
  alone selects nothing: only class and parameter names do. Each module is credited to the
  first target that matches it, and a target credited with nothing raises
  ``ValueError("Could not find targets [...]")`` (strict). ``__ALL__``, ``__ALL_PRUNABLE__``
  and ``__ALL_QUANTIZABLE__`` are special only as the whole ``targets`` string.
- **llm-compressor 0.11 and later** (#2284, 2026-03-03) for pruning and layer targets, and
  **0.8 and later** for quantization (compressed-tensors 0.12 ``utils/match.py``): module names
  only (exact, or ``re:`` with ``re.match``), or any class name in the module's MRO (vLLM's
  ``LinearBase`` counts as ``Linear``); ``InternalModule``s never match; unmatched targets are
  silent. Pruning keeps only modules with a ``weight``; ``__ALL_PRUNABLE__`` /
  ``__ALL_QUANTIZABLE__`` expand to class lists and ``__ALL__`` raises.
- **Quantization** in SparseML 1.8-1.9 and llm-compressor before 0.8 (compressed-tensors
  ``find_name_or_class_matches``): module name or ``type(module).__name__``, both exact or
  ``re:``; no parameter names; silent.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from ..params.checkpoint import ModelNames
from ..text.patterns import LinearPattern, PatternError
from ..text.targets import explain, linear_pattern

__all__ = ["MatchResult", "PatternReport", "Semantics", "kind_for_modifier", "match", "parse_version", "semantics"]

Kind = Literal["pruning", "layers", "quantization"]
_SPECIAL = ("__ALL__", "__ALL_PRUNABLE__", "__ALL_QUANTIZABLE__")
_EXPANSION = {"__ALL_PRUNABLE__": ("Linear", "Conv1d", "Conv2d", "Conv3d"),
              "__ALL_QUANTIZABLE__": ("Linear", "Conv2d", "Conv3d")}
_CLASS_LIKE = re.compile(r"^[A-Z][A-Za-z0-9_]*$")
_REGEX_CHARS = re.compile(r"[*+?^$|()\[\]{}\\]")
_PRUNING = {"ConstantPruningModifier", "MagnitudePruningModifier", "GMPruningModifier",
            "MovementPruningModifier", "GlobalMagnitudePruningModifier"}
_LAYERS = {"SparseGPTModifier", "WandaPruningModifier", "OutputDistillationModifier"}


def kind_for_modifier(name: str) -> Kind:
    """Which argument semantics a modifier's ``targets`` follow: parameter-level pruning,
    layer targets (SparseGPT/Wanda), or quantization and everything else."""
    if name in _PRUNING:
        return "pruning"
    if name in _LAYERS:
        return "layers"
    return "quantization"


def parse_version(version: str | Sequence[int] | None) -> tuple[int, ...] | None:
    """``"0.13"``, ``"0.10.0.3"``, ``(0, 13)`` or ``None`` (the newest) as a tuple."""
    if version is None:
        return None
    if isinstance(version, str):
        parts = re.findall(r"\d+", version.split("+")[0])
        if not parts:
            raise ValueError(f"Argument `version` must look like 0.13 or 1.8.0. Received: version={version!r}")
        return tuple(int(p) for p in parts[:4])
    return tuple(int(p) for p in version)


@dataclass(frozen=True)
class Semantics:
    """One tool's matching rules for one kind of argument (see the module docstring)."""

    label: str
    module_names: bool  # a module-name match selects the module
    parameter_names: bool  # direct parameter names "module.param" are matched too
    class_mro: bool  # any class in the MRO (True) or type(module).__name__ only (False)
    class_regex: bool  # re: patterns are also tried on the class name
    strict: bool  # an unmatched target is an error
    special: Literal["whole-string", "expand", "none"]
    ignore_classes: bool  # ignore patterns also match class names
    needs_weight: bool  # only modules with a direct `weight` are kept
    skip_internal: bool  # InternalModule subclasses never match
    class_names: bool = True  # class names are matched at all


def semantics(tool: str, version: str | Sequence[int] | None, kind: Kind) -> Semantics:
    """The rules of ``tool`` (``"sparseml"`` or ``"llmcompressor"``) at ``version`` (None =
    newest) for ``kind`` (:func:`kind_for_modifier`)."""
    v = parse_version(version)
    tool_key = tool.lower().replace("-", "").replace("_", "")
    if tool_key not in ("sparseml", "llmcompressor"):
        raise ValueError(f"Argument `tool` must be 'sparseml' or 'llmcompressor'. Received: tool={tool!r}")
    if kind not in ("pruning", "layers", "quantization"):
        raise ValueError(f"Argument `kind` must be pruning, layers or quantization. Received: kind={kind!r}")
    shown = ".".join(map(str, v)) if v else "newest"
    name = "SparseML" if tool_key == "sparseml" else "llm-compressor"
    label = f"{name} {shown} ({kind})"
    old_ct = dict(module_names=True, parameter_names=False, class_mro=False, class_regex=True, strict=False,
                  special="none", ignore_classes=True, needs_weight=False, skip_internal=tool_key != "sparseml")
    if tool_key == "sparseml" or (v is not None and v < (0, 11) and kind != "quantization"):
        if kind == "quantization":
            return Semantics(label=label, **old_ct)  # type: ignore[arg-type]
        return Semantics(label, module_names=kind == "layers", parameter_names=True, class_mro=False,
                         class_regex=False, strict=True, special="whole-string", ignore_classes=False,
                         needs_weight=False, skip_internal=False)
    if kind == "quantization" and v is not None and v < (0, 8):
        return Semantics(label=label, **old_ct)  # type: ignore[arg-type]
    return Semantics(label, module_names=True, parameter_names=False, class_mro=True, class_regex=False,
                     strict=False, special="expand" if kind == "pruning" else "none", ignore_classes=True,
                     needs_weight=kind == "pruning", skip_internal=True)


@dataclass(frozen=True)
class PatternReport:
    """What one ``targets`` or ``ignore`` pattern matched, and why it may be wrong.

    ``matched``: module names selected (for a parameter match, the owning module);
    ``parameters_matched``: the parameter names a parameter-level match went through;
    ``closest``: up to 3 real names for a pattern that matched nothing;
    ``parameter_names_only``: the pattern matches parameter names, which these semantics do
    not match (so it selects nothing); ``class_unchecked``: a class-name pattern that could not
    be checked because the classes are unknown; ``strict_missing``: the tool raises "Could not
    find targets" for it; ``error``: the pattern is rejected outright; ``notes``: regex pitfalls.
    """

    pattern: str
    matched: tuple[str, ...] = ()
    parameters_matched: tuple[str, ...] = ()
    closest: tuple[str, ...] = ()
    parameter_names_only: bool = False
    class_unchecked: bool = False
    strict_missing: bool = False
    error: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def matched_nothing(self) -> bool:
        """Nothing matched and the reason is known (not an unchecked class name)."""
        return not self.matched and not self.class_unchecked


@dataclass(frozen=True)
class MatchResult:
    """Targets and ignore patterns matched against one model under one tool's rules."""

    semantics: Semantics
    targets: tuple[PatternReport, ...]
    ignore: tuple[PatternReport, ...]
    selected: tuple[str, ...]
    ignores_everything: bool
    classes_note: str = ""
    notes: tuple[str, ...] = ()

    @property
    def unmatched_targets(self) -> tuple[PatternReport, ...]:
        return tuple(r for r in self.targets if r.matched_nothing)

    @property
    def unmatched_ignore(self) -> tuple[PatternReport, ...]:
        return tuple(r for r in self.ignore if r.matched_nothing)

    @property
    def unchecked_class_targets(self) -> tuple[str, ...]:
        return tuple(r.pattern for r in (*self.targets, *self.ignore) if r.class_unchecked)


# --------------------------------------------------------------------------- primitives


class _Pattern:
    """A compiled target: ``re:`` + ``re.match`` (prefix-anchored), run by the linear-time
    matcher the one-shot run uses (:mod:`recipe_spec.text.targets`), or exact equality."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.is_regex = text.startswith("re:")
        self.error: str | None = None
        self.regex: LinearPattern | None = None
        if self.is_regex:
            try:
                self.regex = linear_pattern(text)
            except PatternError as exc:
                why = exc.message.removeprefix("the regex does not compile: ")
                self.error = f"`{text}` is not a valid regular expression ({why})" if exc.reason == "syntax" \
                    else explain(exc)[0]

    def name(self, value: str) -> bool:
        if self.is_regex:
            return self.regex is not None and self.regex.run(value)
        return self.text == value

    def cls(self, classes: tuple[str, ...], s: Semantics) -> bool:
        if not classes:
            return False
        if self.is_regex:
            return s.class_regex and self.name(classes[0])
        if s.class_mro:
            return self.text in classes or (self.text == "Linear" and "LinearBase" in classes)
        return classes[0] == self.text


class _Model:
    """Names and lookups shared by every pattern of one match."""

    def __init__(self, names: ModelNames) -> None:
        self.names = names
        self.modules = ("", *names.modules)
        self.classes = names.classes
        self.params = {m: tuple(names.module_params.get(m, ())) for m in self.modules}
        self.all_names = (*names.modules, *names.parameters)

    def classes_of(self, module: str) -> tuple[str, ...]:
        return tuple(self.classes.get(module, ())) if self.classes is not None else ()

    def internal(self, module: str) -> bool:
        return "InternalModule" in self.classes_of(module)

    def terminal(self) -> list[str]:
        parents = {m.rpartition(".")[0] for m in self.modules if m}
        return [m for m in self.modules if m not in parents]

    def isa(self, module: str, bases: tuple[str, ...]) -> bool:
        return any(b in self.classes_of(module) for b in bases)


def _hits(p: _Pattern, module: str, m: _Model, s: Semantics) -> tuple[str, list[str]]:
    """How ``p`` selects ``module``: ("name" | "class" | "param" | "", matched parameters)."""
    if s.skip_internal and m.internal(module):
        return "", []
    if s.module_names and p.name(module):
        return "name", []
    if s.class_names and p.cls(m.classes_of(module), s):
        return "class", []
    if s.parameter_names:
        fqns = [f"{module}.{leaf}" for leaf in m.params[module]]
        hit = [f for f in fqns if p.name(f)]
        if hit:
            return "param", hit
    return "", []


def _closest(p: _Pattern, m: _Model) -> tuple[str, ...]:
    """Up to 3 real names near ``p``: names ending in its literal text first, then difflib."""
    core = p.text[3:] if p.is_regex else p.text
    literal = re.sub(r"\\(.)", r"\1", re.sub(r"\.\*|\.\+|[\^$]|\\d[+*]?|\[[^\]]*\][+*]?|[()?|]", "", core))
    literal = literal.strip(".")
    out: list[str] = []
    if literal:
        out += sorted((n for n in m.all_names if n.endswith("." + literal) or n == literal), key=len)
        out += sorted((n for n in m.all_names if literal in n and n not in out), key=len)
    pool = list(m.all_names)
    if m.classes is not None and _CLASS_LIKE.match(core):
        pool += sorted({c for v in m.classes.values() for c in v})
    out += difflib.get_close_matches(literal or core, pool, n=3, cutoff=0.5)
    return tuple(dict.fromkeys(out))[:3]


def _regex_notes(p: _Pattern, matched: list[str], m: _Model) -> list[str]:
    notes: list[str] = []
    if not p.is_regex:
        if _REGEX_CHARS.search(p.text):
            notes.append(f"`{p.text}` looks like a regular expression but has no `re:` prefix, "
                         "so it is compared as an exact name")
        return notes
    if p.regex is None:
        return notes
    body = p.text[3:]
    if re.search(r"(?<![\\.])\.(?=[A-Za-z_])", body) and re.search(r"[A-Za-z_\]\)]\.[A-Za-z_]", body):
        notes.append(f"`{p.text}` has an unescaped `.`, which matches any character; write `\\.` "
                     "for a literal dot")
    if not matched:
        found = [n for n in m.modules if n and p.regex.run(n, search=True)]
        if found and not body.startswith((".*", "^")):
            notes.append(f"`{p.text}` is matched with re.match, anchored at the start of the name; "
                         f"`re:.*{body}` would match {len(found)} module(s), e.g. {found[0]}")
    else:
        longer = [n for n in matched if n and not p.regex.run(n, full=True)]
        if longer and not body.endswith("$"):
            notes.append(f"`{p.text}` has no `$`, so it also matches longer names, e.g. {longer[0]}")
    return notes


# --------------------------------------------------------------------------- matching


def _report(p: _Pattern, m: _Model, s: Semantics, *, is_ignore: bool) -> tuple[PatternReport, list[str]]:
    sem = s
    if is_ignore:  # ignore lists name modules (and classes where the tool allows), never parameters
        sem = replace(s, module_names=True, parameter_names=False, strict=False, needs_weight=False,
                      class_names=s.ignore_classes)
    if p.error:
        return PatternReport(p.text, error=p.error), []
    matched: list[str] = []
    params: list[str] = []
    weightless = 0
    for module in m.modules:
        how, hit = _hits(p, module, m, sem)
        if not how:
            continue
        if sem.needs_weight and "weight" not in m.params[module]:
            weightless += 1
            continue
        matched.append(module)
        params += hit
    notes = _regex_notes(p, matched, m)
    if weightless and not matched:
        notes.append(f"`{p.text}` matches {weightless} module(s) but none has a direct `weight` to prune")
    unchecked = False
    param_only = False
    closest: tuple[str, ...] = ()
    if not matched:
        core = p.text[3:] if p.is_regex else p.text
        unchecked = (m.classes is None and sem.class_names and not p.is_regex
                     and bool(_CLASS_LIKE.match(core)))
        if m.classes is None and p.is_regex and sem.class_regex:
            notes.append(f"`{p.text}` may match a class name, which could not be checked")
        if not sem.parameter_names:
            hits = [n for n in m.names.parameters if p.name(n)]
            param_only = bool(hits)
            if hits:
                owner = hits[0].rpartition(".")[0]
                notes.append(f"`{p.text}` matches parameter names (e.g. {hits[0]}), which {s.label} "
                             f"does not match; name the module instead, e.g. `re:.*{re.escape(owner.rpartition('.')[2])}$`")
        if not unchecked:
            closest = _closest(p, m)
        if m.classes is not None and not p.is_regex and not sem.class_mro  and sem.class_names:
            derived = [n for n in m.modules if p.text in m.classes_of(n)[1:]]
            if derived:
                notes.append(f"`{p.text}` is a base class of e.g. {derived[0]} "
                             f"({m.classes_of(derived[0])[0]}); {s.label} compares the exact class only")
    return PatternReport(p.text, tuple(matched), tuple(params), closest, param_only, unchecked,
                         notes=tuple(notes)), matched


def _special(token: str, m: _Model, s: Semantics) -> tuple[PatternReport, list[str]]:
    """``targets`` given as the whole string ``__ALL__`` etc. (SparseML, llm-compressor < 0.11)."""
    if token == "__ALL__":
        found = m.terminal()
    elif m.classes is None:
        return PatternReport(token, class_unchecked=True,
                             notes=(f"`{token}` selects layers by class, which could not be checked",)), []
    else:
        bases = ("Linear", "_ConvNd", "Conv1D") if token == "__ALL_PRUNABLE__" else ("Linear", "_ConvNd")
        found = [n for n in m.modules if m.isa(n, bases)]
    if not s.module_names:  # pruning: get_default_params keeps modules with a direct `weight`
        found = [n for n in found if "weight" in m.params[n]]
    return PatternReport(token, tuple(found), strict_missing=not found), found


def _strict_missing(patterns: list[_Pattern], m: _Model, s: Semantics) -> set[str]:
    """Targets ``match_layers_params`` credits with nothing: each module, class and parameter
    goes to the *first* target that matches it."""
    found = [False] * len(patterns)

    def first(values: list[str], *, classes: tuple[str, ...] = ()) -> int:
        for i, p in enumerate(patterns):
            if (classes and p.cls(classes, s)) or (not classes and any(p.name(v) for v in values)):
                return i
        return -1

    for module in m.modules:
        i = first([module])
        if i >= 0 and s.module_names:
            found[i] = True
        else:
            j = first([], classes=m.classes_of(module))
            if j >= 0:
                found[j] = True
        for leaf in m.params[module]:
            k = first([f"{module}.{leaf}"])
            if k >= 0:
                found[k] = True
    return {p.text for p, ok in zip(patterns, found, strict=True) if not ok}


def match(tool: str, version: str | Sequence[int] | None, targets: str | Sequence[str] | None,
          ignore: Sequence[str] | None, names: ModelNames, *, kind: Kind = "quantization") -> MatchResult:
    """Match ``targets`` and ``ignore`` against ``names`` the way ``tool`` at ``version`` does.

    ``kind`` comes from :func:`kind_for_modifier`. A ``targets`` string is one pattern (or a
    special token); ``None`` means no targets. See :class:`MatchResult` for what is reported.
    """
    s = semantics(tool, version, kind)
    m = _Model(names)
    notes: list[str] = []
    reports: list[PatternReport] = []
    union: dict[str, None] = {}
    whole = isinstance(targets, str)
    patterns = [targets] if isinstance(targets, str) else list(targets or [])
    if whole and s.special == "whole-string" and targets in _SPECIAL:
        report, found = _special(str(targets), m, s)
        reports.append(report)
        union.update(dict.fromkeys(found))
        patterns = []
    plain: list[_Pattern] = []
    for text in patterns:
        if text in _SPECIAL and s.special == "expand":
            if text == "__ALL__":
                reports.append(PatternReport(text, error=f"{s.label} rejects `__ALL__` (ValueError: no longer "
                                                         "supported); list layer classes or patterns instead"))
                continue
            found: list[str] = []
            for cls in _EXPANSION[text]:
                r, f = _report(_Pattern(cls), m, s, is_ignore=False)
                found += [n for n in f if n not in found]
            unchecked = m.classes is None
            reports.append(PatternReport(text, tuple(found), class_unchecked=unchecked, notes=(
                f"`{text}` is deprecated in {s.label}; it stands for {', '.join(_EXPANSION[text])}",)))
            union.update(dict.fromkeys(found))
            continue
        p = _Pattern(text)
        report, found = _report(p, m, s, is_ignore=False)
        if text in _SPECIAL:
            report = _with_note(report, f"`{text}` is special only as the whole `targets` string in "
                                        f"{s.label}; inside a list it is a module name")
        plain.append(p)
        reports.append(report)
        union.update(dict.fromkeys(found))
    if s.strict and plain:
        missing = _strict_missing([p for p in plain if p.error is None], m, s)
        reports = [_flag_strict(r, r.pattern in missing and not r.class_unchecked) for r in reports]
        if m.classes is None and any(r.class_unchecked for r in reports):
            notes.append("which target is credited with a module could not be fully checked (classes unknown)")
    ignore_reports: list[PatternReport] = []
    removed: set[str] = set()
    for text in ignore or []:
        r, found = _report(_Pattern(text), m, s, is_ignore=True)
        ignore_reports.append(r)
        removed.update(found)
    selected = tuple(n for n in m.modules if n in union and n not in removed)
    covers_all = bool(removed) and all(n in removed for n in m.modules)
    any_target = bool(union) or any(r.class_unchecked for r in reports)
    everything = (bool(union) and not selected) or (covers_all and any_target)
    return MatchResult(s, tuple(reports), tuple(ignore_reports), selected, everything,
                       names.classes_note if names.classes is None else "", tuple(notes))


def _with_note(r: PatternReport, note: str) -> PatternReport:
    return replace(r, notes=(*r.notes, note))


def _flag_strict(r: PatternReport, missing: bool) -> PatternReport:
    return replace(r, strict_missing=missing)
