"""The reference pages of the stage/group dialect's modifiers, for ``docgen``.

:func:`stage_pages` returns ``{path: Markdown}`` for ``docs/modifiers/stage/``: one page per
modifier name (every variant of the name on it), ``index.md`` and
``quantization-arguments.md`` (the nested compressed-tensors structures and the presets).
Everything comes from the catalogue (:mod:`.catalogue`, :mod:`.quant_args`): where a
modifier and each argument exist is rendered with :func:`.versions.summarize`.

>>> print(example_text(stage_variants("GPTQModifier")[0]), end="")
oneshot_stage:
  quantization_modifiers:
    GPTQModifier:
      targets: Linear
      scheme: W4A16
      ignore:
        - lm_head
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..modifiers.spec import Arg
from ..recipe.serialize import dump_value
from ..stage_dialect import catalogue_prune, catalogue_quant, catalogue_train
from ..stage_dialect.catalogue import all_stage_names, stage_spec, stage_specs, stage_variants
from ..stage_dialect.quant_args import (
    ARGS_FIELDS,
    CT_OF,
    PRESETS,
    SCHEME_FIELDS,
    QuantField,
    field_schema,
)
from ..stage_dialect.spec import StageSpec
from ..stage_dialect.versions import ToolVersion, all_versions, in_range, summarize, versions_where
from .markdown import (
    GENERATED_NOTE,
    allowed,
    branch,
    code,
    first_sentence,
    lit,
    page,
    sentence,
    table,
    type_of,
)
from .pages import backends_of

__all__ = ["STAGE_DIR", "stage_pages", "stage_page", "stage_index", "quantization_page",
           "example_text", "example_recipe", "runs_as"]

#: The folder (relative to the repository root) of the generated stage/group pages.
STAGE_DIR = "docs/modifiers/stage"

_QUANT_SHAPES = {
    "groups": "group name → [QuantizationScheme](quantization-arguments.md#quantizationscheme)",
    "scheme": "a [preset](quantization-arguments.md#presets) name, or {preset: targets}",
    "args": "a [QuantizationArgs](quantization-arguments.md#quantizationargs) mapping",
    "legacy:scheme": "SparseML's QAT scheme: `default`, `deepsparse`, `tensorrt`, or a mapping of "
                     "`weights` / `input_activations` / `output_activations` (`num_bits` 1-8, "
                     "`symmetric`, `strategy`, `kwargs`)",
    "legacy:overrides": "module type or name → a QAT scheme (as `scheme`)",
}
_QUANT_EXAMPLE = """\
quant_stage:
  quantization_modifiers:
    QuantizationModifier:
      ignore: [lm_head]
      config_groups:
        group_0:
          targets: [Linear]
          weights: {num_bits: 4, type: int, symmetric: true, strategy: group, group_size: 128}
      kv_cache_scheme: {num_bits: 8, type: float, strategy: tensor, dynamic: false}
