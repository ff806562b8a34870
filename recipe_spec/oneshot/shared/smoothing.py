"""The smoothing transforms in the one-shot pipeline: SmoothQuant (and its logarithmic
equalization) and AWQ, run as llm-compressor 0.14 runs them in its sequential pipeline, over a
:class:`~.host.CalibrationHost`. The arithmetic lives in
:mod:`recipe_spec.oneshot.smoothquant.solve` and :mod:`recipe_spec.oneshot.awq.search`.

**Resolution** (:func:`resolve_mappings`): the recipe's mappings, or the architecture's
(:func:`recipe_spec.oneshot.shared.mappings.default_mappings`, by the model's class name),
are matched against the model's modules (:func:`~recipe_spec.oneshot.shared.mapping_match.match_sets`).
SmoothQuant skips a mapping only when its smooth layer and every balance layer are in
``ignore``. AWQ skips a mapping none of whose layers a later quantization modifier targets, and
a ``v_proj -> o_proj`` (or ``qkv_proj -> o_proj``) pair whose shapes differ (grouped-query
attention); its *parent* is the balance layers' lowest common ancestor that is a module of
the model and not a ``ModuleList`` (a name such as ``model.layers.0.mlp`` that the model does
not have as a module, as in a keras-hub Llama whose MLP layers sit in the decoder layer itself,
gives way to the module above it), and it observes the input of the first balance layer (or
of ``activation_hook_target`` under the parent).

**Order.** Block by block (the repeated decoder layers): the block's cached inputs run through
it once with observers (SmoothQuant: each smooth layer's output range; AWQ: the mean ``|x|`` of
each mapping's input and every call of each parent), then each of the block's mappings is
applied in mapping order, then the inputs run again through the smoothed block to give the next
block's inputs. Over several processes (``torchrun``) each runs its share of the batches; the
statistics are joined (:mod:`..distributed`: SmoothQuant's ranges by their extremes, AWQ's
means relayed in the one process's order) and every process computes the same scales. So a block's statistics come from the model as smoothed up to that block, as in
llm-compressor; mappings outside every block run last, on whole-model passes. AWQ searches each
mapping on the parent calls recorded in the observation pass, with the weights as earlier
mappings of the block left them.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...quantization.args import QuantArgs
from ..awq.search import MeanAbs, search
from ..calibration import Calibration
from ..distributed import Collective, calibrate, collective_of, in_order
from ..host import CalibrationHost, ModuleInfo, inside, outermost
from ..matching import matches
from ..smoothquant.solve import ChannelRange, divide_rows, scale_columns, smoothing_scales
from .mapping_match import (
    UnresolvedMapping,
    common_ancestor,
    match_sets,
    unresolved_mappings,
)
from .mappings import default_mappings
from .smoothing_args import SmoothingPlan

__all__ = ["Resolved", "SmoothingReport", "resolve_mappings", "run_smoothing", "run_smoothing_pass",
           "unresolved_for"]

_LOG = logging.getLogger("recipe_spec.oneshot")


@dataclass(frozen=True)
class Resolved:
    """One mapping resolved: the ``smooth`` layer, the ``balance`` layers (in pattern order),
    and for AWQ the ``parent`` module run in the search, the module whose input is
    ``observed``, and each balance layer's weight grid (None: not quantized)."""

    smooth: str
    balance: tuple[str, ...]
    parent: str = ""
    observed: str = ""
    grids: tuple[QuantArgs | None, ...] = ()

    @property
    def key(self) -> str:
        """The module whose block the mapping belongs to."""
        return self.observed or self.smooth


@dataclass
class SmoothingReport:
    """What one mapping did: the scales applied (a host array) and, for SmoothQuant, the
    activation range they came from; for AWQ the ratio chosen and the grid's losses."""

    modifier: str
    smooth: str
    balance: tuple[str, ...]
    scales: Any
    activation_range: Any = None
    ratio: float | None = None
    duo: bool | None = None
    initial_loss: float | None = None
    best_loss: float | None = None
    history: list[tuple[float, bool, float]] = field(default_factory=list)


def _flat(groups: Sequence[Sequence[str]]) -> tuple[str, ...]:
    return tuple(n for g in groups for n in g)


def _grid_of(name: str, classes: Sequence[str], plan: SmoothingPlan) -> tuple[bool, QuantArgs | None]:
    """Whether a later quantization modifier targets module ``name``, and its weight grid."""
    for scheme in plan.schemes:
        if any(matches(t, name, classes) for t in scheme.targets) and not any(
                matches(t, name, classes) for t in scheme.ignore):
            return True, scheme.weights
    return False, None


