"""Running a stage/group recipe's training stage as its ``!Modifier`` twins.

A backend of recipe-spec runs the training-time modifiers of the stage/group dialect
(ConstantPruningModifier, MagnitudePruningModifier, LegacyQuantizationModifier) through their
``!Modifier`` twins, with the arguments :mod:`.catalogue_train` translates, when every one
of them maps exactly. :func:`refusals` says, per modifier, why one cannot run (the same
answers give ``validate --backend``'s B001 and ``modify()``'s error); :func:`twin_recipe`
writes a runnable recipe as a plain ``!Modifier`` recipe whose modifiers keep the core
modifier's position, so an error still points at the stage/group recipe.

Time, as SparseML 1.8 reads it (``src/sparseml/core``):

- ``start``/``end``/``update`` are epochs of the training run, and a recipe's stages are not
  shifted against each other: only combining *several recipes* shifts them
  (``Recipe.simplify_combine_recipes`` passes ``shift=combined.calculate_end()``), and a
  single recipe is evaluated with no shift. So the twins take ``start_epoch = start`` as is.
- a modifier without ``start`` (or with a negative one) never runs in training:
  ``Modifier.initialize`` returns before ``on_initialize`` "if
  state.start_event.current_index >= 0 and self.calculate_start() < 0", and
  ``should_start`` is False for ``start: None``. A twin would run from epoch 0, so such a
  modifier is refused rather than run differently.
- one training stage only. The stage runner (``transformers/finetune/runner.py``,
  ``run_sequential_stages``) trains each stage with its own ``trainer.train(stage=...)``
  whose epochs restart at 0, while the container shifts a later stage by the earlier one's
  end; a plain ``train()`` of the whole recipe runs every stage together at unshifted epochs.
  The timing of a second training stage depends on how it is launched, so its modifiers
  are refused, naming the stage that runs.

>>> from recipe_spec import load
>>> r = load("train_stage:\\n  pruning_modifiers:\\n    ConstantPruningModifier:\\n"
...          "      targets: ['re:fc1.weight']\\n      start: 0\\n      end: 2\\n")
>>> refusals(r, "torch")
[]
>>> m = twin_recipe(r).modifiers[0]
>>> m.type, dict(m.args), m.span.line, m.stage_type
('ConstantPruningModifier', {'params': ('re:fc1.weight',), 'start_epoch': 0, 'end_epoch': 2}, 3, 'ConstantPruningModifier')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..diagnostics.base import Span
from ..recipe.model import Group, Modifier, Recipe, Stage
from ..text.frozen import FrozenDict, freeze
from .catalogue import stage_spec
from .spec import Translation
from .versions import Compat

__all__ = ["TwinModifier", "refusals", "twin_recipe", "runnable", "training_twins", "TWIN_KEYS"]

#: The twin's argument -> the core argument it was written from (to locate errors).
TWIN_KEYS = {"params": "targets", "start_epoch": "start", "end_epoch": "end",
             "update_frequency": "update", "inter_func": "update_scheduler",
             "mask_type": "mask_structure"}

_ONE_SHOT_HINT = ("llm-compressor runs it (`oneshot(model, recipe=...)`); recipe-spec validates "
                  "and lints it. Run training stages here and one-shot stages there.")


@dataclass(frozen=True, eq=False)
class TwinModifier(Modifier):
    """The ``!Modifier`` twin of a stage/group modifier: the twin's type and arguments, the stage/group
    modifier's position (``span``, and ``value_span``/``key_span`` of a twin argument find the
    stage/group argument it came from)."""

    stage_type: str = ""

    def value_span(self, *keys: Any) -> Span:
        if keys and keys[0] in TWIN_KEYS:
            keys = (TWIN_KEYS[keys[0]], *keys[1:])
        return super().value_span(*keys)

    def key_span(self, key: str) -> Span:
        return super().key_span(TWIN_KEYS.get(key, key))


def _translation(m: Modifier, compat: Compat | None) -> Translation | None:
    declared = stage_spec(m.type, compat)
    return declared.translate(m.args, compat) if declared and declared.translate else None


def _not_started(m: Modifier) -> str | None:
    start = m.args.get("start")
    if isinstance(start, (int, float)) and not isinstance(start, bool) and start >= 0:
        return None
    return (f"{m.type} has {'no start' if start is None else f'start {start!r}'}: SparseML "
            "never starts a modifier without a start epoch in a training run, and its twin "
            "would run from epoch 0")


def refusals(recipe: Recipe, backend: str | None, compat: Any = None, *,
             training: bool = True) -> list[tuple[Modifier, str, str]]:
    """``(modifier, what, how to fix)`` for every modifier of a stage/group recipe that
    ``backend`` (None: any backend of recipe-spec) does not run; [] when it runs them all.
    ``training``: judged for a training run (``modify()``), where one-shot modifiers never
    run; False (``validate --backend``): a one-shot modifier passes where the backend runs it
    in :func:`recipe_spec.oneshot` (its ``oneshot_needs``)."""
    from ..modifiers import supported_by
    from ..registry import backend_capabilities

    chosen = compat if compat is None or isinstance(compat, Compat) else Compat.parse(str(compat))
    caps = backend_capabilities().get(backend, frozenset()) if backend else frozenset()
    runs = supported_by(caps) if backend else frozenset()
    where = f"the {backend} backend" if backend else "recipe-spec's backends"
    do, run = ("does", "runs") if backend else ("do", "run")
    out: list[tuple[Modifier, str, str]] = []
    training_stage: str | None = None
    settings = _stage_settings(recipe)
    for m in recipe.modifiers:
        declared = stage_spec(m.type, chosen)
        if declared is None:
            continue  # M001 already
        if not declared.training:
            refused = _one_shot_refusal(m, declared.oneshot_needs, backend, caps, training, where, do)
            if refused is not None:
                out.append(refused)
            continue
        unusual = _stage_refusal(m, settings.get(m.stage or "", {}))
        if unusual is not None:
            out.append((m, unusual[0], unusual[1]))
            continue
        if training_stage is None:
            training_stage = m.stage
        if m.stage != training_stage:
            out.append((m, f"{m.type} is in a second training stage ('{m.stage}' after "
                           f"'{training_stage}'): {where} {run} one training stage of a "
                           "stage/group recipe, since SparseML times a later stage differently "
                           "when its stage runner trains stages one by one than when one "
                           "train() runs them all", "Move the training modifiers into one stage, "
                        "or give each training stage its own recipe (epochs count from 0)."))
            continue
        translation = _translation(m, chosen)
        if translation is None or not translation.ok:
            reason = "; ".join(translation.refused) if translation is not None else "it has no twin"
            out.append((m, f"{m.type} cannot run on {where} as written: {reason}",
                        "Change the arguments named, or write the stage with its `!Modifier` twin."))
            continue
        late = _not_started(m)
        if late is not None:
            out.append((m, late, "Give it `start: 0` (an epoch) to run from the stage's start."))
            continue
        if backend is not None and translation.twin not in runs:
            out.append((m, f"{m.type} runs as {translation.twin}, which {where} {do} not run",
                        "Choose a backend that runs it (docs/modifiers/index.md)."))
    return out


def _one_shot_refusal(m: Modifier, needs: frozenset[str], backend: str | None,
                      caps: frozenset[str], training: bool, where: str,
                      do: str) -> tuple[Modifier, str, str] | None:
    """Why a one-shot modifier does not run: never in a training run; in ``oneshot()`` only
    where the backend has every capability of its ``oneshot_needs``."""
    from ..registry import backend_capabilities

    hosts = sorted(b for b, c in backend_capabilities().items() if needs and needs <= c)
    if training and hosts:
        return (m, f"{m.type} is a one-shot modifier, run by recipe_spec.oneshot or llm-compressor: a "
                   f"training run ({where}) does not run it", f"Run it with recipe_spec.oneshot(model, "
                f"recipe=..., dataset=...) ({', '.join(hosts)}), and training stages with modify().")
    if not training and backend is not None and needs and needs <= caps:
        return None
    lacking = f" (it needs {', '.join(sorted(needs - caps))})" if needs and backend else ""
    hint = (f"recipe_spec.oneshot runs it on {', '.join(hosts)}; or run it with llm-compressor."
            if hosts else _ONE_SHOT_HINT)
    return (m, f"{m.type} is a one-shot modifier, run by llm-compressor: {where} {do} not run "
               f"it{lacking}", hint)


def _stage_settings(recipe: Recipe) -> dict[str, dict[str, Any]]:
    """Each stage's own settings as written (``run_type``, ``enabled``), by stage name."""
    from .reader import stage_parts

    root = recipe.document.value if recipe.document is not None else None
    if not isinstance(root, FrozenDict):
        return {}
    return {name: {k: body[k] for k in ("run_type", "enabled") if k in body}
            for name, body, _ in stage_parts(root) if body is not None}


