"""The stage/group dialect's modifier catalogue: one :class:`StageSpec` per modifier (per meaning).

A :class:`StageSpec` wraps a :class:`~recipe_spec.modifiers.spec.ModifierSpec` (arguments as
:class:`~recipe_spec.modifiers.spec.Arg` with JSON-schema fragments; ``Arg.tools`` says where
an argument exists, empty = wherever the modifier exists) and adds what the ``!Modifier``
catalogue has no room for: where the modifier exists, required arguments per version,
renamed and deprecated arguments, which arguments hold quantization structures, and for
training-time modifiers the ``!Modifier`` twin plus a translation into its arguments.

This catalogue is separate from :func:`recipe_spec.modifiers.all_specs`: names collide
(``QuantizationModifier`` and the pruning modifiers exist in both dialects with other
arguments). ``QuantizationModifier`` even changes meaning inside this dialect (QAT in
SparseML 1.6/1.7, compressed-tensors from SparseML 1.8), so a name may have several variants
with disjoint ``tools``.

Declarations live in ``catalogue_quant`` (quantization and transforms), ``catalogue_prune``
(one-shot pruning) and ``catalogue_train`` (training-time modifiers and their translations).
"""

from __future__ import annotations

import functools

from . import catalogue_prune, catalogue_quant, catalogue_train
from .spec import BASE_ARGS, Deprecation, Renamed, StageSpec, Translation, arg, declare
from .versions import Compat, ToolVersion, all_versions

__all__ = [
    "StageSpec", "Renamed", "Deprecation", "Translation", "BASE_ARGS", "arg", "stage_spec",
    "stage_specs", "stage_variants", "all_stage_names", "declare", "variant_in",
]


@functools.cache
def _all() -> tuple[StageSpec, ...]:

    found = [*catalogue_quant.SPECS, *catalogue_prune.SPECS, *catalogue_train.SPECS]
    seen: dict[ToolVersion, set[str]] = {}
    for s in found:
        for pair in s.versions():
            if s.name in seen.setdefault(pair, set()):
                raise RuntimeError(f"{s.name} is declared twice for {pair}")
            seen[pair].add(s.name)
    return tuple(sorted(found, key=lambda s: s.name))


def stage_specs() -> tuple[StageSpec, ...]:
    """Every declaration (every variant), in name order."""
    return _all()


def all_stage_names() -> list[str]:
    """Every modifier name of the dialect, sorted."""
    return sorted({s.name for s in _all()})


@functools.lru_cache(maxsize=1024)
def stage_variants(name: str) -> tuple[StageSpec, ...]:
    """Every variant declared for ``name`` (empty when the name is unknown)."""
    return tuple(s for s in _all() if s.name == name)


@functools.lru_cache(maxsize=4096)
def variant_in(name: str, pair: ToolVersion) -> StageSpec | None:
    """The variant of ``name`` that exists in a release, or None."""
    for s in stage_variants(name):
        if s.exists_in(pair):
            return s
    return None


def stage_spec(name: str, compat: Compat | None = None) -> StageSpec | None:
    """The declaration of ``name``: the variant in ``compat``'s release, or without
    ``compat`` the newest variant; None when there is none."""
    if compat is not None:
        return variant_in(name, compat.pair)
    variants = stage_variants(name)
    if not variants:
        return None
    order = {p: i for i, p in enumerate(all_versions())}
    return max(variants, key=lambda s: max((order[p] for p in s.versions()), default=-1))
