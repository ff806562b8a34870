"""What a one-shot run will cost on a checkpoint (:class:`~.checkpoint.CheckpointModel`), as
``lint`` and ``recipe-spec oneshot`` print it before the run.

Per modifier (:func:`estimate`): the statistics of SparseGPT and GPTQ (``in_features² × 4``
bytes per target: the largest, and the sum over the block with the most, since the sequential
pipeline holds one block's at a time), the activation cache (``samples × seq_len × hidden × 4``
bytes), the work per block, and the time: the work at this machine's measured rates
(:mod:`.rates`), with a range.

The work counted: the forward passes (2 operations per parameter and token, and the attention
scores' ``4 × seq_len × hidden`` per token and block, twice per block: observed, then run again
for the next block's inputs), a cost per block call; the statistics (a Hessian:
``2 × tokens × in²`` per target); the solves (SparseGPT's and GPTQ's factorisations, about
``5/3 in³``, their block updates, ``out × in²``, and their column loop, ``in`` columns of
``out`` rows; :meth:`~.algorithm.Algorithm.solve_parts`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from .algorithms import algorithm_of
from .checkpoint import CheckpointModel
from .modifiers import OneShotModifier, select_modules
from .rates import SPREAD, Rates, measure

__all__ = ["ModifierCost", "Estimate", "estimate", "rate_sizes", "GPU_FLOPS"]

#: The float32 rate a GPU's line is given at (operations per second; not measured).
GPU_FLOPS = 2e13


@dataclass(frozen=True)
class ModifierCost:
    """What one modifier costs on the model: its targets, the largest statistic of one target
    and the sum over the block with the most (bytes), and the work per block: product FLOPs of
    the forward passes, the statistics and the solves, factorisation FLOPs, OBS columns
    (``(count, rows)``) and block calls."""

    modifier: OneShotModifier
    targets: int
    pipeline: str
    largest: tuple[str, int] = ("", 0)
    block_bytes: int = 0
    forward_flops: float = 0.0
    statistic_flops: float = 0.0
    solve_flops: float = 0.0
    blocks: int = 0
    #: A smoothing modifier (SmoothQuant, AWQ): the mappings it resolves on the model (None for
    #: any other); ``targets`` then counts the balance layers it scales.
    mappings: int | None = None
    factor_flops: float = 0.0
    columns: tuple[tuple[int, int], ...] = ()
    calls: int = 0

    @property
    def flops(self) -> float:
        """Operations of the whole run of this modifier."""
        return (self.forward_flops + self.statistic_flops + self.solve_flops + self.factor_flops) \
            * max(self.blocks, 1)

    def seconds(self, rates: Rates) -> float:
        """The time of the whole run of this modifier at ``rates``."""
        per_block = rates.seconds(matmul=self.forward_flops + self.statistic_flops + self.solve_flops,
                                  factor=self.factor_flops, columns=self.columns, calls=self.calls)
        return per_block * max(self.blocks, 1)


@dataclass(frozen=True)
class Estimate:
    """The cost of a one-shot run (see :func:`estimate`); ``cache_bytes``: the block inputs
    held for every calibration sample; ``rates``: the machine's (:func:`.rates.measure`)."""

    model: CheckpointModel
    samples: int
    seq_len: int
    cache_bytes: int
    costs: list[ModifierCost] = field(default_factory=list)
    rates: Rates | None = None

    @property
    def seconds(self) -> float:
        """The time of the whole run at :attr:`rates` (0 without rates)."""
        return sum(c.seconds(self.rates) for c in self.costs) if self.rates is not None else 0.0

    def lines(self) -> list[str]:
        """The estimate as text lines for a person."""
        m = self.model
        blocks = f"{len(m.blocks)} x {m.decoder_class or 'block'}" if m.blocks else "no repeated block"
        out = [f"one-shot estimate for {m.path} ({m.architecture}, {blocks}, hidden {m.hidden or '?'}), "
               f"{self.samples} samples x {self.seq_len} tokens:"]
        if m.weight_bytes and any(c.modifier.experts is not None for c in self.costs):
            out.append(f"  weights in host memory: {_bytes(m.weight_bytes)}, the model loaded whole (expert pruning "
                       "removes modules from its blocks, which a model streamed block by block cannot)")
        elif m.weight_bytes:
            largest = max(m.block_bytes, default=0)
            outside = m.weight_bytes - sum(m.block_bytes)
            out.append(f"  weights in host memory: {_bytes(largest + outside)} (the largest block, "
                       f"{_bytes(largest)}, and the layers outside the blocks, {_bytes(outside)}), streamed one "
                       f"block at a time from this folder; {_bytes(m.weight_bytes)} for the model loaded whole. "
                       "Over N processes (torchrun) each holds these weights and 1/N of the activation cache")
        for c in self.costs:
            mod = c.modifier
            if c.mappings is not None:
                out += _smoothing_lines(c, self.cache_bytes)
            else:
                what = "mixture-of-experts layers" if mod.experts is not None else "target layers"
                out.append(f"  {mod.type} ({mod.where}): {c.targets} {what}, {c.pipeline} pipeline")
                if c.largest[1]:
                    what, rule = algorithm_of(mod).statistic
                    out.append(f"    {what} per target ({rule}): largest {_bytes(c.largest[1])} "
                               f"({c.largest[0]}); one block at a time: {_bytes(c.block_bytes)}")
                if mod.needs_data:
                    out.append(f"    activation cache (samples x seq_len x hidden x 4 B): {_bytes(self.cache_bytes)}")
                    loop = sum(n for n, _ in c.columns)
                    out.append(f"    per block: forward {_flops(c.forward_flops)} (2 passes), statistics "
                               f"{_flops(c.statistic_flops)}, solve {_flops(c.solve_flops + c.factor_flops)}"
                               + (f" and {loop} columns of its column loop" if loop else ""))
            out.append(self._time_line(c))
        if self.rates is not None and len(self.costs) > 1:
            out.append(f"  in all: {_span(self.seconds)} on this machine")
        return out

    def _time_line(self, c: ModifierCost) -> str:
        gpu = f"{_seconds(c.flops / GPU_FLOPS)} at {GPU_FLOPS / 1e12:g} TFLOP/s (a GPU, not measured)"
        if self.rates is None:
            return f"    time: {_flops(c.flops)} in all; {gpu}"
        r = self.rates
        return (f"    time: {_span(c.seconds(r))} on this machine ({_flops(c.flops)} in all; {r.source}: "
                f"products {r.matmul / 1e9:.0f} GFLOP/s, factorisations {r.factor / 1e9:.0f} GFLOP/s, "
                f"column loop {r.column(1024) * 1e6:.0f} us per column of 1024 rows); {gpu}")


