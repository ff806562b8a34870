"""The generated pages: one per modifier and its index, one per diagnostic code and its
index."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..checks.schemas import backend_support, modifier_names, modifier_schema
from ..diagnostics.codes import CODES, Code
from ..diagnostics.fixes import fix_availability, fix_text_of
from ..modifiers import all_specs, declared_in
from ..recipe.serialize import dump_value
from .markdown import (
    FIELD_HEADER,
    GENERATED_NOTE,
    allowed,
    code,
    constraints,
    field_rows,
    first_sentence,
    page,
    sentence,
    table,
    type_of,
)

#: Code families, in the order the rules index lists them.
FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("Y", "Files and YAML", "the file cannot be read as one safe YAML document"),
    ("S", "Recipe structure", "the document is not laid out as a recipe"),
    ("V", "Variables and expressions", "a variable or an `eval(...)` expression has no value"),
    ("M", "Modifier arguments", "a modifier's arguments do not match its schema or rules"),
    ("E", "Epochs and schedules", "epochs and schedules contradict each other"),
    ("C", "Tool versions", "a stage/group recipe is read differently by some SparseML or llm-compressor versions"),
    ("P", "Parameter patterns", "parameter selectors cannot match the model"),
    ("B", "Backend support", "the chosen backend cannot run the recipe"),
)


# Rule examples that are not YAML recipes: shown with the right language, never parsed.
_EXAMPLE_LANGUAGE = {"Y006": "markdown"}


# -- modifier pages --------------------------------------------------------------------------
def _numeric_keys(value: Any) -> Any:
    """``value`` with mapping keys that are the text of a number turned into that number.

    JSON object keys are always strings, but recipes key sparsity maps and ``num_grads``
    by numbers (``0.0: 256``), and the rules read them as numbers.

    >>> _numeric_keys({"num_grads": {"0.0": 64, "0.5": 128}, "Embedding": {"x": 1}})
    {'num_grads': {0.0: 64, 0.5: 128}, 'Embedding': {'x': 1}}
    """
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            key: Any = k
            if isinstance(k, str) and re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", k):
                key = float(k) if any(c in k for c in ".eE") else int(k)
            out[key] = _numeric_keys(v)
        return out
    if isinstance(value, list):
        return [_numeric_keys(v) for v in value]
    return value


def modifier_example(name: str) -> str:
    """The example of modifier ``name`` as a complete recipe (YAML text).

    >>> print(modifier_example("EpochRangeModifier"), end="")
    modifiers:
      - !EpochRangeModifier
        start_epoch: 0.0
        end_epoch: 90.0
    """
    example = modifier_schema(name).get("x-recipe-spec", {}).get("example") or {}
    if not example:
        return f"modifiers:\n  - !{name} {{}}\n"
    body = dump_value(_numeric_keys(example))
    lines = ["modifiers:", f"  - !{name}"]
    lines += [("    " + line) if line else "" for line in body.splitlines()]
    return "\n".join(lines) + "\n"


def backends_of(name: str) -> list[str]:
    return sorted(b for b, names in backend_support().items() if name in names)


def modifier_page(name: str) -> str:
    """The reference page of modifier ``name`` (Markdown)."""
    schema = modifier_schema(name)
    meta = schema.get("x-recipe-spec", {})
    declared = all_specs()[name]
    backends = backends_of(name)
    all_backends = sorted(backend_support())
    lines = [
        f"# {name}",
        "",
        GENERATED_NOTE.format(source=f"its declaration in `recipe_spec/modifiers/` (`{declared_in(name)}`)"),
        "",
        schema.get("description", ""),
        "",
        f"- **Tag:** {code('!' + name)}",
        f"- **Category:** {code(meta.get('category', 'other'))}",
        f"- **Backends:** {', '.join(backends) if backends else 'none yet'}"
        + (
            f" (not available on {', '.join(missing)})"
            if backends and (missing := [b for b in all_backends if b not in backends])
            else ""
        ),
        f"- **Needs (backend capabilities):** "
        f"{', '.join(code(c) for c in sorted(declared.needs)) if declared.needs else 'nothing'}",
        f"- **JSON Schema:** {code(f'recipe-spec schema {name}')}",
        "",
        "## Fields",
        "",
    ]
    props = schema.get("properties", {})
    required = schema.get("required", [])
    if props:
        lines += table(FIELD_HEADER, field_rows(props, required))
    else:
        lines.append("This modifier takes no arguments.")
    if schema.get("additionalProperties") is False:
        lines += ["", "Any other key is an error (M002)."]
    notes = constraints(schema)
    if notes:
        lines += ["", "## Constraints", ""]
        lines += [f"- {c}" for c in notes]
    defs = schema.get("$defs", {})
    if defs:
        lines += ["", "## Definitions", ""]
        for dname in sorted(defs):
            dspec = defs[dname]
            lines += [f"### `{dname}`", ""]
            if dspec.get("description"):
                lines += [dspec["description"], ""]
            kind = type_of(dspec) if ("type" in dspec or "anyOf" in dspec) else ""
            values = allowed(dspec)
            if kind and kind != "any":
                lines += [f"Type: {kind}.", ""]
            if values:
                lines += [f"Allowed: {values}.", ""]
            tables = [dspec] + [b for b in dspec.get("anyOf", []) if "properties" in b]
            for t in tables:
                if "properties" in t:
                    lines += table(FIELD_HEADER, field_rows(t["properties"], t.get("required", [])))
                    lines.append("")
    lines += [
        "",
        "## Example",
        "",
        "```yaml",
        modifier_example(name).rstrip("\n"),
        "```",
        "",
        "[All modifiers](index.md) · [Diagnostic codes](../rules/index.md)",
    ]
    return page(lines)


def modifier_index() -> str:
    """``docs/modifiers/index.md``: every modifier, one line each, with backend support."""
    backends = sorted(backend_support())
    rows = []
    for name in modifier_names():
        schema = modifier_schema(name)
        have = backends_of(name)
        rows.append(
            [f"[{name}]({name}.md)", code(schema.get("x-recipe-spec", {}).get("category", "other")),
             first_sentence(schema.get("description", ""))]
            + ["yes" if b in have else "no" for b in backends]
        )
    lines = [
        "# Modifiers",
        "",
        GENERATED_NOTE.format(source="the declarations in `recipe_spec/modifiers/`"),
        "",
        f"recipe-spec knows {len(rows)} modifiers. Each page lists the modifier's fields with "
        "their types, defaults and allowed values, and a recipe that validates cleanly. "
        "`recipe-spec schema list` prints the names; `recipe-spec schema NAME` prints one "
        "modifier's JSON Schema.",
        "",
        *table(("Modifier", "Category", "What it does", *backends), rows),
        "",
        "A backend runs a modifier exactly when it declares every capability the modifier's "
        "declaration needs (see [the design](../design.md)); `schemas/backends.json` writes that "
        "out, and `recipe-spec validate --backend NAME` reports a modifier the backend does not "
        "run ([B001](../rules/B001.md)), as `modify()` refuses it.",
        "",
        "The modifiers of the stage/group dialect (SparseML 1.6-1.9 and llm-compressor, see "
        "[the dialect](../stage-dialect.md)) have their own pages: "
        "[stage/group modifiers](stage/index.md).",
    ]
    return page(lines)


# -- rule pages ------------------------------------------------------------------------------
def _family(code_id: str) -> tuple[str, str, str]:
    for family in FAMILIES:
        if code_id.startswith(family[0]):
            return family
    return (code_id[:1], "Other", "")


def _example_language(c: Code) -> str:
    """The fenced-block language of a code's example: ``yaml`` unless it is something else."""
    if c.id in _EXAMPLE_LANGUAGE:
        return _EXAMPLE_LANGUAGE[c.id]
    if c.example.startswith("recipe-spec "):
        return "sh"
    return "yaml"


