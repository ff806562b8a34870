"""JSON Schemas of the stage/group dialect, generated from the catalogue (:mod:`.catalogue`).

One schema per modifier name (:func:`stage_modifier_schema`; every variant of the name over
every release merged, each argument's releases in its description) and one for a whole
recipe file (:func:`stage_recipe_schema`: stages, groups mapping modifier names to their
arguments, variables). ``schemas/stage/<Name>.schema.json`` and
``schemas/recipe-stage.schema.json`` are these, written by ``python -m recipe_spec.docgen``.

The schemas are the union of every release, so that no recipe ``recipe-spec validate``
accepts fails them: an argument any release takes is allowed (its description says which
releases), an argument no release takes is not, and a value may always be an ``eval(...)``
string (the validator evaluates it, or says which releases do not). What one release alone
rejects is ``recipe-spec validate --compat``'s job.

>>> s = stage_modifier_schema("GPTQModifier")
>>> s["properties"]["sequential_update"]["description"].split("Releases: ")[1]
'SparseML ≥1.8, llm-compressor ≤0.7.'
>>> "percdamp" in s["properties"]
False
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from ..modifiers.schema import SCHEMA_DIALECT
from .catalogue import all_stage_names, stage_variants
from .reader import STAGE_KEYS
from .spec import StageSpec
from .versions import TOOL_LABELS, ToolVersion, summarize

__all__ = ["STAGE_SCHEMA_DIR", "stage_names", "stage_modifier_schema", "stage_recipe_schema",
           "stage_schema_files"]

#: Where the per-modifier schemas are written (relative to the repository root).
STAGE_SCHEMA_DIR = "schemas/stage"

#: Keys of the catalogue's argument fragments that are recipe-spec's own, not JSON Schema.
_OWN_KEYS = frozenset({"fraction", "nm", "ci"})

#: A value recipe-spec evaluates (or reports per release) instead of type-checking it.
EVAL = {"type": "string", "pattern": "^\\s*eval\\(",
        "description": "An eval(...) expression over the recipe's variables."}


def stage_names() -> list[str]:
    """Every modifier name of the stage/group dialect that some release has, sorted."""
    return [n for n in all_stage_names() if not stage_variants(n)[0].renamed_to]


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if k not in _OWN_KEYS}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _pairs(spec: StageSpec, name: str) -> list[ToolVersion]:
    """The releases in which variant ``spec`` takes argument ``name``."""
    return [p for p in spec.versions() if name in spec.args_in(p)]


def _releases(pairs: list[ToolVersion]) -> str:
    """:func:`summarize`, with a tool that has every release said so (``llm-compressor (all
    releases)`` rather than a bare ``llm-compressor``)."""
    words = summarize(pairs)
    if words == "every version":
        return "every release of SparseML 1.6+ and llm-compressor"
    labels = set(TOOL_LABELS.values())
    return ", ".join(f"{p} (all releases)" if p in labels else p for p in words.split(", "))


def _sentence(text: str) -> str:
    text = text.strip()
    return text if not text or text.endswith((".", "!", "?")) else text + "."


def _history(variants: tuple[StageSpec, ...], name: str) -> str:
    """The release history of argument ``name``: where it is taken, required, deprecated."""
    taken = [p for s in variants for p in _pairs(s, name)]
    parts = [f"Releases: {_releases(taken)}."]
    required = [p for s in variants for p in s.versions() if name in s.required_in(p)]
    if required:
        parts.append(f"Required in {_releases(required)}.")
    for s in variants:
        for d in s.deprecated:
            if d.arg == name:
                where = [p for p in s.versions() if d is s.deprecation_in(name, p)]
                if where:
                    parts.append(f"Deprecated in {_releases(where)}: {_sentence(d.message)}")
        for r in s.renamed:
            if r.new == name:
                parts.append(f"Formerly {r.old}" + (f" ({r.note})." if r.note else "."))
    return " ".join(parts)


def _property(variants: tuple[StageSpec, ...], name: str) -> dict[str, Any]:
    """The schema of argument ``name`` over every variant (``anyOf`` where they differ)."""
    bodies: list[Any] = []
    description = ""
    for s in variants:
        a = s.spec.arg(name)
        if a is None or not _pairs(s, name):
            continue
        description = description or a.description
        body = {k: v for k, v in _plain(a.schema).items() if k != "description"}
        if "enum" in body:  # the validator checks the choices alone (AWQ's duo_scaling)
            body.pop("type", None)
        if body not in bodies:
            bodies.append(body)
    prop: dict[str, Any] = {"description": f"{_sentence(description)} {_history(variants, name)}"}
    alternatives = [*bodies, {"$ref": "#/$defs/eval"}]
    prop["anyOf"] = alternatives
    return prop


@functools.cache
def _schema(name: str) -> str:
    variants = stage_variants(name)
    if not variants or variants[0].renamed_to:
        raise KeyError(name)
    names: list[str] = []
    for s in variants:
        for a in s.spec.args:
            if a.name not in names and _pairs(s, a.name):
                names.append(a.name)
    everywhere = [p for s in variants for p in s.versions()]
    required = [n for n in names
                if all(n in s.required_in(p) for s in variants for p in s.versions())]
    description = " ".join(_sentence(s.spec.description) for s in variants)
    renames = sorted({f"{r.old} → {r.new}" for s in variants for r in s.renamed
                      if r.new in names and r.old not in names})
    description += f" Releases: {_releases(everywhere)}."
    if renames:
        description += f" Old argument names (refused): {', '.join(renames)}."
    schema: dict[str, Any] = {
        "$schema": SCHEMA_DIALECT,
        "$id": f"urn:recipe-spec:schemas:stage/{name}",
        "title": name,
        "description": description,
        "type": "object",
        "properties": {n: _property(variants, n) for n in names},
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    schema["$defs"] = {"eval": EVAL}
    schema["x-recipe-spec"] = {"dialect": "stage", "category": variants[-1].spec.category,
                               "example": _plain(variants[-1].spec.example)}
    return json.dumps(schema)


def stage_modifier_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of the stage/group modifier ``name`` (a new dict; ``KeyError`` if the
    dialect has no such modifier)."""
    result: dict[str, Any] = json.loads(_schema(name))
    return result


