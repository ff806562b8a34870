"""Fixes of stage/group recipes (SparseML 1.6+, llm-compressor), from the catalogue's own
verdicts (:func:`recipe_spec.stage_dialect.check_modifier`).

A finding is fixed where the release chosen with ``--compat`` rejects it, or, without
``--compat``, where every release does (the errors of ``recipe-spec validate``); a warning
that only some releases give is left alone unless ``--compat`` picks one of them, since the
fix would change what the others do.

Safe (exact):

- a renamed argument (``percdamp`` -> ``dampening_frac``), and ``prunen: N`` with
  ``prunem: M`` -> ``mask_structure: "N:M"``;
- a misspelt argument or modifier name with exactly one close name in the release(s);
- a numbered stage key (``quant_stage_1``, read by no release) -> ``quant_1_stage``;
- a modifier's import path -> its bare class name; a development name -> the released name
  (``vLLMQuantizationModifier`` -> ``QuantizationModifier``);
- deleting an argument the release removed where the removal changed nothing it did
  (:data:`DROP_EXACT`), and, with ``--compat``, an argument the release ignores
  (a deprecation whose value it forces).

Unsafe (``--unsafe-fixes``): the closest of several close names, and deleting an argument
whose setting moved elsewhere (:data:`DROP_UNSAFE`: ``sequential_targets`` moved to the
``oneshot()`` call).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..recipe.model import Modifier, Recipe
from ..stage_dialect import Compat, check_modifier, stage_variants
from ..stage_dialect.arg_check import Problem
from ..stage_dialect.catalogue import all_stage_names
from ..stage_dialect.reader import numbered_stage
from ..stage_dialect.versions import all_versions
from .edits import Edit, Fix, FixNotPossible, Text, delete_entry, rename_key, replace_value
from .names import choose

__all__ = ["stage_fixes", "siblings", "DROP_EXACT", "DROP_UNSAFE"]

#: (modifier, argument) -> the values whose deletion is exact where the argument is gone
#: (None: any value): the release does the same without it.
DROP_EXACT: dict[tuple[str, str], tuple[Any, ...] | None] = {
    ("GPTQModifier", "sequential_update"): None,  # always sequential since llm-compressor 0.8
    ("GPTQModifier", "quantize"): (True,),  # GPTQModifier always quantizes
    ("SparseGPTModifier", "target_ids"): None,  # SparseML 1.7 dropped the output cache ids
    ("SparseGPTModifier", "layer_prefix"): None,  # the decoder layers are found from the model
}
#: The same for any modifier: the base class's ``group`` (llm-compressor 0.7+ sets it from
#: the ``<group>_modifiers`` key and fails when it is given twice).
DROP_EXACT_ANY = {"group": None}

#: (modifier, argument) -> why deleting it is not exact.
DROP_UNSAFE: dict[tuple[str, str], str] = {
    (name, "sequential_targets"): "pass sequential_targets to oneshot() instead"
    for name in ("GPTQModifier", "SparseGPTModifier", "WandaPruningModifier", "AWQModifier",
                 "AutoRoundModifier")
}

_CODES = {"renamed_arg": "C001", "removed_arg": "C001", "not_in_version": "C001",
          "unknown_arg": "M002", "unknown_modifier": "M001", "dotted_name": "M001",
          "deprecated": "M007"}


def _applies(p: Problem, compat: Compat | None) -> bool:
    """Whether the chosen release(s) reject what ``p`` is about (see the module docstring)."""
    if compat is not None:
        return True
    return p.severity == "error" and p.kind != "deprecated"


def _arg_names(name: str, compat: Compat | None) -> list[str]:
    """The arguments ``name`` takes in the chosen release, or in any release."""
    pairs = [compat.pair] if compat is not None else all_versions()
    found: set[str] = set()
    for s in stage_variants(name):
        for pair in pairs:
            if s.exists_in(pair):
                found.update(s.args_in(pair))
    return sorted(found)


def _fix(m: Modifier, p: Problem, title: str, safe: bool, *edits: Edit) -> Fix:
    span = m.key_span(str(p.path[0])) if p.path else m.span
    return Fix(_CODES.get(p.kind, "C001"), span.line, span.column, title, safe, edits)


def _modifier_fixes(t: Text, m: Modifier, p: Problem) -> Iterator[Fix]:
    """Fixes of the modifier's name."""
    doc = m.document
    assert doc is not None
    new: str | None = None
    safe = True
    if p.kind == "dotted_name":
        bare = m.type.rsplit(".", 1)[-1]
        new = bare if stage_variants(bare) else None
    elif p.kind == "not_in_version" and stage_variants(m.type) and stage_variants(m.type)[0].renamed_to:
        new = stage_variants(m.type)[0].renamed_to
    elif p.kind == "unknown_modifier":
        new, safe = choose([m.type], all_stage_names()).get(m.type, (None, False))
    if new is not None and new not in siblings(m):
        yield _fix(m, p, f"rename {m.type} to {new}", safe, rename_key(t, doc, m.path, new))