def resolve_mappings(modules: Sequence[ModuleInfo], plan: SmoothingPlan, what: str) -> list[Resolved]:
    """The mappings of ``plan`` resolved against ``modules`` (see the module docstring);
    ``what`` names the modifier in errors. Raises ValueError when a mapping cannot resolve."""
    architecture = modules[0].classes[0] if modules and modules[0].name == "" and modules[0].classes else ""
    awq = plan.algorithm == "awq"
    mappings = plan.mappings if plan.mappings is not None else default_mappings(
        "awq" if awq else "smoothquant", architecture)
    named = [(i.name, i.classes) for i in modules]
    info = {i.name: i for i in modules}
    ignored = {n for n, c in named if any(matches(t, n, c) for t in plan.ignore)}
    if awq and plan.release.ignore_in_mappings:  # llm-compressor 0.9: match_modules_set(..., ignore)
        named = [(n, c) for n, c in named if n not in ignored]
    out: list[Resolved] = []
    for mapping in mappings:
        targets = mapping.patterns if awq else (*mapping.balance, mapping.smooth)
        try:
            groups = list(match_sets(named, targets))
        except ValueError as exc:
            raise ValueError(f"{what}: mapping {mapping.smooth} <- {list(mapping.balance)}: {exc}") from None
        for group in groups:
            smooth, balance = (group[0], _flat(group[1:])) if awq else (group[-1], _flat(group[:-1]))
            if len(smooth) > 1:
                raise ValueError(f"{what}: mapping {mapping.smooth} matches several smooth layers in one "
                                 f"group ({', '.join(smooth)}); make its pattern match one layer per block")
            name = smooth[0]
            if not awq:
                if name in ignored and all(b in ignored for b in balance):
                    _LOG.warning("%s: %s is skipped: it and its balance layers are ignored", what, name)
                elif balance:
                    out.append(Resolved(name, balance))
                continue
            resolved = _awq_mapping(info, name, balance, plan, mapping.hook, what)
            if resolved is not None:
                out.append(resolved)
    return out


def unresolved_for(mod: Any, names: Sequence[str], architecture: str) -> list[UnresolvedMapping]:
    """For the lint: the mapping entries of smoothing modifier ``mod`` (a
    :class:`~.modifiers.OneShotModifier` with a :class:`SmoothingPlan`; anything else gives [])
    that resolve to no module of a model with module ``names`` (e.g.
    :class:`~.checkpoint.CheckpointModel` ``modules``' names) and class ``architecture``;
    without ``mappings`` in the recipe, the architecture's defaults are checked. ``index`` is
    the entry's position in the recipe's list (or in the defaults). Raises ValueError for an
    architecture whose defaults llm-compressor builds from its config."""
    plan = getattr(mod, "transform", None)
    if not isinstance(plan, SmoothingPlan):
        return []
    mappings = plan.mappings if plan.mappings is not None else default_mappings(
        "awq" if plan.algorithm == "awq" else "smoothquant", architecture)
    return unresolved_mappings(names, mappings)


def _awq_mapping(info: dict[str, ModuleInfo], smooth: str, balance: tuple[str, ...], plan: SmoothingPlan,
                 hook: str | None, what: str) -> Resolved | None:
    s = info[smooth]
    for b in balance:  # llm-compressor skips v_proj -> o_proj where the shapes differ (GQA)
        o = info[b]
        if s.prunable and o.prunable and b.endswith(".o_proj") and (
                (smooth.endswith(".v_proj") and s.weight_shape[0] != o.weight_shape[1])
                or (smooth.endswith(".qkv_proj") and s.weight_shape[0] != 3 * o.weight_shape[1])):
            _LOG.debug("%s: %s -> %s skipped: incompatible shapes", what, smooth, b)
            return None
    grids = [_grid_of(b, info[b].classes, plan) for b in balance]
    if not (_grid_of(smooth, s.classes, plan)[0] or any(t for t, _ in grids)):
        if not plan.release.skip_unquantized:
            raise ValueError(f"{what}: no layer of the mapping of {smooth} is quantized; {plan.release.label} "
                             "searched it anyway, a run recipe_spec.oneshot does not reproduce: quantize one "
                             "of its layers, or leave it out of `mappings`")
        _LOG.warning("%s: %s is skipped: no layer of it is quantized by %s", what, smooth,
                     "a later modifier" if not plan.release.combined else "this modifier")
        return None
    if plan.duo_scaling is not False:
        for b, (_, args) in zip(balance, grids, strict=True):
            if args is not None and args.strategy == "tensor":
                raise ValueError(f"{what}: duo_scaling needs per-channel or group weight scales, and {b} "
                                 "is quantized per tensor; set duo_scaling: false or use another strategy")
    parent = common_ancestor(balance)
    while parent and (parent not in info or "ModuleList" in info[parent].classes):
        parent = parent.rsplit(".", 1)[0] if "." in parent else ""
    observed = balance[0]
    if hook:
        observed = f"{parent}.{hook}" if parent else hook
        if observed not in info:
            raise ValueError(f"{what}: activation_hook_target {hook!r} is not a module under {parent or 'the model'}")
    return Resolved(smooth, balance, parent, observed, tuple(a for _, a in grids))


