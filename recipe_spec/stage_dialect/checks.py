"""Validating a stage/group recipe, version by version: :func:`stage_diagnostics`.

Three kinds of check, each aware of the ``--compat`` choice (a :class:`Compat`, or None for
"every version": what all versions reject is an error, what only some reject a warning that
names them):

- every modifier entry against the catalogue (:func:`~recipe_spec.stage_dialect.check_modifier`),
  each problem at the key or value it is about;
- the layout as each tool reads it (C002): keys a tool drops without a word, and the
  mis-indented recipe that llm-compressor 0.7+ reads as an empty one;
- ``eval(...)`` strings (C003) and the AWQ ordering rule (C004);
- what llm-compressor's ``oneshot()`` runs otherwise than written (C005, C006:
  :mod:`.oneshot_compat`);
- regex pitfalls in ``targets``/``ignore`` (P005, P008, P009: :mod:`.pattern_checks`);
- the OWL and per-layer sparsity arguments (M003, M006, C007: :mod:`.owl_checks`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic, Severity, Span
from ..diagnostics.codes import Code
from ..recipe.model import Modifier, Recipe
from ..text.frozen import FrozenDict
from ..text.variables import did_you_mean
from .arg_check import Problem, check_modifier
from .catalogue import variant_in
from .catalogue_quant import smallest_grid
from .oneshot_compat import oneshot_differences
from .owl_checks import owl_diagnostics
from .pattern_checks import SEARCHED, arg_items, pattern_findings
from .reader import STAGE_KEYS, is_group_key, is_stage_key, numbered_stage
from .versions import Compat, affects, newest, scope
from .written_for import written_for

__all__ = ["stage_diagnostics"]

_KIND_CODES: dict[str, Code] = {
    "unknown_modifier": codes.M001, "dotted_name": codes.M001, "unknown_arg": codes.M002,
    "misplaced": codes.M002, "missing_required": codes.M003, "type": codes.M004,
    "enum": codes.M006, "preset": codes.M006, "deprecated": codes.M007, "null_args": codes.S006,
    "removed_arg": codes.C001, "renamed_arg": codes.C001, "not_in_version": codes.C001,
    "range": codes.M005, "sparsity": codes.M011, "nm": codes.M006, "order": codes.E001,
}
_EVAL = re.compile(r"\beval\(")
_NM = re.compile(r"^([0-9]+):([0-9]+)$")
_QUANTIZERS = frozenset({"QuantizationModifier", "GPTQModifier", "AutoRoundModifier"})


class _Checker:
    def __init__(self, recipe: Recipe, compat: Compat | None):
        self.recipe, self.compat = recipe, compat
        self.doc = recipe.document
        self.out: list[Diagnostic] = []
        self.lines: list[str] | None = None  # the YAML text's lines, read when first needed
        self._strings: list[list[tuple[tuple[Any, ...], str, bool, bool]]] | None = None

    def strings(self) -> list[list[tuple[tuple[Any, ...], str, bool, bool]]]:
        """Per modifier, every string of its arguments (:func:`arg_items`), walked once for
        :meth:`evals` and :meth:`patterns`."""
        if self._strings is None:
            self._strings = [arg_items(m.raw_args) for m in self.recipe.modifiers]
        return self._strings

    def span(self, path: tuple[Any, ...], key: bool = False) -> Span:
        loc = self.doc.loc(path) if self.doc is not None else None
        while loc is None and path:
            path = path[:-1]
            loc = self.doc.loc(path) if self.doc is not None else None
            key = True
        if loc is None:
            return Span.point(1)
        return (loc.key_span or loc.span) if key else loc.span

    def add(self, code: Code, message: str, hint: str, span: Span, severity: Severity | None = None) -> None:
        # what ``code(message, hint, span, severity).in_file(path)`` gives, built once
        self.out.append(Diagnostic(code.id, severity or code.severity, message, hint, self.recipe.path,
                                   span.line, span.column, span.end_line, span.end_column))

    # -- modifiers ----------------------------------------------------------------------------
    def modifier(self, m: Modifier) -> None:
        for p in check_modifier(m.type, m.raw_args, self.compat):
            self.problem(m, p)

    def problem(self, m: Modifier, p: Problem) -> None:
        if self.compat is None and p.kind == "not_in_version" and not p.path and p.severity == "warning" \
                and variant_in(m.type, ("llmcompressor", newest("llmcompressor"))) is not None:
            return  # older releases lacked it, the maintained tool has it: not worth a warning
        code = _KIND_CODES.get(p.kind, codes.M008)
        severity = Severity.ERROR if p.severity == "error" else Severity.WARNING
        on_key = p.kind in ("unknown_arg", "misplaced", "removed_arg", "renamed_arg", "deprecated")
        span = self.span(m.args_path + tuple(p.path), key=on_key) if p.path else m.span
        where = "" if not p.versions or p.versions in p.message or p.versions == "every version" else f" ({p.versions})"
        self.add(code, p.message + where, _sentence(p.hint), span, severity)

    # -- layout as each tool reads it -----------------------------------------------------------
    def ignored(self, tools: dict[str, str], message: str, hint: str, span: Span,
                error: bool = False) -> None:
        hit, versions = affects(tools, self.compat)
        if hit:
            severity = Severity.ERROR if error and self.compat is not None else Severity.WARNING
            self.add(codes.C002, f"{message} ({versions})", hint, span, severity)

    def layout(self, root: FrozenDict) -> None:
        stages = [k for k, v in root.items() if is_stage_key(k) and isinstance(v, FrozenDict)]
        bare = [k for k in root if is_group_key(k)]
        for key in bare:
            if key == "modifiers":
                self.add(codes.C002, "a group called plain 'modifiers' is never read: SparseML "
                         "stops on it (it reads 'stages' instead) and llm-compressor drops it",
                         "Rename it '<name>_modifiers' and put it under a '<name>_stage:' key, "
                         "e.g. 'default_stage:' / 'default_modifiers:'.",
                         self.span((key,), key=True), Severity.ERROR)
                continue
            empty = not stages
            self.ignored(
                {"llmcompressor": ">=0.7"},
                f"'{key}' sits at the top level: llm-compressor reads groups only inside "
                f"'*_stage' mappings and drops it" + (", so the recipe is empty" if empty else ""),
                "Indent it under a '<name>_stage:' key (SparseML read it as its 'default' stage).",
                self.span((key,), key=True), error=empty,
            )
        for key in root:
            numbered = numbered_stage(key)
            if numbered is not None:
                name, n = numbered
                self.add(codes.C002, f"'{key}' is not a stage to llm-compressor 0.14 or any release before it: "
                         "a stage key ends in '_stage', and any other top-level key is dropped without a word "
                         f"(only its nightly after 0.14 reads '{key}', as stage '{name}')",
                         f"Rename it '{name}_{n}_stage': the stages run in file order, as the numbered keys do.",
                         self.span((key,), key=True), Severity.ERROR)
        for key, value in root.items():
            if is_stage_key(key) and not isinstance(value, FrozenDict):
                self.add(codes.C002, f"stage '{key}' holds no mapping, so every tool skips it"
                         + (f"; its groups ({', '.join(bare)}) are not indented under it" if bare else ""),
                         "Indent the stage's '*_modifiers:' groups below it.", self.span((key,), key=True))
            elif key == "stages" and isinstance(value, FrozenDict):
                self.ignored({"llmcompressor": ">=0.7"}, "'stages:' is not read: llm-compressor "
                             "reads only top-level '<name>_stage:' keys",
                             "Write each stage as a top-level '<name>_stage:' key.",
                             self.span((key,), key=True), error=not stages)
        for _name, body, base in self.stage_bodies(root):
            for key, value in body.items():
                if is_group_key(key):
                    continue
                span = self.span(base + (key,), key=True)
                if key == "run_type":
                    self.run_type(value, span, base + (key,))
                elif key not in STAGE_KEYS:
                    hint = did_you_mean(str(key), [*STAGE_KEYS, "<name>_modifiers"])
                    self.add(codes.C002, f"stage key '{key}' is dropped without a word by every tool",
                             (hint + " " if hint else "") + "A stage holds '*_modifiers:' groups, "
                             "'run_type', 'args' and 'enabled'.", span)

    def stage_bodies(self, root: FrozenDict) -> Iterator[tuple[str, FrozenDict, tuple[Any, ...]]]:
        for key, value in root.items():
            if is_stage_key(key) and isinstance(value, FrozenDict):
                yield key, value, (key,)
            elif key == "stages" and isinstance(value, FrozenDict):
                for name, body in value.items():
                    if isinstance(body, FrozenDict):
                        yield str(name), body, ("stages", name)

    def run_type(self, value: Any, span: Span, path: tuple[Any, ...]) -> None:
        if value not in ("train", "oneshot"):
            hit, versions = affects({"sparseml": "", "llmcompressor": "<0.5"}, self.compat)
            if hit:
                self.add(codes.M006, f"run_type '{value}' is not 'train' or 'oneshot' ({versions})",
                         "Write 'run_type: oneshot' or 'run_type: train'.", self.span(path))
        elif self.compat is not None:
            self.ignored({"llmcompressor": ">=0.5"}, "run_type is ignored: llm-compressor runs "
                         "every stage given to oneshot()", "Select a stage with oneshot(..., stage=...) "
                         "instead.", span)

    # -- eval() and ordering ----------------------------------------------------------------------
    def evals(self) -> None:
        for m, items in zip(self.recipe.modifiers, self.strings(), strict=True):
            for keys, text, _, _ in items:
                if "eval(" not in text or not _EVAL.search(text):
                    continue
                span = self.span(m.args_path + keys)
                inner = text[text.index("eval(") + 5:]
                if "(" in inner.split(")", 1)[0] or inner.count(")") > 1:
                    self.add(codes.C003, f"'{text}': no tool evaluates nested parentheses in eval()",
                             "Compute the inner part into a variable of its own.", span, Severity.ERROR)
                    continue
                hit, versions = affects({"llmcompressor": ">=0.6"}, self.compat)
                if hit:
                    self.add(codes.C003, f"'{text}' is not evaluated: it reaches {m.type} as text "
                             f"({versions})", "Write the value itself.", span,
                             Severity.ERROR if self.compat is not None else None)

    def awq(self) -> None:
        mods = self.recipe.modifiers
        for i, m in enumerate(mods):
            if m.type == "AWQModifier":
                self.awq_grid(m)
            if m.type != "AWQModifier" or any(n.type in _QUANTIZERS for n in mods[i + 1:]):
                continue
            hit, versions = affects({"llmcompressor": ">=0.11"}, self.compat)
            if hit:
                self.add(codes.C004, f"AWQModifier is not followed by a quantization modifier "
                         f"({versions})", "Add a QuantizationModifier or GPTQModifier after it, "
                         "with the scheme.", m.span, None if self.compat is not None else Severity.WARNING)


    def awq_grid(self, m: Modifier) -> None:
        """An ``n_grid`` below the smallest grid llm-compressor's AWQ searches with the given
        ``duo_scaling`` (:func:`~recipe_spec.stage_dialect.catalogue_quant.smallest_grid`: a division by zero
        there, nothing to search here), the rule ``oneshot`` runs by."""
        n_grid, duo = m.raw_args.get("n_grid"), m.raw_args.get("duo_scaling", True)
        if not isinstance(n_grid, int) or isinstance(n_grid, bool) or n_grid < 1 \
                or not (duo is True or duo is False or duo == "both"):
            return
        least, older = smallest_grid(duo, True), smallest_grid(duo, False)
        if n_grid >= least:
            return
        hit, versions = affects({"llmcompressor": ">=0.11" if n_grid >= older else ">=0.9"}, self.compat)
        if hit:
            severity = Severity.ERROR if self.compat is not None or n_grid < older else Severity.WARNING
            self.add(codes.M005, f"n_grid {n_grid} gives AWQ no grid to search with duo_scaling {duo!r} "
                     f"({versions})", f"Write n_grid: {least} or more.", self.span(m.args_path + ("n_grid",)),
                     severity)

    def nm_sparsity(self) -> None:
        """An N:M ``mask_structure`` prunes N of every M weights: a ``sparsity`` other than N/M
        is silently overridden by llm-compressor (SparseGPT, Wanda), so it is refused here."""
        for m in self.recipe.modifiers:
            structure, sparsity = m.raw_args.get("mask_structure"), m.raw_args.get("sparsity")
            match = _NM.match(structure) if isinstance(structure, str) else None
            if match is None or isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)):
                continue
            n, size = int(match.group(1)), int(match.group(2))
            if n == 0 or size == 0 or abs(sparsity - n / size) <= 1e-9:
                continue
            self.add(codes.M006, f"sparsity {sparsity:g} is overridden by mask_structure "
                     f"'{structure}', which prunes {n} of every {size} weights (sparsity {n / size:g})",
                     f"Write sparsity: {n / size:g}, or mask_structure: '0:0' for {sparsity:g} "
                     "unstructured.", self.span(m.args_path + ("sparsity",)))

    def patterns(self) -> None:
        # How a string was quoted matters only for a double-quoted scalar with a backslash
        # (:meth:`written`); with no backslash in the text, a string that has no finding
        # whatever its style needs no position.
        source = self.recipe.source
        unquoted = source is None or "\\" not in source.yaml_text
        for m, items in zip(self.recipe.modifiers, self.strings(), strict=True):
            for keys, text, target, from_root in items:
                if m.type in SEARCHED:  # a regular expression searched in a layer's name, as written
                    self.searched(m, keys, text)
                    continue
                if not target or (unquoted and not pattern_findings(text, None, None, from_root)):
                    continue
                path = m.args_path + keys
                loc = self.doc.loc(path) if self.doc is not None else None
                style = loc.style if loc is not None else None
                raw = self.written(loc.span) if loc is not None and style == '"' else None
                span = loc.span if loc is not None else self.span(path)
                for f in pattern_findings(text, style, raw, from_root):
                    self.add(f.code, f.message, f.hint, span, f.severity)

    def searched(self, m: Any, keys: tuple[Any, ...], text: str) -> None:
        """P005 for a string of a :data:`SEARCHED` modifier's ``ignore`` that the module matcher
        cannot search for (``re:`` in front read as the same pattern)."""
        from ..text.targets import search_problem

        problem = search_problem(text) if keys[:1] == ("ignore",) else None
        if problem is not None:
            self.add(codes.P005, problem[0], problem[1], self.span(m.args_path + keys))

    def written(self, span: Span) -> str | None:
        """The text of ``span`` as it stands in the file (a scalar with its quotes)."""
        source = self.recipe.source
        if source is None:
            return None
        if self.lines is None:
            self.lines = source.yaml_text.splitlines()
        lines = self.lines[span.line - 1 - source.line_offset:span.end_line - source.line_offset]
        if not lines:
            return None
        if len(lines) == 1:
            return lines[0][span.column - 1:span.end_column - 1]
        return "\n".join([lines[0][span.column - 1:], *lines[1:-1], lines[-1][:span.end_column - 1]])


def _sentence(hint: str) -> str:
    hint = hint.strip()
    if hint and hint[0].islower():
        hint = hint[0].upper() + hint[1:]
    return hint + ("." if hint and hint[-1] not in ".?!:" else "")


def stage_diagnostics(recipe: Recipe, compat: Compat | None = None) -> list[Diagnostic]:
    """Every diagnostic of a stage/group ``recipe`` under ``compat`` (None: every release of
    the tools it was written for, :func:`~.written_for.written_for`)."""
    if compat is None:
        with scope(written_for(recipe)):
            return _diagnostics(recipe, None)
    return _diagnostics(recipe, compat)


def _diagnostics(recipe: Recipe, compat: Compat | None) -> list[Diagnostic]:
    checker = _Checker(recipe, compat)
    root = recipe.document.value if recipe.document is not None else None
    if isinstance(root, FrozenDict):
        checker.layout(root)
    for m in recipe.modifiers:
        checker.modifier(m)
    checker.evals()
    checker.awq()
    checker.nm_sparsity()
    checker.patterns()
    return checker.out + oneshot_differences(recipe, compat) + owl_diagnostics(recipe, compat)