def _group() -> dict[str, Any]:
    return {
        "description": "A group: modifier class names mapped to their arguments.",
        "type": "object",
        "properties": {n: {"$ref": f"#/$defs/{n}"} for n in stage_names()},
        "additionalProperties": False,
    }


def stage_recipe_schema() -> dict[str, Any]:
    """One schema for a whole stage/group recipe file (for yaml-language-server and other
    JSON Schema validators): ``<name>_stage:`` mappings (or ``stages: {name: stage}``)
    holding ``<name>_modifiers:`` groups, a bare top-level group, and variables."""
    defs: dict[str, Any] = {"eval": EVAL, "group": _group()}
    for name in stage_names():
        body = stage_modifier_schema(name)
        for key in ("$schema", "$id", "$defs"):
            body.pop(key, None)
        defs[name] = body
    stage_props: dict[str, Any] = {
        "run_type": {"description": "oneshot or train (read by SparseML and llm-compressor "
                     "<0.5; ignored later).", "type": "string"},
        "args": {"description": "Stage arguments (SparseML).", "type": ["object", "null"]},
        "enabled": {"type": "boolean"},
        "exclude_default": {"type": "boolean"},
        "group": {"type": ["string", "null"]},
    }
    assert set(stage_props) == set(STAGE_KEYS)
    group_keys = "(^|_)modifiers$"
    defs["stage"] = {
        "description": "A stage: its `<name>_modifiers:` groups and stage settings.",
        "type": "object",
        "properties": stage_props,
        "patternProperties": {group_keys: {"$ref": "#/$defs/group"}},
    }
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": "urn:recipe-spec:schemas:recipe-stage",
        "title": "recipe-spec stage/group recipe",
        "description": "A stage/group recipe of SparseML 1.6+ and llm-compressor: "
        "`<name>_stage:` mappings holding `<name>_modifiers:` groups, each mapping modifier "
        "class names to their arguments; other top-level keys are variables.",
        "type": "object",
        "properties": {
            "version": {"description": "Recipe version (metadata)."},
            "metadata": {"description": "Free-form metadata."},
            "stages": {"description": "Stages by name (SparseML's spelling).", "type": "object",
                       "additionalProperties": {"$ref": "#/$defs/stage"}},
        },
        "patternProperties": {
            "_stage$": {"$ref": "#/$defs/stage"},
            group_keys: {"$ref": "#/$defs/group"},
        },
        "$defs": defs,
    }


def stage_schema_files() -> dict[str, str]:
    """``{path: JSON text}`` of every stage/group schema file (docgen writes them)."""
    files = {f"{STAGE_SCHEMA_DIR}/{n}.schema.json":
             json.dumps(stage_modifier_schema(n), indent=2) + "\n" for n in stage_names()}
    files["schemas/recipe-stage.schema.json"] = json.dumps(stage_recipe_schema(), indent=2) + "\n"
    return files