"""
#: Modifiers whose example needs another one after it (C004: AWQ is a transform from
#: llm-compressor 0.11 and must be followed by a quantization modifier).
_FOLLOWED_BY: dict[str, tuple[str, dict[str, Any]]] = {
    "AWQModifier": ("QuantizationModifier",
                    {"targets": ["Linear"], "scheme": "W4A16", "ignore": ["lm_head"]}),
}
_FOOTER = ("[Stage/group modifiers](index.md) · [The stage/group dialect](../../stage-dialect.md)"
           " · [Diagnostic codes](../../rules/index.md)")


def _module(s: StageSpec) -> str:
    for module in (catalogue_quant, catalogue_prune, catalogue_train):
        if any(x is s for x in module.SPECS):
            return module.__name__.rsplit(".", 1)[-1] + ".py"
    return "catalogue.py"


def _where(pairs: Iterable[ToolVersion]) -> str:
    return summarize(pairs) or "no release"


def _arg_versions(s: StageSpec, a: Arg) -> list[ToolVersion]:
    """The releases where ``s`` exists and takes ``a`` (in :func:`all_versions` order)."""
    return [p for p in s.versions() if a.name in s.args_in(p)]


def _both(s: StageSpec, tools: Mapping[str, str]) -> list[ToolVersion]:
    inside = set(versions_where(tools))
    return [p for p in s.versions() if p in inside]


def _kind(s: StageSpec) -> str:
    return "training-time" if s.training else "one-shot"


# -- examples ----------------------------------------------------------------------------------
def _example_args(s: StageSpec) -> Mapping[str, Any]:
    if s.spec.example:
        return s.spec.example
    target = stage_spec(s.renamed_to) if s.renamed_to else None
    return target.spec.example if target is not None else {}


def example_recipe(s: StageSpec) -> tuple[str, Mapping[str, Any]]:
    """The modifier name the example writes (the new name of a renamed modifier) and its
    arguments."""
    return s.renamed_to or s.name, _example_args(s)


def _modifier_lines(name: str, args: Mapping[str, Any]) -> list[str]:
    if not args:
        return [f"    {name}: {{}}"]
    body = dump_value(dict(args)).splitlines()
    return [f"    {name}:", *(("      " + line) if line else "" for line in body)]


def example_text(s: StageSpec) -> str:
    """The example of one variant as a whole stage/group recipe (YAML text)."""
    name, args = example_recipe(s)
    stage = "train_stage" if s.training else "oneshot_stage"
    lines = [f"{stage}:", f"  {s.spec.category}_modifiers:", *_modifier_lines(name, args)]
    if name in _FOLLOWED_BY:
        lines += _modifier_lines(*_FOLLOWED_BY[name])
    return "\n".join(lines) + "\n"


# -- what recipe-spec does with it -------------------------------------------------------------
def _backends(twin: str) -> str:
    labels = [f"`{b}`" for b in sorted(backends_of(twin))]  # backend names, as the index's columns
    if not labels:
        return ""
    names = " and ".join([", ".join(labels[:-1]), labels[-1]] if len(labels) > 1 else labels)
    return f"the {names} backend{'s' if len(labels) > 1 else ''}"


def runs_as(s: StageSpec, link: str = "../") -> str:
    """What recipe-spec does with a variant, in words (``link``: path to docs/modifiers/)."""
    if s.renamed_to:
        return f"exists in no release: write {code(s.renamed_to)}"
    hosts = _oneshot_backends(s)
    if not s.training or s.translate is None or s.twin is None:
        if hosts and stage_spec(s.name) is s:
            return f"validated and linted; runs in {code('recipe_spec.oneshot')} on {hosts}"
        return "validated and linted; run by llm-compressor"
    if stage_spec(s.name) is not s:  # modify() reads the name as its newest variant
        other = next((o for o in stage_specs() if o.translate is s.translate and o.name != s.name
                      and stage_spec(o.name) is o), None)
        newer = stage_spec(s.name)
        reads = f"recipe-spec runs the name as the {_kind(newer)} one" if newer else ""
        if other is None:
            return f"validated; {reads}"
        return (f"validated; {reads}: write [{code(other.name)}]({other.name}.md) to run it as "
                f"[{code(f'!{other.twin}')}]({link}{other.twin}.md)")
    translation = s.translate(_example_args(s), None)
    if not translation.ok:
        return "validated; not run: " + translation.refused[0]
    where = _backends(translation.twin)
    return (f"runs as [{code('!' + translation.twin)}]({link}{translation.twin}.md)"
            + (f" on {where}" if where else "")
            + (f"; in {code('recipe_spec.oneshot')} on {hosts}" if hosts else ""))


def _oneshot_backends(s: StageSpec) -> str:
    """The backends whose capabilities cover ``s.oneshot_needs``, in words ("" if none)."""
    from ..registry import backend_capabilities

    names = sorted(b for b, caps in backend_capabilities().items() if s.oneshot_needs and s.oneshot_needs <= caps)
    if not names:
        return ""
    return "the " + " and ".join(f"`{n}`" for n in names) + (" backends" if len(names) > 1 else " backend")


# -- one modifier page -------------------------------------------------------------------------
def _required(s: StageSpec, name: str) -> str:
    tools = s.required.get(name)
    return _where(_both(s, tools)) if tools is not None else "no"


def _arg_rows(s: StageSpec) -> list[list[str]]:
    rows = []
    for a in s.spec.args:
        if s.versions() and not _arg_versions(s, a):
            continue  # an argument of the base class added after this variant was gone
        default = code(lit(a.default)) if "default" in a.schema else "—"
        run = [_ONESHOT_USE[a.oneshot]] if s.oneshot_needs else []
        rows.append([code(a.name), type_of(a.schema), allowed(a.schema, link_defs=False) or "—",
                     default, _required(s, a.name), _where(_arg_versions(s, a)), *run, a.description])
    return rows


#: What a one-shot run does with an argument, in the words of the generated pages.
_ONESHOT_USE = {"runs": "runs", "inert": "accepted, no effect on the result",
                "default": "only at its default", "": "refused (B001)"}


def _removed_in(s: StageSpec, a: Arg) -> list[ToolVersion]:
    """The releases after the last one (SparseML, then llm-compressor) that takes ``a``."""
    order = s.versions()
    have = [i for i, p in enumerate(order) if a.name in s.args_in(p)]
    return order[have[-1] + 1:] if have else []


def _change_rows(s: StageSpec) -> list[list[str]]:
    rows = []
    names = {a.name: a for a in s.spec.args}
    for r in s.renamed:
        new, old = names.get(r.new), names.get(r.old)
        if new is None:
            continue
        where = [p for p in _arg_versions(s, new) if old is None or r.old not in s.args_in(p)]
        if where:
            what = f"write {code(r.new)}" + (f" ({r.note})" if r.note else "")
            rows.append([code(r.old), f"renamed to {code(r.new)}", _where(where), what])
    for d in s.deprecated:
        where = _both(s, d.tools)
        if where:
            rows.append([code(d.arg), "deprecated", _where(where), sentence(d.message)])
    for a in s.spec.args:
        gone = _removed_in(s, a)
        if gone:
            to = next((r.new for r in s.renamed if r.old == a.name), None)
            what = s.instead.get(a.name) or (f"write {code(to)}" if to else "delete it")
            rows.append([code(a.name), "removed", _where(gone), sentence(what)])
    return rows


def _quant_lines(s: StageSpec, level: str) -> list[str]:
    if not s.quant:
        return []
    lines = [f"{level} Quantization arguments", ""]
    lines += [f"- {code(arg)}: {_QUANT_SHAPES[shape]}" for arg, shape in s.quant.items()]
    presets = sorted({p for p in PRESETS for pair in s.versions()
                      if pair in CT_OF and in_range(PRESETS[p], CT_OF[pair])})
    lines += ["", "Their fields, and the releases that accept each field and preset, are on "
              "[Quantization arguments](quantization-arguments.md). Presets accepted in some "
              "release where this modifier exists: " + ", ".join(code(p) for p in presets) + "."]
    return lines


def _variant_lines(s: StageSpec, level: str) -> list[str]:
    lines = [s.spec.description, "",
             f"- **Category:** {code(s.spec.category)}",
             f"- **Kind:** {_kind(s)}",
             f"- **Exists in:** {_where(s.versions())}",
             f"- **recipe-spec:** {runs_as(s)}"]
    if s.notes:
        lines.append(f"- **Note:** {sentence(s.notes)}")
    lines += ["", f"{level} Example", ""]
    if s.renamed_to:
        lines += [f"Write it as {code(s.renamed_to)}:", ""]
    lines += ["```yaml", example_text(s).rstrip("\n"), "```", "",
              f"{level} Arguments", "",
              *table(("Argument", "Type", "Allowed values", "Default", "Required in",
                       "Exists in", *(("In `recipe_spec.oneshot`",) if s.oneshot_needs else ()), "Description"),
                     _arg_rows(s)),
              "", "Any other argument is an error (M002); an argument that only some releases "
              "take is reported for the others (C001)."]
    changes = _change_rows(s)
    if changes:
        lines += ["", f"{level} Renamed, deprecated and removed arguments", "",
                  *table(("Argument", "Change", "In", "Instead"), changes)]
    quant = _quant_lines(s, level)
    return lines + ([""] + quant if quant else [])


def stage_page(name: str) -> str:
    """The page of one stage/group modifier name (every variant of it)."""
    variants = stage_variants(name)
    sources = sorted({_module(s) for s in variants})
    lines = [f"# {name}", "",
             GENERATED_NOTE.format(source="its declaration in `recipe_spec/stage_dialect/` ("
                                    + ", ".join(code(m) for m in sources) + ")"), "",
             f"A modifier of the [stage/group dialect](../../stage-dialect.md), written as "
             f"{code(name + ':')} under a {code('<name>_modifiers:')} group of a stage.", ""]
    if len(variants) == 1:
        lines += _variant_lines(variants[0], "##")
    else:
        lines += [f"The name means {len(variants)} different modifiers, by release; "
                  "`--compat` picks the release, and without it each release is checked against "
                  "the variant it has:", ""]
        lines += [f"- {_where(s.versions())}: {first_sentence(s.spec.description)}"
                  for s in variants]
        for s in variants:
            lines += ["", f"## In {_where(s.versions())}", "", *_variant_lines(s, "###")]
    lines += ["", _FOOTER]
    return page(lines)


# -- index and the quantization page -----------------------------------------------------------
def stage_index() -> str:
    """``docs/modifiers/stage/index.md``: every variant of every name, one row each."""
    rows = [[f"[{s.name}]({s.name}.md)", code(s.spec.category), _kind(s), _where(s.versions()),
             runs_as(s)] for s in stage_specs()]
    lines = [
        "# Stage/group modifiers",
        "",
        GENERATED_NOTE.format(source="the catalogue in `recipe_spec/stage_dialect/`"),
        "",
        f"The [stage/group dialect](../../stage-dialect.md) of SparseML 1.6-1.9 and llm-compressor "
        f"has {len(all_stage_names())} modifier names. Each page gives the releases where the modifier "
        "and each of its arguments exist, the arguments renamed, deprecated or removed and what "
        "to write instead, and an example that validates without errors. A name with several "
        "meanings over the releases has one row per meaning.",
        "",
        *table(("Modifier", "Category", "Kind", "Exists in", "What recipe-spec does"), rows),
        "",
        "The nested quantization arguments (`config_groups`, `scheme`, `kv_cache_scheme`) and "
        "the scheme presets are on [Quantization arguments](quantization-arguments.md). "
        "The modifiers of the `!Modifier` dialect are on [their own pages](../index.md).",
    ]
    return page(lines)


def _field_releases(f: QuantField) -> list[ToolVersion]:
    return [p for p in all_versions() if p in CT_OF and in_range(f.ct, CT_OF[p])]


def _field_allowed(f: QuantField) -> str:
    if len(f.schemas) == 1:
        return allowed(f.schemas[0][1], link_defs=False) or "—"
    groups: dict[int, list[ToolVersion]] = {}
    for pair in _field_releases(f):
        schema = field_schema(f, pair)
        index = next(i for i, (_, s) in enumerate(f.schemas) if s is schema)
        groups.setdefault(index, []).append(pair)
    return "; ".join(f"{_where(pairs)}: {branch(f.schemas[i][1], link_defs=False) or 'any'}"
                     for i, pairs in sorted(groups.items()))


def _field_table(fields: tuple[QuantField, ...]) -> list[str]:
    rows = [[code(f.name), type_of(f.schemas[0][1]), "yes" if f.required else "no",
             _field_allowed(f), _where(_field_releases(f)), f.description] for f in fields]
    return table(("Field", "Type", "Required", "Allowed values", "Exists in", "Description"),
                  rows)


def quantization_page() -> str:
    """``docs/modifiers/stage/quantization-arguments.md``."""
    takers = [[f"[{s.name}]({s.name}.md)", _where(s.versions()),
               ", ".join(f"{code(a)} ({shape})" for a, shape in s.quant.items())]
              for s in stage_specs() if s.quant]
    presets = [[code(p), _where(pair for pair in all_versions()
                                 if pair in CT_OF and in_range(rng, CT_OF[pair]))]
               for p, rng in sorted(PRESETS.items())]
    ct_rows = [[_where([pair]), str(ct)] for pair, ct in CT_OF.items()]
    lines = [
        "# Quantization arguments",
        "",
        GENERATED_NOTE.format(source="`recipe_spec/stage_dialect/quant_args.py`"),
        "",
        "The quantization modifiers of the [stage/group dialect](../../stage-dialect.md) take "
        "compressed-tensors structures: `config_groups` maps group names to a "
        "[QuantizationScheme](#quantizationscheme), whose `weights`, `input_activations` and "
        "`output_activations` (and a modifier's `kv_cache_scheme`) are "
        "[QuantizationArgs](#quantizationargs); `scheme` is a [preset](#presets) name "
        "(`W4A16`) or a mapping `{PRESET: targets}`. Which fields, values and presets exist "
        "follows the compressed-tensors release each tool release used "
        "([below](#compressed-tensors-releases)); SparseML 1.6/1.7 have none.",
        "",
        "```yaml",
        _QUANT_EXAMPLE.rstrip("\n"),
        "```",
        "",
        "## Modifiers that take them",
        "",
        *table(("Modifier", "Exists in", "Arguments (shape)"), takers),
        "",
        "## QuantizationScheme",
        "",
        *_field_table(SCHEME_FIELDS),
        "",
        "## QuantizationArgs",
        "",
        *_field_table(ARGS_FIELDS),
        "",
        "## Presets",
        "",
        "Preset names are matched case-insensitively.",
        "",
        *table(("Preset", "Exists in"), presets),
        "",
        "## compressed-tensors releases",
        "",
        *table(("Tool release", "compressed-tensors"), ct_rows),
        "",
        _FOOTER,
    ]
    return page(lines)


def stage_pages() -> dict[str, str]:
    """Every generated file of ``docs/modifiers/stage/``: ``{path: Markdown}``."""
    pages = {f"{STAGE_DIR}/{name}.md": stage_page(name) for name in all_stage_names()}
    pages[f"{STAGE_DIR}/index.md"] = stage_index()
    pages[f"{STAGE_DIR}/quantization-arguments.md"] = quantization_page()
    return pages