def _stage_refusal(m: Modifier, settings: dict[str, Any]) -> tuple[str, str] | None:
    """Why a training modifier's stage does not run as a training stage: SparseML skips a
    stage with ``enabled: false`` and runs a ``run_type: oneshot`` stage (or, with no
    run_type, one whose name contains "oneshot": ``infer_run_type``) one-shot."""
    stage = m.stage or ""
    if settings.get("enabled") is False:
        return (f"{m.type} is in stage '{stage}', which has `enabled: false`: SparseML skips the "
                "stage and llm-compressor 0.7+ ignores the setting, so what runs depends on the "
                "tool", "Delete the stage to skip it, or the `enabled: false` line to run it.")
    run_type = settings.get("run_type")
    if run_type == "oneshot" or (run_type is None and "oneshot" in stage and "train" not in stage):
        why = "`run_type: oneshot`" if run_type == "oneshot" else "a name containing 'oneshot'"
        return (f"{m.type} is in stage '{stage}', which SparseML runs one-shot ({why}): one-shot "
                "stages are run by llm-compressor", "Put training modifiers in a training stage "
                "(`run_type: train`), or run this stage with llm-compressor.")
    return None


def _twin(m: Modifier, translation: Translation) -> TwinModifier:
    args = freeze(dict(translation.args))
    return TwinModifier(
        type=translation.twin, args=args, raw_args=args, group="modifiers", stage=None,
        span=m.span, path=m.path, args_path=m.args_path, document=m.document, file=m.file,
        stage_type=m.type,
    )


