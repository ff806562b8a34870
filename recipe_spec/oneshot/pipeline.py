"""The one-shot pipelines, written once over a :class:`~.host.CalibrationHost`.

- ``independent`` (the default): each modifier on its own pass with the pipeline it needs:
  ``sequential`` if it needs calibration data (SparseGPT, Wanda), else ``datafree``.
- ``sequential``: block by block over the model's repeated blocks (``sequential_targets``,
  default the decoder layer class): the inputs of the first block are captured for every
  batch; then, for each block, every batch runs through it with observers on its targets
  (Hessians or row scalars), its targets are compressed in ``named_modules`` order (modifier
  after modifier), their statistics freed, and every batch runs again through the compressed
  block to give the next block's inputs. Targets outside every block (``lm_head``) are
  calibrated at the end on whole-model passes. Peak memory: one block's statistics and one
  activation cache (``offload=True`` keeps the cache in host memory). Expert pruning (REAP,
  :mod:`.reap.run`) observes the block's routing in the same pass and removes its experts
  before it runs again; block tuning (AutoRound, :mod:`.autoround`) tunes the block on its
  cached inputs after the others compress theirs, and the next block is then fed this one's
  outputs from before any change (llm-compressor's ``propagate_error=False`` for AutoRound).
- ``datafree``: every target compressed from its weight alone.

When no repeated block is found (a small model without a ModuleList of identical layers),
``sequential`` runs the whole model once with every observer on, then compresses.

Progress: ``progress(what, done, total)`` (:data:`Progress`) is called when a pass starts,
with ``done == 0`` and ``what`` naming the pass (``"SparseGPTModifier (sequential)"``), and
after each unit of it, with ``what`` naming the unit: a block (``model.layers.0``), the
layers outside every block (``lm_head``), or one module in the datafree pipeline.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .autoround import tune
from .calibration import Calibration
from .compress import LayerReport, compress_module, new_statistics, prepare_module
from .distributed import Collective, assign, calibrate, collective_of, own_batches, refuse_unshared
from .host import CalibrationHost, ModuleInfo, inside, outermost
from .modifiers import OneShotModifier, matches, select_modules
from .owl.profile import layer_sparsities
from .reap.run import ExpertWatch, layers_pruned, write_report
from .shared.hessian import SharedInput
from .shared.smoothing import run_smoothing_pass
from .shared.solver import solver_of

__all__ = ["PIPELINES", "OneShotReport", "Progress", "run_pipeline"]

#: ``progress(what, done, total)``: a pass starts (``done == 0``, ``what`` names the pass) or
#: one more of its ``total`` units is done (``what`` names the unit).
Progress = Callable[[str, int, int], None]

PIPELINES = ("independent", "sequential", "datafree")
_LOG = logging.getLogger("recipe_spec.oneshot")


@dataclass
class OneShotReport:
    """What a one-shot run did: the samples fed (dataset indices, in order; None for a
    DataLoader), the pipeline each modifier ran in, and one :class:`LayerReport` per
    module compressed, in the order compressed."""

    order: list[int] | None = None
    pipelines: list[tuple[str, str]] = field(default_factory=list)
    layers: list[LayerReport] = field(default_factory=list)
    #: One :class:`~.smoothing.SmoothingReport` per mapping a smoothing modifier applied.
    smoothing: list[Any] = field(default_factory=list)
    #: What the run did otherwise than the recipe's words say (an older form run as its release ran it).
    notes: list[str] = field(default_factory=list)
    #: The experts each mixture-of-experts layer kept (REAP), by layer, in their old numbering.
    experts: dict[str, list[int]] = field(default_factory=dict)

    def sparsity(self) -> dict[str, float]:
        """Zero fraction per module after its last compression."""
        return {r.module: r.sparsity for r in self.layers}


def run_pipeline(host: CalibrationHost, mods: Sequence[OneShotModifier], calibration: Calibration | None,
                 *, pipeline: str = "independent", sequential_targets: Sequence[str] | None = None,
                 offload: bool = False, progress: Progress | None = None,
                 distributed_statistics: str = "auto") -> OneShotReport:
    """Run ``mods`` on ``host``'s model (see the module docstring); the report. ``progress``:
    told when each pass starts and after each unit of it (:data:`Progress`);
    ``distributed_statistics``: how several processes join their statistics
    (:data:`.distributed.HOW`)."""
    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline {pipeline!r} is not one of {', '.join(PIPELINES)}")
    report = OneShotReport(order=calibration.order if calibration is not None else None)
    modules = list(host.modules())
    collective = collective_of(host)
    if collective is not None:
        refuse_unshared(mods, _sample_stats(host, modules, mods))
        if calibration is not None:  # from here on, this process's batches
            calibration = dataclasses.replace(calibration, batches=own_batches(
                calibration.batches, calibration.fingerprint, collective))
    mods = _with_levels(host, modules, mods, calibration, sequential_targets, distributed_statistics)
    if pipeline == "independent":
        for mod in mods:
            _LOG.info("%s: %s runs in the %s pipeline", mod.where, mod.type, mod.pipeline)
            _run(host, modules, [mod], calibration, mod.pipeline, sequential_targets, offload, report,
                 progress, distributed_statistics)
            if mod.experts is not None:  # experts removed: the modules after are numbered anew
                modules = list(host.modules())
    else:
        _run(host, modules, list(mods), calibration, pipeline, sequential_targets, offload, report,
             progress, distributed_statistics)
    return report


def _sample_stats(host: CalibrationHost, modules: list[ModuleInfo], mods: Sequence[OneShotModifier]
                  ) -> dict[int, Any]:
    """One statistic per modifier that gathers one (on its first target), to tell its kind."""
    infos = {i.name: i for i in modules}
    out: dict[int, Any] = {}
    for i, mod in enumerate(mods):
        names = select_modules(modules, mod) if mod.needs_data else []
        if names:
            first = infos[names[0]]
            out[i] = new_statistics(host.ops, mod, int(first.weight_shape[-1]), host.weight(names[0]),
                                    first.classes, first.name)
    return out


def _with_levels(host: CalibrationHost, modules: list[ModuleInfo], mods: Sequence[OneShotModifier],
                 calibration: Calibration | None, sequential_targets: Sequence[str] | None, how: str = "auto",
                 ) -> Sequence[OneShotModifier]:
    """``mods`` with the per-layer sparsities of a ``sparsity`` list or of OWL (whose
    statistics pass runs here, on the uncompressed model, as llm-compressor's initialisation
    does), all checked before any weight changes."""
    if not any(m.sparsities or m.owl is not None for m in mods):
        return mods
    owl = [m for m in mods if m.owl is not None]
    if owl and (calibration is None or not calibration.batches):
        raise ValueError(f"{owl[0].type} ({owl[0].where}) needs calibration data: pass dataset=")
    blocks = outermost(host.repeated_blocks(sequential_targets)) if owl else []
    roots = [[i.name for i in modules if any(matches(t, i.name, i.classes) for t in m.targets)] for m in mods]
    levels = layer_sparsities(host, modules, mods, [select_modules(modules, m) for m in mods], roots, blocks,
                              calibration.batches if calibration is not None else None,
                              lambda stats, run: calibrate(stats, collective_of(host), how, run))
    return [dataclasses.replace(m, levels=lv) if lv else m for m, lv in zip(mods, levels, strict=True)]


def _tell(progress: Progress | None, what: str, done: int, total: int) -> None:
    if progress is not None:
        progress(what, done, total)


def _run(host: CalibrationHost, modules: list[ModuleInfo], mods: list[OneShotModifier],
         calibration: Calibration | None, pipeline: str, sequential_targets: Sequence[str] | None,
         offload: bool, report: OneShotReport, progress: Progress | None = None,
         how: str = "auto") -> None:
    report.pipelines += [(m.type, pipeline) for m in mods]
    for m in [m for m in mods if m.rotation is not None]:  # data-free, before what reads the weights
        host.apply_rotations(m.rotation)  # type: ignore[attr-defined]
        _LOG.info("%s: %s rotated its targets", m.where, m.type)
    mods = [m for m in mods if m.rotation is None]
    if not mods:
        return
    if any(m.transform is not None for m in mods):
        report.smoothing += run_smoothing_pass(host, modules, mods, calibration, pipeline, sequential_targets,
                                               offload, progress, how)
        return
    label = f"{', '.join(dict.fromkeys(m.type for m in mods))} ({pipeline})"
    targets = [select_modules(modules, m) for m in mods]
    infos = {i.name: i for i in modules}
    for mod, names in zip(mods, targets, strict=True):
        if not names and mod.experts is None:
            _LOG.warning("%s: %s selects no prunable layer of this model", mod.where, mod.type)
    data = [m for m in mods if m.needs_data]
    if pipeline == "datafree" or not data:
        if data:
            raise ValueError(f"{data[0].type} ({data[0].where}) needs calibration data; the datafree "
                             "pipeline has none (use pipeline='sequential' or 'independent')")
        total = sum(len(names) for names in targets)
        _tell(progress, label, 0, total)
        count = 0
        for mod, names in zip(mods, targets, strict=True):
            for n in names:
                report.layers.append(compress_module(host, mod, n, None, infos[n].classes))
                count += 1
                _tell(progress, n, count, total)
        return
    if calibration is None or not calibration.batches:
        raise ValueError(f"{data[0].type} ({data[0].where}) needs calibration data: pass dataset=")
    collective = collective_of(host)
    batches = calibration.batches
    blocks = outermost(host.repeated_blocks(sequential_targets))
    pruned = {i: layers_pruned(host, m) for i, m in enumerate(mods) if m.experts is not None}
    outside = [n for names in targets for n in names if not any(inside(n, b) for b in blocks)]
    outside += [layer.name for found in pruned.values() for layer in found if not any(inside(layer.name, b) for b in blocks)]
    total = len(blocks) + (1 if outside else 0)
    _tell(progress, label, 0, total)
    done: set[str] = set()
    tuned = [i for i, m in enumerate(mods) if m.tuning is not None]
    carries: dict[int, dict[str, Any]] = {i: {} for i in tuned}
    if blocks:
        inputs = host.capture(blocks[0], batches, offload)
        for k, block in enumerate(blocks):
            part = [[n for n in names if inside(n, block)] for names in targets]
            ahead = None  # with AutoRound, llm-compressor feeds each block the one before as it was
            if any(part[i] for i in tuned) and k + 1 < len(blocks):
                ahead = host.run_block(block, inputs, {}, propagate=True)
            stats = _observe(host, mods, part, infos)
            watch = ExpertWatch(mods, pruned, functools.partial(inside, root=block))
            if stats or watch:
                calibrate(stats, collective, how, functools.partial(host.run_block, block, inputs,
                                                                   _observers(stats, host.ops), propagate=False,
                                                                   **_routes(watch)))
            _compress(host, mods, part, stats, report, infos, collective)
            for i in tuned:
                if part[i]:
                    report.layers += tune(host, mods[i], block, part[i], inputs, carries[i],
                                          {n: infos[n].classes for n in part[i]})
            watch.prune(host, collective, report.experts)
            done.update(n for names in part for n in names)
            del stats
            if k + 1 < len(blocks):
                inputs = ahead if ahead is not None else host.run_block(block, inputs, {}, propagate=True)
            _tell(progress, block, k + 1, total)
        del inputs
    rest = [[n for n in names if n not in done] for names in targets]
    watch = ExpertWatch(mods, pruned, lambda name: not any(inside(name, b) for b in blocks))
    if any(rest) or watch:
        stats = _observe(host, mods, rest, infos)
        if stats or watch:
            calibrate(stats, collective, how, functools.partial(host.run_model, batches, _observers(stats, host.ops),
                                                               **_routes(watch)))
        _compress(host, mods, rest, stats, report, infos, collective)
        watch.prune(host, collective, report.experts)
        _tell(progress, ", ".join(dict.fromkeys(outside)), total, total)
    if pruned and (collective is None or collective.rank == 0):
        write_report(mods, report.experts, pruned)


def _routes(watch: ExpertWatch) -> dict[str, Any]:
    """``routes=`` for a host run when ``watch`` has layers (a host without REAP is never given it)."""
    return {"routes": watch.routes()} if watch else {}


def _observe(host: CalibrationHost, mods: list[OneShotModifier], part: list[list[str]],
             infos: dict[str, ModuleInfo]) -> dict[tuple[int, str], Any]:
    """A fresh accumulator per (modifier, module) that needs data: ``{(i, name): stats}``."""
    out: dict[tuple[int, str], Any] = {}
    for i, (mod, names) in enumerate(zip(mods, part, strict=True)):
        if not mod.needs_data:
            continue
        for name in names:
            like = host.weight(name)
            stats = new_statistics(host.ops, mod, int(infos[name].weight_shape[-1]), like,
                                   infos[name].classes, name)
            if stats is not None:
                out[(i, name)] = stats
    return out


def _observers(stats: dict[tuple[int, str], Any], ops: Any) -> dict[str, Any]:
    """One observer per module, feeding every accumulator of that module; the Hessians of
    modules fed one input share its product (:class:`~.shared.hessian.SharedInput`)."""
    by_module: dict[str, list[Any]] = {}
    for (_, name), s in stats.items():
        by_module.setdefault(name, []).append(s)
    shared = SharedInput(ops)

    def feed(accumulators: list[Any]) -> Any:
        def observe(x: Any, sequences: int) -> None:
            for a in accumulators:
                if getattr(a, "shares_input", False):
                    a.add(x, sequences, shared)
                else:
                    a.add(x, sequences)
        return observe

    return {name: feed(accs) for name, accs in by_module.items()}


def _compress(host: CalibrationHost, mods: list[OneShotModifier], part: list[list[str]],
              stats: dict[tuple[int, str], Any], report: OneShotReport, infos: dict[str, ModuleInfo],
              collective: Collective | None = None) -> None:
    """Each modifier in recipe order compresses its modules of ``part`` in module order,
    freeing each statistic once used. Over several processes, each module on the one
    :func:`~.distributed.assign` gives it, its results then shared with the others (the
    host's ``share``) before the next modifier reads them."""
    for i, (mod, names) in enumerate(zip(mods, part, strict=True)):
        if mod.tuning is not None:  # tuned block by block (:func:`.autoround.tune`)
            continue
        if collective is None or not names:
            report.layers += _in_order(host, mod, names, {n: stats.pop((i, n), None) for n in names}, infos)
            continue
        owner = assign(names, [int(infos[n].weight_shape[-1]) for n in names], collective.world)
        mine: dict[str, LayerReport] = {}
        for name in names:
            accumulated = stats.pop((i, name), None)
            if owner[name] == collective.rank:
                mine[name] = compress_module(host, mod, name, accumulated, infos[name].classes)
        for name in names:
            host.share(name, owner[name])  # type: ignore[attr-defined]
        everyone = collective.gather(mine)
        report.layers += [everyone[owner[name]][name] for name in names]


def _in_order(host: CalibrationHost, mod: OneShotModifier, names: list[str], stats: dict[str, Any],
              infos: dict[str, ModuleInfo]) -> list[LayerReport]:
    """``mod`` compresses ``names`` one after another, freeing each statistic once used. A host
    that asks for it (``solves_ahead``: its solves run on a library whose results do not depend
    on the thread, and a core is idle while they run) has each module's
    :func:`~.compress.prepare_module` work (a Hessian's factorisation, which runs without the
    interpreter's lock) made on a second thread while the module before it is solved."""
    if not getattr(host, "solves_ahead", False) or len(names) < 2:
        return [compress_module(host, mod, n, stats.pop(n), infos[n].classes) for n in names]
    out, solver = [], solver_of(host)  # the statistics go over to the solver's arrays ahead too
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="recipe-spec-prepare") as pool:
        ahead = pool.submit(prepare_module, solver, mod, names[0], stats[names[0]], infos[names[0]].classes)
        for k, name in enumerate(names):
            mine = ahead
            if k + 1 < len(names):
                after = names[k + 1]
                ahead = pool.submit(prepare_module, solver, mod, after, stats[after], infos[after].classes)
            out.append(compress_module(host, mod, name, stats.pop(name), infos[name].classes, mine.result))
    return out