def _span(seconds: float) -> str:
    """An estimate with its range (:data:`.rates.SPREAD`)."""
    return f"{_seconds(seconds)} (between {_seconds(seconds / SPREAD, bare=True)} and " \
           f"{_seconds(seconds * SPREAD, bare=True)})"


def _smoothing_lines(c: ModifierCost, cache_bytes: int) -> list[str]:
    """The estimate of a smoothing modifier: what it does, its mappings, its passes."""
    mod = c.modifier
    algorithm = algorithm_of(mod)
    what = algorithm.describe
    search = f"grid search {_flops(c.statistic_flops)}, " if algorithm.grid_passes(mod) else ""
    return [f"  {mod.type} ({mod.where}): {what}; {c.mappings} mapping(s) over {c.targets} balance layers "
            f"(no weight pruned or quantized by it), {c.pipeline} pipeline",
            f"    activation cache (samples x seq_len x hidden x 4 B): {_bytes(cache_bytes)}",
            f"    per block: forward {_flops(c.forward_flops)} (2 passes), {search}scaling {_flops(c.solve_flops)}"]


def _smoothing_cost(mod: OneShotModifier, model: CheckpointModel, tokens: int, seq_len: int,
                    samples: int) -> ModifierCost:
    """A smoothing modifier's cost: its mappings resolved on the model (as the run resolves
    them; one that cannot resolve counts none: P006 says why), the forward passes, AWQ's grid
    search (``n_grid`` forward passes of each mapping's balance layers) and the scaling."""
    from .shared.smoothing import resolve_mappings

    log = logging.getLogger("recipe_spec.oneshot")
    was, log.disabled = log.disabled, True  # the run tells its skips; the estimate does not
    try:
        resolved = resolve_mappings(model.modules, mod.transform, mod.type)
    except ValueError:
        resolved = []
    finally:
        log.disabled = was
    shapes = {i.name: i.weight_shape for i in model.modules}
    by_block: dict[str, list[str]] = {}
    for r in resolved:
        block = next((b for b in model.blocks if r.key.startswith(b + ".")), "")
        by_block.setdefault(block, []).extend(b for b in r.balance if len(shapes.get(b, ())) == 2)
    params = dict(zip(model.blocks, model.block_params, strict=True))
    heaviest = max(by_block.values(), key=len) if by_block else []
    weights = sum(shapes[n][0] * shapes[n][1] for n in heaviest)
    forward = _forward(max((params.get(b, 0) for b in by_block), default=0), model, tokens, seq_len)
    grid = algorithm_of(mod).grid_passes(mod)
    return ModifierCost(mod, sum(len(r.balance) for r in resolved), "sequential", forward_flops=forward,
                        statistic_flops=grid * 2.0 * weights * tokens, solve_flops=2.0 * weights,
                        blocks=len(by_block), mappings=len(resolved), calls=2 * samples)


def _forward(block_params: int, model: CheckpointModel, tokens: int, seq_len: int) -> float:
    """The two forward passes of one block: its products and its attention scores."""
    return 2 * (2.0 * block_params * tokens + 4.0 * seq_len * (model.hidden or 0) * tokens)