def twin_recipe(recipe: Recipe) -> Recipe:
    """The ``!Modifier`` recipe that runs a stage/group recipe :func:`refusals` accepts: its
    training stage's modifiers as their twins, in file order, in one unnamed stage (so that
    no stage offset applies: the core epochs are the twins' epochs). ``ValueError`` when some
    modifier cannot run."""
    if recipe.dialect != "stage":
        return recipe
    refused = refusals(recipe, None)
    if refused:
        m, message, _ = refused[0]
        raise ValueError(f"line {m.span.line}: {message}")
    return twins_of(recipe)


def training_twins(recipe: Recipe) -> Recipe:
    """The ``!Modifier`` twins of a stage/group recipe's training-time modifiers that have
    one (one-shot modifiers left out): what a backend runs, for the schedule preview. Check
    :func:`refusals` first: a refused training modifier is approximated here."""
    return twins_of(recipe) if recipe.dialect == "stage" else recipe


def twins_of(recipe: Recipe) -> Recipe:
    """:func:`twin_recipe`, for a recipe already checked."""
    twins = []
    for m in recipe.modifiers:
        translation = _translation(m, None)
        if translation is not None:
            twins.append(_twin(m, translation))
    stage_span = recipe.stages[0].span if recipe.stages else Span.point(1)
    return Recipe(
        stages=(Stage(None, (Group("modifiers", tuple(twins), stage_span),), span=stage_span),),
        path=recipe.path, source=recipe.source, document=recipe.document,
        warnings=recipe.warnings, dialect="modifier",
    )


def runnable(recipe: Recipe, backend: str | None) -> Recipe:
    """What ``backend``'s runtime (None: any backend's) runs: a ``!Modifier`` recipe itself; a stage/group recipe's
    twins when :func:`refusals` has nothing against it, else the recipe unchanged (``modify()``
    then refuses it with B001, see :func:`recipe_spec.runtime.check_backend_runs`)."""
    if recipe.dialect != "stage" or refusals(recipe, backend):
        return recipe
    return twins_of(recipe)  # no refusal for ``backend``: none for any backend either

