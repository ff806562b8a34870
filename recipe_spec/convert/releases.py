"""A stage/group recipe moved from one tool release to another.

What the target release requires, as text edits (so comments, key order and layout stay):

- every safe fix of ``recipe-spec fix --compat`` for that release (:mod:`recipe_spec.fix`):
  renamed arguments (``percdamp`` -> ``dampening_frac``), ``prunen``/``prunem`` ->
  ``mask_structure``, renamed modifiers, arguments whose removal changed nothing;
- a setting that moved out of the recipe (:data:`recipe_spec.fix.stage.DROP_UNSAFE`:
  ``sequential_targets`` went to the ``oneshot()`` call in llm-compressor 0.11) is deleted,
  and a :class:`~.result.Note` says what to pass to ``oneshot()``;
- AWQ split (llm-compressor 0.11 made ``AWQModifier`` a transform): the quantization
  arguments of an ``AWQModifier`` that the target's ``AWQModifier`` no longer takes and its
  ``QuantizationModifier`` does move to a ``QuantizationModifier`` written right after it, as
  llm-compressor's own compatibility shim splits them
  (``llmcompressor/modifiers/awq/__init__.py``).

Whatever the target release still rejects afterwards (``OutputDistillationModifier`` removed
in llm-compressor 0.9, a modifier the release lacks, an argument with no counterpart) is
refused, located at the source, with the validator's words.
"""

from __future__ import annotations

from ..diagnostics.base import Severity
from ..fix.edits import Edit, FixNotPossible, entry_lines
from ..fix.engine import finding_key, fix_text
from ..fix.stage import DROP_UNSAFE, siblings
from ..loader import check
from ..recipe.model import Modifier, Recipe
from ..stage_dialect import Compat
from ..stage_dialect.catalogue import variant_in
from ..text.frozen import thaw
from ..text.source import Source, from_text
from ..validation import validate
from .result import Note, Refusal
from .text import Text

__all__ = ["across_releases", "MOVES", "source_of"]

#: The fix titles that move a setting out of the recipe (made by convert, not by fix).
MOVES = {f"delete {key} ({why})" for (_, key), why in DROP_UNSAFE.items()}


def source_of(text: str, path: str) -> Source:
    """``text`` read as the file ``path`` (Markdown front matter for ``.md``)."""
    return from_text(text, path, ".md" if path.lower().endswith(".md") else "")


def _load(text: str, path: str) -> Recipe | None:
    recipe, _ = check(source_of(text, path))
    return recipe


def _moved(recipe: Recipe, compat: Compat) -> list[Note]:
    """What the release moved out of the recipe, said where the source has it."""
    notes = []
    for m in recipe.modifiers:
        declared = variant_in(m.type, compat.pair)
        for key in m.raw_args:
            if (m.type, key) in DROP_UNSAFE and (declared is None or key not in declared.args_in(compat.pair)):
                value = thaw(m.args[key])
                notes.append(Note(m.key_span(key).line, f"{m.type}'s {key} moved out of the "
                                  f"recipe in {compat.label}: pass {key}={value!r} to oneshot()"))
    return notes


def _split_awq(text: str, path: str, compat: Compat) -> tuple[str, list[Note], list[Refusal]]:
    """``text`` with every AWQModifier's quantization arguments moved to a
    QuantizationModifier after it, where the release requires it."""
    awq, quant = variant_in("AWQModifier", compat.pair), variant_in("QuantizationModifier", compat.pair)
    recipe = _load(text, path)
    if awq is None or quant is None or recipe is None:
        return text, [], []
    t = Text(text)
    edits: list[Edit] = []
    notes: list[Note] = []
    refused: list[Refusal] = []
    awq_args, quant_args = awq.args_in(compat.pair), quant.args_in(compat.pair)
    for m in recipe.modifiers:
        if m.type != "AWQModifier":
            continue
        moved = [k for k in m.raw_args if k not in awq_args and k in quant_args]
        if not moved:
            continue
        try:
            edits += _split_one(t, m, moved)
        except FixNotPossible as exc:
            refused.append(Refusal(m.span.line, m.span.column,
                                   f"AWQModifier's {', '.join(moved)} must move to a "
                                   f"QuantizationModifier after it in {compat.label}: {exc}",
                                   "Write AWQModifier with its arguments one per line, and its "
                                   "group without a QuantizationModifier of its own, or move "
                                   "them by hand."))
            continue
        notes.append(Note(m.span.line, f"AWQModifier is a transform in {compat.label}: "
                                       f"{', '.join(moved)} moved to the QuantizationModifier "
                                       "written after it"))
    return (t.apply(edits) if edits and not refused else text), notes, refused


def _split_one(t: Text, m: Modifier, moved: list[str]) -> list[Edit]:
    doc = m.document
    assert doc is not None
    if "QuantizationModifier" in siblings(m):
        raise FixNotPossible("its group has a QuantizationModifier already")
    _, last = entry_lines(t, doc, m.path)
    taken: list[str] = []
    edits: list[Edit] = []
    for key in moved:
        first, end = entry_lines(t, doc, (*m.args_path, key))
        while first > 1 and t.line(first - 1).lstrip().startswith("#"):
            first -= 1
        taken += [t.line(n) for n in range(first, end + 1)]
        edits.append(Edit((first, 1), (end + 1, 1), ""))
    indent = " " * (m.span.column - 1)
    block = "".join(f"{line}\n" for line in [f"{indent}QuantizationModifier:", *taken])
    if len(moved) == len([k for k in m.raw_args]):
        key_end = (m.span.end_line, m.span.end_column + 1)  # after the colon: it keeps no argument
        edits.append(Edit(key_end, key_end, " {}"))
    if t.offset(last + 1, 1) == len(t.text) and not t.text.endswith("\n"):
        block = "\n" + block.rstrip("\n")
    edits.append(Edit((last + 1, 1), (last + 1, 1), block))
    return edits


def across_releases(text: str, path: str, compat: Compat) -> tuple[str, list[Note], list[Refusal]]:
    """``text`` (a stage/group recipe) as ``compat``'s release requires it: the new text,
    what the user must carry over, and what has no equivalent there (then the text is
    not to be used)."""
    recipe = _load(text, path)
    if recipe is None:
        return text, [], [Refusal(1, 1, "the recipe does not load", "Run recipe-spec validate.")]
    notes = _moved(recipe, compat)
    fixed = fix_text(text, path, compat, unsafe=lambda f: f.title in MOVES)
    notes += [Note(f.line, f.title) for f in fixed.applied if f.title not in MOVES]
    out, split_notes, refused = _split_awq(fixed.fixed, path, compat)
    notes += split_notes
    if refused:
        return text, notes, refused
    where = {finding_key(d): d for d in validate(source_of(text, path), compat=compat)}
    for d in validate(source_of(out, path), compat=compat):
        if d.severity is not Severity.ERROR:
            continue
        src = where.get(finding_key(d))
        line, column = (src.line, src.column) if src is not None else (d.line, d.column)
        refused.append(Refusal(line or 1, column or 1, d.message, d.hint or (
            f"Change it by hand, or convert to a release that takes it (it has no "
            f"equivalent in {compat.label}).")))
    notes.sort(key=lambda n: n.line)
    return out, notes, refused