def siblings(m: Modifier) -> set[str]:
    """The other modifier names of ``m``'s group."""
    doc = m.document
    assert doc is not None
    group: Any = doc.value
    for key in m.path[:-1]:
        group = group[key]
    return {str(k) for k in group} if isinstance(group, Mapping) else set()


def _arg_fixes(t: Text, m: Modifier, p: Problem, compat: Compat | None) -> Iterator[Fix]:
    """Fixes of one top-level argument."""
    doc = m.document
    assert doc is not None
    key = p.path[0]
    if not isinstance(key, str):
        return
    path = (*m.args_path, key)
    args = m.raw_args
    if p.kind == "renamed_arg":
        renamed = next((r for s in stage_variants(m.type) for r in s.renamed
                        if r.old == key and p.hint == f"write {r.new}"), None)
        if renamed is None or renamed.new in args:
            return
        if renamed.new == "mask_structure":
            yield from _nm_fix(t, m, p)
            return
        yield _fix(m, p, f"rename {key} to {renamed.new}", True,
                   rename_key(t, doc, path, renamed.new))
    elif p.kind == "unknown_arg":
        known = _arg_names(m.type, compat)
        unknown = [k for k in args if isinstance(k, str) and k not in known]
        new, safe = choose(unknown, [c for c in known if c not in args]).get(key, (None, False))
        if new is not None:
            yield _fix(m, p, f"rename {key} to {new}", safe, rename_key(t, doc, path, new))
    elif p.kind in ("removed_arg", "not_in_version"):
        exact = DROP_EXACT.get((m.type, key), DROP_EXACT_ANY.get(key, ()))
        if exact is None or (exact and args[key] in exact):
            yield _fix(m, p, f"delete {key}", True, delete_entry(t, doc, path))
        elif (m.type, key) in DROP_UNSAFE:
            yield _fix(m, p, f"delete {key} ({DROP_UNSAFE[(m.type, key)]})", False,
                       delete_entry(t, doc, path))
    elif p.kind == "deprecated" and compat is not None:
        yield _fix(m, p, f"delete {key} ({compat.label} ignores it)", True,
                   delete_entry(t, doc, path))


def _nm_fix(t: Text, m: Modifier, p: Problem) -> Iterator[Fix]:
    """``prunen: N`` and ``prunem: M`` -> ``mask_structure: "N:M"`` (at prunen's place)."""
    args, doc = m.raw_args, m.document
    assert doc is not None
    n, mm = args.get("prunen"), args.get("prunem")
    if p.path[0] != "prunen" or not all(isinstance(v, int) and not isinstance(v, bool)
                                        for v in (n, mm)):
        return
    base = m.args_path
    yield _fix(m, p, f'write prunen and prunem as mask_structure: "{n}:{mm}"', True,
               rename_key(t, doc, (*base, "prunen"), "mask_structure"),
               replace_value(t, doc, (*base, "prunen"), f'"{n}:{mm}"'),
               delete_entry(t, doc, (*base, "prunem")))


def _numbered_stage_fixes(t: Text, recipe: Recipe) -> list[Fix]:
    """``<name>_stage_<n>`` -> ``<name>_<n>_stage`` (no release reads the first; the stages run
    in file order under either name): exact."""
    out: list[Fix] = []
    docs = {id(m.document): m.document for m in recipe.modifiers if m.document is not None}
    for doc in docs.values():
        root = doc.value
        for key in root if isinstance(root, Mapping) else ():
            numbered = numbered_stage(key)
            loc = doc.locs.get((key,))
            if numbered is None or loc is None:
                continue
            new = f"{numbered[0]}_{numbered[1]}_stage"
            if new in root:
                continue
            span = loc.key_span or loc.span
            try:
                out.append(Fix("C002", span.line, span.column, f"rename stage {key} to {new}", True,
                               (rename_key(t, doc, (key,), new),)))
            except FixNotPossible:
                continue
    return out


def stage_fixes(t: Text, recipe: Recipe, compat: Compat | None) -> list[Fix]:
    """Every fix of a stage/group recipe, safe and unsafe, in file order."""
    out: list[Fix] = _numbered_stage_fixes(t, recipe)
    for m in recipe.modifiers:
        if m.document is None:
            continue
        for p in check_modifier(m.type, m.raw_args, compat):
            if not _applies(p, compat) or len(p.path) > 1:
                continue
            try:
                found = list(_modifier_fixes(t, m, p) if not p.path else _arg_fixes(t, m, p, compat))
            except FixNotPossible:
                continue
            out += found
    return sorted(out, key=lambda f: (f.line, f.column))
