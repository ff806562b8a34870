"""Fixes of ``!Modifier`` recipes (SparseML's training-time lists), from the modifier
declarations (:mod:`recipe_spec.modifiers`).

Safe (exact):

- a misspelt argument (M002) or modifier tag (M001) with exactly one close name;
- a deprecated argument with an exact rewrite (M007): deleted where SparseML ignored it
  (``log_types``) or where it holds the only value still accepted, its default
  (``phased: false``, ``score_type: magnitude``, ``global_sparsity: false``); renamed where it
  is an old name (``available_gpus`` -> ``available_devices``); the WoodFisher tutorial's
  grouped ``mfac_options: {num_grads, fisher_block_size, available_gpus}`` written as the flat
  arguments it means.

Unsafe (``--unsafe-fixes``): the closest of several close names.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from ..modifiers import all_specs
from ..modifiers.spec import Arg, ModifierSpec
from ..recipe.model import Modifier, Recipe
from ..text.nodes import Document
from .edits import Edit, Fix, FixNotPossible, Text, delete_entry, entry_lines, rename_key
from .names import choose

__all__ = ["tagged_fixes", "OLD_NAMES", "has_no_effect"]

#: Deprecated argument -> the name it was renamed to (same meaning).
OLD_NAMES = {"available_gpus": "available_devices"}


def has_no_effect(arg: Arg, value: Any) -> bool:
    """Whether deleting a deprecated argument is exact: SparseML ignored it (``log_types``) or
    it holds the only value still accepted, its default (``phased: false``)."""
    return arg.deprecated and (arg.description.startswith("Ignored.") or (
        "default" in arg.schema and type(value) is type(arg.default) and value == arg.default))


def _fix(m: Modifier, key: str, code: str, title: str, safe: bool, *edits: Edit) -> Fix:
    span = m.key_span(key)
    return Fix(code, span.line, span.column, title, safe, edits)


def _tag_fix(t: Text, m: Modifier) -> Iterator[Fix]:
    """M001: an unknown tag with a close modifier name."""
    new, safe = choose([m.type], sorted(all_specs())).get(m.type, (None, False))
    start = (m.span.line, m.span.column)
    end = (m.span.line, m.span.column + len(m.type) + 1)
    if new is not None and t.slice(start, end) == f"!{m.type}":
        yield Fix("M001", m.span.line, m.span.column, f"rename {m.type} to {new}", safe,
                  (Edit(start, end, f"!{new}"),))


def _deprecated_fix(t: Text, m: Modifier, spec: ModifierSpec, key: str) -> Iterator[Fix]:
    """M007: a deprecated argument with an exact rewrite."""
    doc = m.document
    assert doc is not None
    arg = spec.arg(key)
    assert arg is not None
    path = (*m.args_path, key)
    value = m.raw_args[key]
    if key in OLD_NAMES:
        if OLD_NAMES[key] not in m.raw_args:
            yield _fix(m, key, "M007", f"rename {key} to {OLD_NAMES[key]}", True,
                       rename_key(t, doc, path, OLD_NAMES[key]))
    elif key == "mfac_options":
        yield _fix(m, key, "M007", "write mfac_options as the flat arguments it groups", True,
                   _flatten(t, doc, m, path))
    elif has_no_effect(arg, value):
        yield _fix(m, key, "M007", f"delete {key} (it has no effect)", True,
                   delete_entry(t, doc, path))


_KEY = re.compile(r"^(\s*)([A-Za-z_][\w]*)(\s*:)")


def _flatten(t: Text, doc: Document, m: Modifier, path: tuple[Any, ...]) -> Edit:
    """The block mapping at ``path`` dedented into its parent, its key line removed (a
    comment on it kept as a comment line), its old names renamed."""
    options = m.raw_args["mfac_options"]
    if not isinstance(options, Mapping) or not options:
        raise FixNotPossible("mfac_options is not a mapping")
    clash = {OLD_NAMES.get(str(k), str(k)) for k in options} & {str(k) for k in m.raw_args}
    if clash:
        raise FixNotPossible(f"given both flat and grouped: {sorted(clash)}")
    first, last = entry_lines(t, doc, path)
    key_line = t.line(first)
    parent = len(key_line) - len(key_line.lstrip(" "))
    head = key_line.strip()
    if not re.fullmatch(r"mfac_options\s*:\s*(#.*)?", head):
        raise FixNotPossible("mfac_options is not written as a block mapping")
    child_key = doc.locs[(*path, next(iter(options)))].key_span
    assert child_key is not None
    shift = child_key.column - 1 - parent
    out = [" " * parent + head[head.index("#"):]] if "#" in head else []
    for n in range(first + 1, last + 1):
        line = t.line(n)
        lead = len(line) - len(line.lstrip(" "))
        line = line[min(shift, lead):]
        match = _KEY.match(line)
        if match and lead - min(shift, lead) == parent and match.group(2) in OLD_NAMES:
            line = match.group(1) + OLD_NAMES[match.group(2)] + line[match.end(2):]
        out.append(line)
    text = "".join(f"{line}\n" for line in out)
    if t.offset(last + 1, 1) == len(t.text) and not t.text.endswith("\n"):
        text = text[:-1]
    return Edit((first, 1), (last + 1, 1), text)


def _modifier_fixes(t: Text, m: Modifier, spec: ModifierSpec | None) -> Iterator[Fix]:
    if spec is None:
        yield from _tag_fix(t, m)
        return
    doc = m.document
    assert doc is not None
    names = [a.name for a in spec.args]
    typos = choose([k for k in m.raw_args if isinstance(k, str) and k not in names],
                   [n for n in names if n not in m.raw_args])
    for key in m.raw_args:
        if not isinstance(key, str):
            continue
        arg = spec.arg(key)
        try:
            if arg is None:
                new, safe = typos.get(key, (None, False))
                if new is not None:
                    yield _fix(m, key, "M002", f"rename {key} to {new}", safe,
                               rename_key(t, doc, (*m.args_path, key), new))
            elif arg.deprecated:
                yield from _deprecated_fix(t, m, spec, key)
        except FixNotPossible:
            continue


def tagged_fixes(t: Text, recipe: Recipe) -> list[Fix]:
    """Every fix of a ``!Modifier`` recipe, safe and unsafe, in file order."""
    specs = all_specs()
    out: list[Fix] = []
    for m in recipe.modifiers:
        if m.document is not None:
            out += _modifier_fixes(t, m, specs.get(m.type))
    return sorted(out, key=lambda f: (f.line, f.column))