def _experts_cost(mod: OneShotModifier, model: CheckpointModel, tokens: int, seq_len: int,
                  samples: int) -> ModifierCost:
    """Expert pruning (REAP): the two forward passes of every block (whose mixture-of-experts
    layers it prunes, ``targets``); its statistic is a sum and a count per expert."""
    from .reap.layers import checkpoint_layers

    try:
        layers = len(checkpoint_layers(model.config, model.modules))
    except ValueError:  # P015 says why
        layers = 0
    forward = _forward(max(model.block_params, default=0), model, tokens, seq_len)
    return ModifierCost(mod, layers, "sequential", forward_flops=forward, blocks=len(model.blocks), calls=2 * samples)


def _tuned_cost(mod: OneShotModifier, model: CheckpointModel, tokens: int, seq_len: int,
                samples: int) -> ModifierCost:
    """Block tuning (AutoRound): per block, the two forward passes, and ``iters`` steps each a
    forward and a backward pass (about three forward passes) of ``batch_size`` samples."""
    names = select_modules(model.modules, mod)
    block = max(model.block_params, default=0)
    batch = min(samples, mod.tuning.batch_size) * seq_len
    tuning = mod.tuning.iters * 3 * 2.0 * block * batch
    return ModifierCost(mod, len(names), "sequential", forward_flops=_forward(block, model, tokens, seq_len),
                        solve_flops=tuning, blocks=len(model.blocks), calls=2 * samples)


def _cost(mod: OneShotModifier, model: CheckpointModel, tokens: int, seq_len: int, samples: int) -> ModifierCost:
    if mod.transform is not None:
        return _smoothing_cost(mod, model, tokens, seq_len, samples)
    if mod.experts is not None:
        return _experts_cost(mod, model, tokens, seq_len, samples)
    if mod.tuning is not None:
        return _tuned_cost(mod, model, tokens, seq_len, samples)
    shapes = {i.name: i.weight_shape for i in model.modules}
    names = select_modules(model.modules, mod)
    pipeline = mod.pipeline
    if not names:
        return ModifierCost(mod, 0, pipeline)

    algorithm = algorithm_of(mod)

    def per_target(n: str) -> int:
        return algorithm.stats_bytes(shapes[n][-1])

    largest = max(names, key=per_target)
    by_block: dict[str, list[str]] = {}
    for n in names:
        block = next((b for b in model.blocks if n.startswith(b + ".")), "")
        by_block.setdefault(block, []).append(n)
    heaviest = max(by_block.values(), key=lambda ns: sum(per_target(n) for n in ns))
    blocks = len(by_block)
    params = {b: p for b, p in zip(model.blocks, model.block_params, strict=True)}
    forward = statistics = solve = factor = 0.0
    columns: list[tuple[int, int]] = []
    calls = 0
    if mod.needs_data:
        biggest = max(by_block, key=lambda b: params.get(b, 0))
        block_params = params.get(biggest, sum(shapes[n][0] * shapes[n][1] for n in by_block[biggest]))
        forward = _forward(block_params, model, tokens, seq_len)
        calls = 2 * samples
    for n in heaviest:
        rows, cols = shapes[n]
        more, _ = algorithm.flops(rows, cols, tokens)
        factoring, products, looped = algorithm.solve_parts(rows, cols)
        statistics += more
        solve += products
        factor += factoring
        if looped:
            columns.append((looped, rows))
    return ModifierCost(mod, len(names), pipeline, (largest, per_target(largest)),
                        sum(per_target(n) for n in heaviest), forward, statistics, solve, blocks,
                        factor_flops=factor, columns=tuple(columns), calls=calls)


def estimate(mods: Sequence[OneShotModifier], model: CheckpointModel, samples: int, seq_len: int,
             tokens: int | None = None, rates: Rates | None | bool = True) -> Estimate:
    """The cost of running ``mods`` on ``model`` with ``samples`` calibration samples of
    ``seq_len`` tokens (``tokens``: their total when known, else ``samples x seq_len``) (see
    the module docstring). ``rates``: the machine's (:func:`.rates.measure`); True measures
    them here with NumPy (about half a second, once per process); False gives work, no time."""
    total = tokens if tokens is not None else samples * seq_len
    hidden = model.hidden or 0
    cache = total * hidden * 4
    costs = [_cost(m, model, total, seq_len, samples) for m in mods]
    if rates is True:
        width, columns = rate_sizes(model)
        rates = measure(width=width, columns=columns)
    return Estimate(model, samples, seq_len, cache, costs, rates or None)


def rate_sizes(model: CheckpointModel) -> tuple[int, int]:
    """``(width, columns)`` the rates of ``model`` are measured at (:func:`.rates.measure`): its
    hidden size and its widest target's input columns (1024 where unknown)."""
    widest = max((i.weight_shape[-1] for i in model.modules if i.prunable and i.weight_shape), default=0)
    return model.hidden or widest or 1024, widest or model.hidden or 1024


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _flops(n: float) -> str:
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} FLOP"


def _seconds(s: float, bare: bool = False) -> str:
    if s < 1:
        return "under a second"
    if s < 120:
        return f"{'' if bare else 'about '}{s:.0f} s"
    if s < 7200:
        return f"{'' if bare else 'about '}{s / 60:.0f} min"
    return f"{'' if bare else 'about '}{s / 3600:.1f} h"