#: Runs the observation pass: ``run(outputs, observers, calls)``.
_Pass = Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], None]


def run_smoothing(host: CalibrationHost, modules: Sequence[ModuleInfo], mod: Any, calibration: Calibration,
                  sequential_targets: Sequence[str] | None, offload: bool,
                  tell: Callable[[str, int, int], None] | None = None, how: str = "auto") -> list[SmoothingReport]:
    """Run one smoothing modifier ``mod`` (a :class:`~.modifiers.OneShotModifier` whose
    ``transform`` is a :class:`SmoothingPlan`) block by block (see the module docstring);
    a report per mapping applied, in the order applied. Over several processes (the host's
    ``collective``) ``calibration`` holds this process's batches and the statistics are joined
    as ``how`` says (:mod:`..distributed`)."""
    plan: SmoothingPlan = mod.transform
    batches = calibration.batches  # this process's (the pipeline shares them out)
    join = _Join(collective_of(host), how)
    what = f"{mod.type} ({mod.where})"
    resolved = resolve_mappings(modules, plan, what)
    if not resolved:
        _LOG.warning("%s resolves no mapping on this model", what)
    blocks = outermost(host.repeated_blocks(sequential_targets))
    label = f"{mod.type} (sequential)"
    # one unit per block, and one for the mappings outside every block when there are any
    outside = any(not any(inside(r.key, b) for b in blocks) for r in resolved)
    total = len(blocks) + (1 if outside else 0)
    if tell is not None:
        tell(label, 0, total)
    reports: list[SmoothingReport] = []
    done: set[int] = set()
    if blocks:
        inputs = host.capture(blocks[0], batches, offload)
        for k, block in enumerate(blocks):
            part = [i for i, r in enumerate(resolved) if inside(r.key, block)]
            done.update(part)
            if part:
                reports += _calibrate(host, mod, plan, [resolved[i] for i in part],
                                      _block_pass(host, block, inputs, plan.offload), join)
            if k + 1 < len(blocks):
                inputs = host.run_block(block, inputs, {}, propagate=True)
            if tell is not None:
                tell(block, k + 1, total)
        del inputs
    rest = [r for i, r in enumerate(resolved) if i not in done]
    if rest:
        def whole(outputs: dict[str, Any], observers: dict[str, Any], calls: dict[str, Any]) -> None:
            host.run_model(batches, observers, outputs=outputs, calls=calls, offload_calls=plan.offload)
        reports += _calibrate(host, mod, plan, rest, whole, join)
        if tell is not None:
            tell(", ".join(r.smooth for r in rest), total, total)
    return reports


def _block_pass(host: CalibrationHost, block: str, inputs: list[Any], offload: bool) -> _Pass:
    def run(outputs: dict[str, Any], observers: dict[str, Any], calls: dict[str, Any]) -> None:
        host.run_block(block, inputs, observers, False, outputs=outputs, calls=calls, offload_calls=offload)
    return run


def run_smoothing_pass(host: CalibrationHost, modules: Sequence[ModuleInfo], mods: Sequence[Any],
                       calibration: Calibration | None, pipeline: str, sequential_targets: Sequence[str] | None,
                       offload: bool, tell: Callable[[str, int, int], None] | None = None,
                       how: str = "auto") -> list[SmoothingReport]:
    """The pass of ``mods`` when one of them is a smoothing modifier: it runs alone, in the
    sequential pipeline (``independent`` gives it one); anything else is refused."""
    mod = next(m for m in mods if getattr(m, "transform", None) is not None)
    if len(mods) > 1:
        raise ValueError(f"{mod.type} ({mod.where}) runs in its own pass: use pipeline='independent' (the "
                         "default) for a recipe with it and other modifiers")
    if pipeline == "datafree" or calibration is None or not calibration.batches:
        raise ValueError(f"{mod.type} ({mod.where}) needs calibration data: pass dataset= and use the "
                         "sequential or independent pipeline")
    return run_smoothing(host, modules, mod, calibration, sequential_targets, offload, tell, how)


@dataclass(frozen=True)
class _Join:
    """The processes of the run (None: one) and how their statistics are joined."""

    collective: Collective | None
    how: str


