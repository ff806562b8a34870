"""The per-layer sparsity arguments of SparseGPTModifier and WandaPruningModifier
(``sparsity_profile``, ``owl_m``, ``owl_lmbda``, a ``sparsity`` list), checked as llm-compressor
validates them (``sgpt_base.py``), each problem at the key or value it is about:

- **M006**: a ``sparsity_profile`` other than ``owl`` (any case): llm-compressor 0.5+ refuses
  it ("Please choose profile from ['owl']"), older releases run no profile; OWL with a
  ``sparsity`` list (OWL starts from one sparsity; ``float(list)`` fails).
- **M003**: some but not all of ``sparsity_profile: owl``, ``owl_m``, ``owl_lmbda``
  (llm-compressor 0.5+: "Must provide all of ... or none"; before, a lone ``owl_m`` is ignored
  and a profile without the other two fails at run time).
- **C007** (warning, per release): llm-compressor's ``oneshot()`` cannot run OWL in 0.11 and
  later (0.13+ stops in its initialisation with "Cannot invoke event before initializing";
  0.11-0.12 hand the whole per-layer dict to each layer as its sparsity), and in 0.5 and later
  OWL needs ``targets`` that match the decoder layers themselves (its per-layer values are
  counted against the target matches). recipe-spec's ``oneshot`` runs OWL
  (:mod:`recipe_spec.oneshot.owl.profile`).

>>> from recipe_spec import load
>>> r = load("s_stage:\\n  s_modifiers:\\n    WandaPruningModifier:\\n      sparsity: 0.5\\n"
...          "      sparsity_profile: owl\\n      owl_m: 5\\n")
>>> [(d.code, d.line) for d in owl_diagnostics(r, None)]
[('M003', 3)]
>>> r = load("s_stage:\\n  s_modifiers:\\n    WandaPruningModifier:\\n      sparsity: 0.5\\n"
...          "      sparsity_profile: owl\\n      owl_m: 5\\n      owl_lmbda: 0.08\\n")
>>> [(d.code, d.line) for d in owl_diagnostics(r, None)]
[('C007', 5)]
"""

from __future__ import annotations

from collections.abc import Iterator

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic, Severity
from ..recipe.model import Modifier, Recipe
from .oneshot_compat import targets_layers
from .versions import Compat, affects

__all__ = ["owl_diagnostics", "OWL_FAILS", "OWL_TARGET_COUNT"]

#: The llm-compressor releases whose ``oneshot()`` cannot finish an OWL run.
OWL_FAILS = {"llmcompressor": ">=0.11"}
#: The releases that count the OWL values against the ``targets`` matches.
OWL_TARGET_COUNT = {"llmcompressor": ">=0.5"}
_PRUNERS = ("SparseGPTModifier", "WandaPruningModifier")


def _modifier(recipe: Recipe, m: Modifier, compat: Compat | None) -> Iterator[Diagnostic]:
    args = m.args
    profile, owl_m, lmbda = args.get("sparsity_profile"), args.get("owl_m"), args.get("owl_lmbda")
    is_owl = isinstance(profile, str) and profile.lower() == "owl"
    if profile is not None and not is_owl:
        yield codes.M006(f"{m.type} sparsity_profile {profile!r} is not a profile llm-compressor has "
                         "(0.5 and later refuse it; earlier releases run no profile)",
                         "Write sparsity_profile: owl (with owl_m and owl_lmbda), or remove it.",
                         m.value_span("sparsity_profile")).in_file(recipe.path)
        return
    given = {"sparsity_profile: owl": is_owl, "owl_m": owl_m is not None, "owl_lmbda": lmbda is not None}
    if any(given.values()) and not all(given.values()):
        missing = [k for k, v in given.items() if not v]
        yield codes.M003(f"{m.type} needs all of sparsity_profile: owl, owl_m and owl_lmbda or none "
                         f"(llm-compressor 0.5 and later refuse it); {' and '.join(missing)} missing",
                         f"Add {' and '.join(missing)} (e.g. owl_m: 5, owl_lmbda: 0.08), or remove the "
                         "other OWL arguments.", m.span).in_file(recipe.path)
        return
    if not is_owl:
        return
    if isinstance(args.get("sparsity"), (list, tuple)):
        yield codes.M006(f"{m.type} with sparsity_profile owl takes one sparsity, the mean OWL keeps; "
                         "a list is refused (llm-compressor fails on float(list))",
                         "Write one number, e.g. sparsity: 0.5, or drop the OWL arguments.",
                         m.value_span("sparsity")).in_file(recipe.path)
        return
    yield from _tool(recipe, m, compat)


def _tool(recipe: Recipe, m: Modifier, compat: Compat | None) -> Iterator[Diagnostic]:
    fails, versions = affects(OWL_FAILS, compat)
    counted, counted_in = affects(OWL_TARGET_COUNT, compat)
    if fails:
        yield codes.C007(f"OWL does not run in the oneshot() of {versions}: 0.13 and later stop in its "
                         "initialisation ('Cannot invoke event before initializing'), 0.11-0.12 hand "
                         "the whole per-layer dict to each layer as its sparsity; recipe-spec's "
                         "oneshot runs it", "With llm-compressor, write one sparsity or a list "
                         "(one per target match), or use llm-compressor 0.10 or earlier.",
                         m.value_span("sparsity_profile"), Severity.WARNING).in_file(recipe.path)
    elif counted and targets_layers(m):
        yield codes.C007(f"in {counted_in}, OWL gives one sparsity per decoder layer and counts them "
                         "against the target matches, so targets matching the Linear layers "
                         "themselves are refused ('initialized with N sparsities values'); "
                         "recipe-spec's oneshot prunes each layer to its decoder layer's value",
                         "Set targets to the decoder layers, e.g. ['re:model\\.layers\\.\\d+$'].",
                         m.value_span("targets") if "targets" in m.args else m.span,
                         Severity.WARNING).in_file(recipe.path)


def owl_diagnostics(recipe: Recipe, compat: Compat | None) -> list[Diagnostic]:
    """The M003/M006/C007 diagnostics of the per-layer sparsity arguments of ``recipe``."""
    out: list[Diagnostic] = []
    for m in recipe.modifiers:
        if m.type in _PRUNERS:
            out += _modifier(recipe, m, compat)
    return out
