"""What every backend runtime shares, framework-free: resolving a recipe's selectors against a
model once, refusing a recipe whose patterns do not fit the model before training starts, and
checking a saved schedule state before it is restored.

:class:`RecipeRuntime` holds the event dispatch and the saved state; backends subclass it and
keep only what touches their framework (masks on tensors or variables, optimizer values, model
structure).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..modifiers import emits_of
from ..params.records import ParamRecord
from ..params.selectors import ModelParams
from ..pruning.driver import PrunerSet
from ..recipe.model import Recipe
from ..registry import canonical_shape
from ..schedule.events import Event
from ..schedule.kinds import track_kind
from ..schedule.plan import Plan
from .finish import warn_unfinished
from .fit import check_fits_run
from .preflight import check_before_training, refuse_invalid, runnable_recipe
from .resume import check_same_recipe, identity, recipe_hash

if TYPE_CHECKING:
    from ..recipe.model import Modifier

__all__ = [
    "RecipeRuntime", "check_saved_state",
]

def check_saved_state(state: Mapping[str, Any], version: int, steps_per_epoch: int, attached: bool) -> None:
    """Refuse a saved state that cannot continue this schedule, saying why."""
    if not attached:
        raise RuntimeError("call modify(model, optimizer, steps_per_epoch) before load_state_dict()")
    if state.get("version") != version:
        raise ValueError(f"unsupported recipe-spec state version {state.get('version')!r}")
    if state.get("steps_per_epoch") not in (None, steps_per_epoch):
        raise ValueError(
            f"the saved schedule ran at steps_per_epoch={state['steps_per_epoch']}, but modify() "
            f"was given {steps_per_epoch}; resume with the same steps_per_epoch"
        )


class RecipeRuntime:
    """The framework-free half of a backend runtime: the schedule, the event dispatch and the
    bookkeeping every backend shares, so the two backends cannot drift apart.

    A backend subclass supplies only what touches its framework:

    - ``framework``: the name of its backend (for the checks at :meth:`_attach`: the backend's
      capabilities must cover the recipe, and every event target a handler ``_on_<target>``);
    - ``masks``: its mask set (``hold``/``release``/``release_all``/``apply``/``update``);
    - ``_param_records()``, and ``_index_params()`` to look parameters up by name;
    - ``_hold(name, modifier, from_zeros)``: a mask entry for a parameter (``from_zeros``: the
      mask of the parameter's current non-zeros, for constant pruning);
    - ``_trainable(name)`` / ``_set_trainable(name, flag)``;
    - ``_set_optimizer_value(key, value, groups)`` for ``"lr"`` and ``"weight_decay"``;
    - ``_on_layers``, ``_on_quantization``, ``_on_observers``, ``_on_bn_stats`` (model structure);
    - ``_mask_state(entry)`` (a copy of a mask to save), ``_extra_state()`` and
      ``_load_structure(state)`` / ``_load_extra(state)`` for what only it saves;
    - ``_reset_momentum()`` (AC/DC's ``momentum`` events) and ``_second_order_host(sampler)``,
      the :class:`~recipe_spec.pruning.base.WeightHost` of gradient-based pruners.

    Pruning is the pruners' (:mod:`recipe_spec.pruning`): one per pruning modifier, chosen by
    its declared ``scores``; the runtime is their :class:`~recipe_spec.pruning.base.MaskHost`.

    The step protocol: :meth:`apply_events` applies the plan's events of the current step
    (before the optimizer step), and the backend advances :attr:`step_count` after the step.
    Later work attaches here too: a hook that sees the gradients before the optimizer step
    (second-order pruning buffers them), one that adjusts the loss (distillation), and the
    optimizer step itself, which a mixed-precision ``GradScaler`` may skip (the backend's
    emulated step keeps the schedule in step).
    """

    framework: ClassVar[str] = ""
    state_version: ClassVar[int] = 1

    def __init__(self, recipe: Recipe):
        refuse_invalid(recipe)  # what `recipe-spec validate` refuses never reaches a model
        self.recipe = runnable_recipe(recipe, self.framework)  # a stage/group recipe's !Modifier twins
        self.plan: Plan | None = None
        self.model: Any = None
        self.optimizer: Any = None
        self.steps_per_epoch = 0
        self.step_count = 0
        self.trainable_saved: dict[int, dict[str, bool]] = {}
        self.layers: Any = None
        self.quantization: Any = None
        self._model_params: ModelParams | None = None
        self._released_at_end: set[tuple[int, str]] = set()
        self._released_now: dict[int, set[tuple[int, str]]] = {}  # step -> released at that step
        self.pruners: PrunerSet | None = None  # one per pruning modifier, from _attach

    # -- attaching --------------------------------------------------------------------------
    def _attach(self, model: Any, optimizer: Any, steps_per_epoch: int, epoch: float,
                grad_sampler: Any = None, oneshot: bool = False) -> None:
        """Compile the plan, index the model's parameters and refuse a recipe that does not fit
        (``grad_sampler``: what second-order modifiers sample gradients with)."""
        from ..schedule import compile_plan

        self.plan = compile_plan(self.recipe, steps_per_epoch)
        self.steps_per_epoch = steps_per_epoch
        self.model, self.optimizer = model, optimizer
        self.step_count = round(epoch * steps_per_epoch)
        self._refresh()
        assert self._model_params is not None
        check_before_training(self.recipe, self.framework, self._model_params.records, self)
        check_fits_run(self.recipe, self.plan, self.names_for, self._optimizer_groups())
        records = self._model_params.records
        self.pruners = PrunerSet.attach(
            self.recipe, self.plan, self.step_count, self.framework, self,
            lambda: self._second_order_host(grad_sampler), self.names_for,
            lambda: {r.name: canonical_shape(r, self.framework)[1] for r in records}, grad_sampler, oneshot,
        )

    def _refresh(self) -> None:
        """Index the model's parameters again (after a structure change)."""
        self._index_params()
        self._model_params = ModelParams(self._param_records())

    def names_for(self, modifier: int, selector: Any) -> list[str]:
        """The parameter names a modifier's selector resolves to on this model (cached)."""
        assert self._model_params is not None
        return self._model_params.names_for(modifier, selector)

    def emitted_targets(self) -> frozenset[str]:
        """The event targets the recipe's modifiers emit (their declarations' ``emits``): what
        a backend must be ready to change, e.g. ``"lr"`` (take over the optimizer's rate)."""
        return frozenset().union(*(emits_of(m.type) for m in self.recipe.modifiers))

    @property
    def epoch(self) -> int:
        """Whole epochs run so far (where a resumed run starts)."""
        return self.step_count // self.steps_per_epoch if self.steps_per_epoch else 0

    # -- events -----------------------------------------------------------------------------
    def apply_events(self) -> None:
        """Apply the plan's events of the current step, in SparseML's manager order."""
        assert self.plan is not None
        self.apply_step_events(self.plan.events_at(self.step_count))

    def apply_step_events(self, events: Sequence[Event], collect: bool = True) -> None:
        """Apply ``events`` of the current step in order; the sparsity events of a modifier
        whose pruner prunes a whole step at once (gradient-based pruners) make one pruning
        step. ``collect``: the pruners first take what the step offers (its gradients; a
        backend that hands them over later applies those events then)."""
        if self.pruners is None:
            for event in events:
                self.apply(event)
            return
        if collect:
            self.pruners.collect(self.step_count)  # this step's gradients, before any mask changes
        done: set[int] = set()
        for event in events:
            if event.target == "sparsity" and self.pruners.whole_step(event.modifier):
                if event.modifier not in done:  # all of its sparsity events of this step at once
                    done.add(event.modifier)
                    mine = [e for e in events if e.modifier == event.modifier and e.target == "sparsity"]
                    self.pruners.apply(event.modifier, self._unreleased(mine))
            else:
                self.apply(event)

    def _unreleased(self, events: list[Event]) -> list[Event]:
        return [e for e in events if any((e.modifier, n) not in self._released_at_end
                                         for n in self.names_for(e.modifier, e.params))]

    def oneshot(self) -> None:
        """Apply every pruning modifier at its final target once (SparseML's
        ``manager.apply``), then :meth:`finalize`. Modifiers that only act during training
        (learning rate, weight decay, trainable, epoch range) have nothing to do; those that
        change the model's structure are refused."""
        from ..schedule import compile_plan

        plan = compile_plan(self.recipe, 1)
        last: dict[tuple[int, Any], Event] = {}
        for event in plan.iter_events(0):
            if event.target == "sparsity":
                last[(event.modifier, repr(event.params))] = event
            elif event.target in ("quantization", "layers", "distillation"):
                m = self.recipe.modifiers[event.modifier]
                raise NotImplementedError(
                    f"{m.type} (line {m.span.line}) changes the model during training; one-shot "
                    "apply() runs pruning modifiers only: use modify() and train"
                )
        by_modifier: dict[int, list[Event]] = {}
        for (modifier, _), event in last.items():
            by_modifier.setdefault(modifier, []).append(event)
        assert self.pruners is not None
        self.pruners.collect(0)  # without a grad sampler: the gradients the model holds
        for modifier, events in sorted(by_modifier.items()):
            if self.pruners.whole_step(modifier):
                self.pruners.apply(modifier, events)
            else:
                for event in events:
                    self.apply(event)
        self._oneshot_applied = True  # every final target is applied: nothing is unfinished
        self.finalize()

    def apply(self, event: Event) -> None:
        """Apply one event with the handler of its target (``_on_<target>``); an event no
        handler takes is an error, never dropped (``modify()`` checks this up front)."""
        handler = getattr(self, f"_on_{event.target}", None)
        if handler is None:
            raise NotImplementedError(
                f"the {self.framework} backend has no handler for '{event.target}' events of "
                f"{event.type} (line {event.line})"
            )
        handler(event, self.recipe.modifiers[event.modifier])

    def _on_sparsity(self, event: Event, m: Modifier) -> None:
        assert self.pruners is not None
        self.pruners.apply(event.modifier, [event])

    def _on_momentum(self, event: Event, m: Modifier) -> None:
        """AC/DC: a dense phase after a compressed one zeroes the optimizer's momentum
        (``momentum_buffer_reset``)."""
        self._reset_momentum()

    # -- the masks, as pruners see them (recipe_spec.pruning.base.MaskHost) ---------------------
    def hold(self, name: str, owner: int) -> Any:
        return self._hold(name, owner, False)

    def update_masks(self, entries: list[Any], sparsity: float, mask_type: Any, global_sparsity: bool,
                     step: int) -> None:
        self.masks.update(entries, sparsity, mask_type, global_sparsity, step)

    def release(self, names: Any) -> None:
        self.masks.release(names)

    def released_at(self, owner: int, name: str, step: int) -> tuple[bool, bool]:
        key = (owner, name)
        return key in self._released_now.get(step, ()), key in self._released_at_end

    def _on_masks(self, event: Event, m: Modifier) -> None:
        names = self.names_for(event.modifier, event.params)
        if event.value == "hold":
            for name in names:
                self._hold(name, event.modifier, True)
        elif event.value == "release":
            self.masks.release(n for n in names if n in self.masks.params)
            if track_kind(m.type).release_at_end:
                # a released gradual modifier does not prune at its own end step
                self._released_at_end.update((event.modifier, name) for name in names)
                # the step's own final target still prunes once (SparseML: update, then end)
                self._released_now = {event.step: {(event.modifier, name) for name in names}
                                      | self._released_now.get(event.step, set())}

    def _on_lr(self, event: Event, m: Modifier) -> None:
        self._set_optimizer_value("lr", float(event.value), event.params)

    def _on_weight_decay(self, event: Event, m: Modifier) -> None:
        self._set_optimizer_value("weight_decay", float(event.value), event.params)

    def _on_trainable(self, event: Event, m: Modifier) -> None:
        names = self.names_for(event.modifier, event.params)
        if event.value == "restore":
            flags = self.trainable_saved.pop(event.modifier, {})
        else:
            self.trainable_saved[event.modifier] = {n: self._trainable(n) for n in names}
            flags = dict.fromkeys(names, bool(event.value))
        self._set_trainable_flags(flags)

    def _set_trainable_flags(self, flags: Mapping[str, bool]) -> None:
        for name, flag in flags.items():
            self._set_trainable(name, flag)

    def loss_update(self, loss: Any, student_outputs: Any = None, student_inputs: Any = None,
                    teacher_inputs: Any = None) -> Any:
        """The training loss with the recipe's loss terms (distillation) mixed in. A backend
        that runs modifiers needing ``loss`` overrides this; without them the loss is unchanged."""
        return loss

    # -- ending, saving, resuming -----------------------------------------------------------
    def finalize(self, model: Any = None) -> None:
        """Apply the masks a last time and stop enforcing them. A pruning modifier that has
        started but whose last update is still ahead (training stopped before the first step
        at or after its ``end_epoch``) gets a ``UserWarning``: its final sparsity was not
        reached."""
        warn_unfinished(self)
        self.masks.apply()
        self.masks.release_all()

    def _mask_layout(self, entry: Any) -> Any:
        """The :class:`~recipe_spec.masks.layout.Layout` of a held mask (canonical axes of the
        backend's array); the identity unless a backend overrides it."""
        from ..masks.layout import Layout

        return Layout.identity(tuple(int(d) for d in self._mask_state(entry).shape))

    def _mask_zeros(self, entry: Any) -> tuple[int, int]:
        """(pruned entries, entries) of a mask (a backend with device masks overrides it)."""
        import numpy as np

        mask = np.asarray(self._mask_state(entry))
        return int(mask.size - np.count_nonzero(mask)), int(mask.size)

    def detach(self) -> None:
        """Let the model and optimizer go without finalizing (a new ``modify()`` replaces this
        runtime): every hook the recipe added is removed, the weights stay as they are."""
        self.masks.release_all()

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the schedule exactly: the step, the masks, which
        modifiers changed trainable flags, the structure applied (QAT, removed layers) and the
        recipe itself."""
        return {
            "version": self.state_version,
            "recipe": self.recipe.to_yaml(),
            "modifier_ids": identity(self.recipe),
            "recipe_hash": recipe_hash(identity(self.recipe)),
            "steps_per_epoch": self.steps_per_epoch,
            "step": self.step_count,
            "masks": {n: (self._mask_state(e), e.owner, e.applied_sparsity) for n, e in self.masks.params.items()},
            "trainable_saved": {k: dict(v) for k, v in self.trainable_saved.items()},
            "released": sorted(self._released_at_end),
            "layers_removed": self.layers.state() if self.layers is not None else {},
            "quantization": self.quantization.state() if self.quantization is not None else None,
            # the pruners' own state (gradient windows, movement scores), under its first name
            "second_order": self.pruners.state() if self.pruners is not None else {},
            **self._extra_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any], allow_recipe_change: bool = False) -> None:
        """Restore a state saved by :meth:`state_dict` (after ``modify()``, before the model's
        own weights are loaded where the backend says so). A state saved with another recipe is
        refused, naming what changed (:class:`recipe_spec.runtime.resume.RecipeChangedError`), unless
        ``allow_recipe_change``."""
        check_saved_state(state, self.state_version, self.steps_per_epoch, self.model is not None)
        check_same_recipe(state, self.recipe, allow_recipe_change)
        self._load_structure(state)
        self._refresh()
        self.step_count = int(state["step"])
        self.trainable_saved = {int(k): dict(v) for k, v in state.get("trainable_saved", {}).items()}
        for modifier, saved in self.trainable_saved.items():
            flag = bool(self.recipe.modifiers[modifier].args.get("trainable", True))  # default: M013
            for name in saved:
                self._set_trainable(name, flag)
        self._released_at_end = {(int(m), str(n)) for m, n in state.get("released", [])}
        self._load_extra(state)
        self.masks.release_all()
        for name, (mask, owner, applied) in state.get("masks", {}).items():
            entry = self._hold(name, int(owner), False, mask=mask)
            entry.applied_sparsity = applied
        self.masks.apply()
        if self.pruners is not None:
            self.pruners.load(state.get("second_order", {}))

    # -- what a backend supplies (see the class docstring) ----------------------------------
    def _param_records(self) -> list[ParamRecord]:
        raise NotImplementedError

    def _index_params(self) -> None:
        raise NotImplementedError

    def _hold(self, name: str, modifier: int, from_zeros: bool, mask: Any = None) -> Any:
        raise NotImplementedError

    def _trainable(self, name: str) -> bool:
        raise NotImplementedError

    def _set_trainable(self, name: str, flag: bool) -> None:
        raise NotImplementedError

    def _set_optimizer_value(self, key: str, value: float, groups: Any) -> None:
        raise NotImplementedError

    def _mask_state(self, entry: Any) -> Any:
        raise NotImplementedError

    def _optimizer_groups(self) -> int | None:
        """How many parameter groups the optimizer has (``param_groups`` indexes them); None
        where there is no optimizer (one-shot ``apply()``)."""
        return None

    def _reset_momentum(self) -> None:
        """Zero the optimizer's first-moment buffers (SGD momentum, Adam's first moment) of
        every parameter: AC/DC's ``momentum_buffer_reset`` at the start of a dense phase."""
        raise NotImplementedError(f"the {self.framework} backend cannot reset optimizer momentum")

    def _second_order_host(self, grad_sampler: Any) -> Any:
        """The :class:`recipe_spec.pruning.second_order.pruner.Host` of this backend."""
        raise NotImplementedError(f"the {self.framework} backend has no second-order pruning")

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_structure(self, state: Mapping[str, Any]) -> None:
        """Re-apply the saved structure (removed layers, QAT) before the parameters are indexed."""

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        """Restore what only this backend saved (after the step and flags, before the masks)."""