def _calibrate(host: CalibrationHost, mod: Any, plan: SmoothingPlan, part: list[Resolved],
               run: _Pass, join: _Join) -> list[SmoothingReport]:
    ops = host.ops
    if plan.algorithm != "awq":
        ranges = {r.smooth: ChannelRange(ops) for r in part}
        calibrate(ranges, join.collective, join.how, lambda: run({n: rng.add for n, rng in ranges.items()}, {}, {}))
        out = []
        for r in part:
            if ranges[r.smooth].low is None:
                continue
            act = ranges[r.smooth].range()
            weights = {b: host.weight(b) for b in r.balance}
            _, scales = smoothing_scales(ops, act, list(weights.values()), plan.alpha, plan.algorithm)
            _apply(host, r, scales, weights)
            out.append(SmoothingReport(mod.type, r.smooth, r.balance, scales, activation_range=act))
            _LOG.info("%s (%s): smoothed %s into %s", mod.type, mod.where, r.smooth, ", ".join(r.balance))
        return out
    means: dict[str, MeanAbs] = {r.smooth: MeanAbs(ops, plan.release.first_call_sum) for r in part}
    by_module: dict[str, list[MeanAbs]] = {}
    for r in part:
        by_module.setdefault(r.observed, []).append(means[r.smooth])
    cached: dict[str, list[Any]] = {r.parent: [] for r in part}
    calibrate(means, join.collective, join.how, lambda: run(
        {}, {n: _feed(accs) for n, accs in by_module.items()}, {p: calls.append for p, calls in cached.items()}))
    out = []
    for k, r in enumerate(part):
        report = _search_one(host, mod, plan, r, means[r.smooth], cached[r.parent], join.collective)
        if report is not None:
            out.append(report)
        if all(q.parent != r.parent for q in part[k + 1:]):
            del cached[r.parent]
    return out


def _feed(accumulators: list[MeanAbs]) -> Callable[[Any, int], None]:
    def observe(x: Any, sequences: int) -> None:
        for a in accumulators:
            a.add(x, sequences)
    return observe


def _apply(host: CalibrationHost, r: Resolved, scales: Any, originals: dict[str, Any]) -> None:
    ops = host.ops
    for b in r.balance:
        host.set_weight(b, scale_columns(ops, originals[b], scales))
    host.set_weight(r.smooth, divide_rows(ops, host.weight(r.smooth), scales))
    bias = host.bias(r.smooth)
    if bias is not None:
        host.set_bias(r.smooth, divide_rows(ops, bias, scales))


def _numel(x: Any) -> int:
    n = 1
    for d in x.shape:
        n *= int(d)
    return n


def _search_one(host: CalibrationHost, mod: Any, plan: SmoothingPlan, r: Resolved, mean: MeanAbs,
                calls: list[Any], collective: Collective | None = None) -> SmoothingReport | None:
    """AWQ's search of one mapping over the parent's recorded ``calls`` (over several
    processes, each process's own; every call's loss added in the one process's order)."""
    ops = host.ops
    reference = host.run_module(r.parent, calls) if calls else []
    count = sum(_numel(y) for y in reference)
    if collective is not None:
        count = int(collective.sum_int(count))
    if not count or mean.total is None:
        _LOG.info("%s: %s skipped: no activation reached it", mod.type, r.smooth)
        return None
    finite = all(ops.count_nonzero(ops.isfinite(y)) == _numel(y) for y in reference)
    if collective is not None:
        finite = all(in_order([finite], collective))
    if not finite:
        warnings.warn(f"{mod.type} ({mod.where}): {r.smooth} skipped: the parent module {r.parent} gives NaN "
                      "or infinite outputs on the calibration data", UserWarning, stacklevel=3)
        return None
    originals = {b: host.weight(b) for b in r.balance}
    per_call = plan.release.loss_per_call

    def loss(candidate: Sequence[Any]) -> float:
        for b, w in zip(r.balance, candidate, strict=True):
            if w is not None:
                host.set_weight(b, w)
        parts: list[Any] = []
        for want, got in zip(reference, host.run_module(r.parent, calls) if calls else [], strict=True):
            d = want - got
            part = ops.sum(ops.reshape(d * d, (-1,)), 0)
            if per_call:  # llm-compressor 0.9: each call's mean, added as Python floats
                part = float(part / _numel(want))
            parts.append(part)
        total: Any = None
        for part in in_order(parts, collective):
            total = part if total is None else total + part
        return float(total / count)

    result = search(ops, mean.mean(), [(originals[b], a) for b, a in zip(r.balance, r.grids, strict=True)],
                    plan.duo_scaling, plan.n_grid, loss, plan.release.grid_to_one)
    _apply(host, r, result.scales, originals)
    _LOG.info("%s (%s): %s scaled with ratio %g%s, loss %.4g -> %.4g", mod.type, mod.where, r.smooth,
              result.ratio, " (duo)" if result.duo else "", result.initial_loss, result.best_loss)
    return SmoothingReport(mod.type, r.smooth, r.balance, result.scales, ratio=result.ratio, duo=result.duo,
                           initial_loss=result.initial_loss, best_loss=result.best_loss, history=result.history)