def _a_or_an(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word


def rule_page(code_id: str) -> str:
    """The documentation page of diagnostic code ``code_id`` (Markdown)."""
    c = CODES[code_id]
    letter, family, _ = _family(c.id)
    lines = [
        f"# {c.id}: {c.title}",
        "",
        GENERATED_NOTE.format(source="`recipe_spec/diagnostics/codes.py`"),
        "",
        f"- **Code:** {code(c.id)}",
        f"- **Family:** {letter} ({family})",
        f"- **Default severity:** {c.severity.value}",
        f"- **Automatic fix:** {fix_availability(c.id)}",
        "",
        "## What it does",
        "",
        f"Reports **{c.title}** ({code(c.id)}), {_a_or_an(c.severity.value)} by default.",
        "",
        "## Why it matters",
        "",
        c.why,
    ]
    if c.example:
        lines += ["", "## Example", "", f"```{_example_language(c)}", c.example, "```"]
    if c.fix:
        lines += ["", "## How to fix", "", c.fix]
    if fix_availability(c.id) != "none":
        lines += ["", "## Automatic fix", "",
                  f"{fix_text_of(c.id)} See [the fix command](../fix.md)."]
    lines += [
        "",
        "## Silencing it",
        "",
        f"`recipe-spec validate --ignore {c.id}` leaves it out of a run; "
        f"`--select {c.id}` reports nothing else. A comment `# noqa: {c.id}` on the reported "
        "line silences it there (see [the validate command](../validate.md)).",
        "",
        "[All codes](index.md)",
    ]
    return page(lines)


def rule_index() -> str:
    """``docs/rules/index.md``: every code, grouped by family."""
    lines = [
        "# Diagnostic codes",
        "",
        GENERATED_NOTE.format(source="`recipe_spec/diagnostics/codes.py`"),
        "",
        "Every problem `recipe-spec validate` reports has a code: a family letter and three "
        "digits. `--select` and `--ignore` take codes or prefixes (`--ignore M007`, "
        "`--select E,M`); `# noqa: CODE` silences one line.",
        "",
    ]
    for letter, family, what in FAMILIES:
        codes = sorted(c for c in CODES if c.startswith(letter))
        lines += [f"## {letter}: {family}", "", sentence(f"Codes for when {what}"), ""]
        if codes:
            lines += table(
                ("Code", "Severity", "Title"),
                [
                    (f"[{c}]({c}.md)", CODES[c].severity.value, CODES[c].title)
                    for c in codes
                ],
            )
        else:
            lines.append("No codes yet.")
        lines.append("")
    others = sorted(c for c in CODES if not any(c.startswith(f[0]) for f in FAMILIES))
    if others:
        lines += ["## Other", ""]
        lines += table(
            ("Code", "Severity", "Title"),
            [(f"[{c}]({c}.md)", CODES[c].severity.value, CODES[c].title) for c in others],
        )
    return page(lines)
