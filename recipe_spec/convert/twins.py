"""The stage/group modifier a ``!Modifier`` modifier is the exact twin of.

The project knows twins in one direction: the catalogue of the stage/group dialect declares,
for each training-time modifier, its ``!Modifier`` twin and a translation of its arguments
(:mod:`recipe_spec.stage_dialect.catalogue_train`; the backends run stage/group recipes that
way, :mod:`recipe_spec.stage_dialect.to_modifiers`). Going back is that translation inverted
and then *checked*: the ``!Modifier`` arguments are renamed to the stage/group names the
translation reads (:data:`~recipe_spec.stage_dialect.to_modifiers.TWIN_KEYS`), translated
forward again, and accepted only where the forward translation gives back every argument
of the original, defaults included. Anything else is refused with the translation's own
reason.

Two facts of the ``!Modifier`` dialect itself come first:

- an argument SparseML ignored, or one holding the only value still accepted (``log_types``,
  ``phased: false``; :func:`recipe_spec.fix.tagged.has_no_effect`), is left out;
- ``GMPruningModifier`` is ``MagnitudePruningModifier`` when nothing else is left (SparseML's
  ``MagnitudePruningModifier`` is the ``GMPruningModifier`` whose ``global_sparsity`` is fixed
  to false; with ``global_sparsity: true`` it ranks every layer together and is refused).

>>> from recipe_spec import loads
>>> m = loads("modifiers:\\n  - !GMPruningModifier {params: [fc.weight], init_sparsity: 0.05,"
...           " final_sparsity: 0.8, start_epoch: 0, end_epoch: 4, update_frequency: 1,"
...           " log_types: __ALL__}\\n").modifiers[0]
>>> found = stage_twin(m, None)
>>> found.stage_type, found.renames, dict(found.added)
('MagnitudePruningModifier', {'params': 'targets', 'init_sparsity': 'init_sparsity', 'final_sparsity': 'final_sparsity', 'start_epoch': 'start', 'end_epoch': 'end', 'update_frequency': 'update'}, {})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..fix.tagged import has_no_effect
from ..modifiers import spec as modifier_spec
from ..modifiers.spec import ModifierSpec
from ..recipe.model import Modifier
from ..stage_dialect import Compat, StageSpec, stage_specs
from ..stage_dialect.to_modifiers import TWIN_KEYS
from ..stage_dialect.versions import all_versions
from ..text.frozen import freeze

__all__ = ["StageTwin", "NoTwin", "stage_twin", "differing_args", "SAME_AS", "twin_names",
           "CORE_KEYS"]

#: ``!Modifier`` name -> the modifier it is, once its arguments without effect are left out.
SAME_AS = {"GMPruningModifier": "MagnitudePruningModifier"}

#: The stage/group argument -> the ``!Modifier`` argument it translates to.
CORE_KEYS = {core: twin for twin, core in TWIN_KEYS.items()}

#: The arguments every stage/group modifier takes that no translation reads.
_BASE = ("index", "group")


@dataclass(frozen=True)
class StageTwin:
    """The stage/group modifier that is a ``!Modifier`` modifier's exact twin.

    ``renames``: each kept ``!Modifier`` argument -> its stage/group name, in the order
    written; ``dropped``: the arguments left out (no effect); ``added``: stage/group arguments
    to write that the original leaves to their default (their ``!Modifier`` default differs
    from the stage/group one); ``args``: the stage/group arguments, evaluated.
    """

    source: Modifier
    stage_type: str
    renames: dict[str, str]
    dropped: tuple[str, ...]
    added: Mapping[str, Any]
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NoTwin:
    """Why a ``!Modifier`` modifier has no exact stage/group twin (``key``: the argument it is
    about, if any), and what to do."""

    source: Modifier
    what: str
    how: str
    key: str | None = None


def twin_names(compat: Compat | None) -> dict[str, list[StageSpec]]:
    """``!Modifier`` name -> the stage/group declarations translating to it (in ``compat``'s
    release, or in any), newest first."""
    out: dict[str, list[StageSpec]] = {}
    for s in stage_specs():
        if s.twin is None or s.translate is None:
            continue
        if compat is not None and not s.exists_in(compat.pair):
            continue
        out.setdefault(s.twin, []).append(s)
    order = {p: i for i, p in enumerate(all_versions())}
    for found in out.values():
        found.sort(key=lambda s: max((order[p] for p in s.versions()), default=-1), reverse=True)
    return out


def _default(spec: ModifierSpec, key: str) -> Any:
    arg = spec.arg(key)
    return arg.default if arg is not None else None


def differing_args(spec: ModifierSpec, a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The arguments of ``spec`` on which ``a`` and ``b`` differ, defaults filled in (a
    selector string and the one-item list holding it are the same)."""
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key, _default(spec, key)), b.get(key, _default(spec, key))
        if key == "params":
            x = (x,) if isinstance(x, str) else x
            y = (y,) if isinstance(y, str) else y
        if freeze(x) != freeze(y):
            out.append(key)
    return out


def _kept(m: Modifier, spec: ModifierSpec) -> tuple[dict[str, Any], list[str]]:
    """The arguments of ``m`` that have an effect, and those that have none."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in m.args.items():
        arg = spec.arg(str(key))
        if arg is not None and has_no_effect(arg, value):
            dropped.append(str(key))
        else:
            kept[str(key)] = value
    return kept, dropped


def _has_twins(compat: Compat | None) -> list[str]:
    """The ``!Modifier`` names with a stage/group twin: those whose declaration's example
    translates (``OutputDistillationModifier`` never does), and their :data:`SAME_AS`."""
    have = {name for name, found in twin_names(compat).items()
            if any(c.translate is not None and c.translate(c.spec.example, compat).ok
                   for c in found)}
    return sorted(have | {k for k, v in SAME_AS.items() if v in have})


def _no_twin(m: Modifier, compat: Compat | None) -> NoTwin:
    where = compat.label if compat is not None else "the stage/group dialect"
    have = _has_twins(compat)
    declared = modifier_spec(m.type)
    how = "Keep this recipe in the !Modifier dialect (recipe-spec runs it as it is), or " \
          "delete the modifier to convert the rest."
    if declared is not None and declared.category == "learning_rate":
        how = ("Set the learning rate with the trainer's arguments (learning_rate, "
               "lr_scheduler_type) and delete the modifier, or keep the !Modifier recipe.")
    elif m.type == "EpochRangeModifier":
        how = ("The stage/group dialect has no training length: delete it and train for "
               f"{m.args.get('end_epoch', 'its end_epoch')} epochs (num_train_epochs), or "
               "convert with --drop-epoch-range.")
    return NoTwin(m, f"{m.type} has no twin in {where} (the modifiers that have one: "
                     f"{', '.join(have) or 'none'})", how)


def stage_twin(m: Modifier, compat: Compat | None) -> StageTwin | NoTwin:
    """The stage/group twin of ``m`` in ``compat``'s release (None: as the backends read
    stage/group recipes), or why there is none."""
    declared = modifier_spec(m.type)
    if declared is None:
        return NoTwin(m, f"{m.type} is not a modifier recipe-spec knows",
                      "Fix the recipe first (recipe-spec validate / fix).")
    kept, dropped = _kept(m, declared)
    name = SAME_AS.get(m.type, m.type)
    target = modifier_spec(name)
    assert target is not None
    if name != m.type:
        extra = [k for k in kept if target.arg(k) is None]
        if extra:
            return NoTwin(m, f"{m.type} with {', '.join(f'{k}: {kept[k]!r}' for k in extra)} is "
                             f"not {name}, and {name} is the only one with a stage/group twin",
                          f"Delete {', '.join(extra)} where it means the default, or keep the "
                          "!Modifier recipe.", extra[0])
    candidates = twin_names(compat).get(name, [])
    if not candidates:
        return _no_twin(m, compat)
    reasons: list[str] = []
    for core in candidates:
        found = _inverse(m, core, kept, dropped, target, compat)
        if isinstance(found, StageTwin):
            return found
        reasons.append(found)
    about = next((k for k in kept if k in reasons[0] or TWIN_KEYS.get(k, k) in reasons[0]), None)
    return NoTwin(m, f"{m.type} has no exact twin in the stage/group dialect ({candidates[0].name}, "
                     f"whose {_names(kept)}): {reasons[0]}",
                  "Change the arguments named, or keep the !Modifier recipe.", about)


def _names(kept: Mapping[str, Any]) -> str:
    """How the stage/group dialect names the arguments of ``kept`` it names otherwise."""
    renamed = [f"{k} is {TWIN_KEYS[k]}" for k in kept if k in TWIN_KEYS]
    return ", ".join(renamed) if renamed else "arguments have the same names"


def _inverse(m: Modifier, core: StageSpec, kept: dict[str, Any], dropped: list[str],
             target: ModifierSpec, compat: Compat | None) -> StageTwin | str:
    """``m`` as ``core``, checked by translating it forward again; else the reason."""
    assert core.translate is not None
    renames = {k: TWIN_KEYS.get(k, k) for k in kept}
    takes = {a.name for a in core.spec.args if a.name not in _BASE}
    missing = [k for k, c in renames.items() if c not in takes]
    if missing:
        return (f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no "
                f"{core.name} argument")
    args = {renames[k]: v for k, v in kept.items()}
    added: dict[str, Any] = {}
    for _ in range(2):
        forward = core.translate(args, compat)
        if not forward.ok:
            return "; ".join(forward.refused)
        differ = differing_args(target, dict(forward.args), kept)
        if not differ:
            return StageTwin(m, core.name, renames, tuple(dropped), added, args)
        fill = {k: kept.get(k, _default(target, k)) for k in differ if k not in kept}
        fill = {k: v for k, v in fill.items() if TWIN_KEYS.get(k, k) in takes}
        if len(fill) != len(differ):
            break
        for k, v in fill.items():
            added[TWIN_KEYS.get(k, k)] = v
            args[TWIN_KEYS.get(k, k)] = v
    bad = differing_args(target, dict(core.translate(args, compat).args), kept)
    return f"{', '.join(bad)} would not run the same as {core.name}"
