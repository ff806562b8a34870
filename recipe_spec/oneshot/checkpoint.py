"""A one-shot recipe against a Hugging Face checkpoint folder, from its headers alone (no
weight is read, nothing is imported but the standard library): what would stop the run, and
what it will cost.

- :func:`read_model`: the prunable layers and their shapes (safetensors headers), the
  repeated blocks (``model.layers.<i>``: the numbered modules holding the most parameters),
  the decoder-layer class (:func:`recipe_spec.params.architectures.decoder_layer_class`) and
  the hidden size (``config.json``).
- :func:`model_findings`: an N:M ``mask_structure`` needs every target's ``in_features``
  divisible by M (P004, naming the layers); a ``sequential_targets`` in the recipe must name a
  class or a module the model has (P006). :func:`sequential_targets_problem` checks the same
  for the command line's ``--sequential-targets``.
- :func:`estimate`: per modifier, the Hessians of SparseGPT and GPTQ (``in_features² × 4``
  bytes per target: the largest, and the sum over the block with the most, since the
  sequential pipeline holds one block's at a time), the activation cache (``samples × seq_len × hidden × 4`` bytes) and the
  floating-point operations per block (:class:`Estimate`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic
from ..params.architectures import architecture, decoder_layer_class, hidden_size
from ..params.checkpoint import ModelNames, read_checkpoint
from ..params.headers import read_safetensors_header
from ..recipe.model import Recipe
from .algorithms import algorithm_of
from .host import ModuleInfo
from .matching import regex_match
from .modifiers import OneShotModifier, select_modules

__all__ = ["CheckpointModel", "ModifierCost", "Estimate", "read_model", "model_findings",
           "sequential_targets_problem", "estimate", "CPU_FLOPS", "GPU_FLOPS"]

#: The rates the time estimate is given at (float32 operations per second): a CPU, a GPU.
CPU_FLOPS = 1e11
GPU_FLOPS = 2e13
_NM = re.compile(r"^([0-9]+):([0-9]+)$")
_EMBEDDING = re.compile(r"(embed|^wte$|^wpe$)")
_NUMBERED = re.compile(r"^(.*)\.(\d+)$")


@dataclass(frozen=True)
class CheckpointModel:
    """A checkpoint folder as the one-shot checks see it (see the module docstring).

    ``modules``: :class:`ModuleInfo` of every module, prunable layers with their
    ``(out, in)`` shape, blocks with the decoder-layer class; ``block_params``: the number of
    parameters in each block; ``classes``: every class name known to be in the model (those of
    a model built on the meta device when ``transformers`` could build it)."""

    path: str
    config: dict[str, Any]
    modules: tuple[ModuleInfo, ...]
    blocks: tuple[str, ...]
    block_params: tuple[int, ...]
    decoder_class: str | None
    hidden: int | None
    classes: frozenset[str] = frozenset()
    #: Bytes of the checkpoint's tensors: in all, and in each block (in ``blocks``' order).
    weight_bytes: int = 0
    block_bytes: tuple[int, ...] = ()

    @property
    def architecture(self) -> str:
        return architecture(self.config) or str(self.config.get("model_type") or "model")


def _shapes(names: ModelNames) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for f in names.files:
        for name, info in read_safetensors_header(f, check_data=False).items():
            shapes[name] = tuple(int(d) for d in info["shape"])
    for derived in names.derived_parameters:  # a tied lm_head has the embedding's shape
        tied = next((n for n in shapes if n.endswith("embed_tokens.weight") or n.endswith("wte.weight")), None)
        if tied is not None:
            shapes[derived] = shapes[tied]
    return shapes


def _expert_linears(shapes: dict[str, tuple[int, ...]], hidden: int | None) -> dict[str, tuple[int, int]]:
    """The Linear weights the run makes of transformers' fused experts (``<experts>.gate_up_proj``
    ``[E, 2I, H]`` or transposed ``[E, H, 2I]``, ``<experts>.down_proj`` ``[E, H, I]`` or
    ``[E, I, H]``; ``up_proj`` without a gate): ``<experts>.<e>.gate_proj`` ``(I, H)``, ``up_proj``
    ``(I, H)``, ``down_proj`` ``(H, I)`` for each expert ``e``, as the run names them."""
    out: dict[str, tuple[int, int]] = {}
    if not hidden:
        return out
    for name, shape in shapes.items():
        if not name.endswith(".down_proj") or len(shape) != 3:
            continue
        prefix = name[: -len(".down_proj")]
        first = shapes.get(f"{prefix}.gate_up_proj") or shapes.get(f"{prefix}.up_proj")
        if first is None or len(first) != 3:
            continue
        gated = f"{prefix}.gate_up_proj" in shapes
        experts, transposed = shape[0], first[1] == hidden and first[2] != hidden
        intermediate = (first[2] if transposed else first[1]) // (2 if gated else 1)
        for e in range(experts):
            for proj in (("gate_proj", "up_proj") if gated else ("up_proj",)):
                out[f"{prefix}.{e}.{proj}"] = (intermediate, hidden)
            out[f"{prefix}.{e}.down_proj"] = (hidden, intermediate)
    return out


def _sizes(names: ModelNames) -> dict[str, int]:
    """Bytes of each tensor of the checkpoint (its safetensors headers)."""
    out: dict[str, int] = {}
    for f in names.files:
        for name, info in read_safetensors_header(f, check_data=False).items():
            begin, end = info.get("data_offsets", (0, 0))
            out[name] = int(end) - int(begin)
    return out


def _blocks(shapes: dict[str, tuple[int, ...]]) -> list[tuple[str, int]]:
    """The numbered modules under the prefix whose numbered modules hold the most parameters."""
    sizes: dict[str, dict[str, int]] = {}
    for name, shape in shapes.items():
        parts = name.split(".")
        for i in range(len(parts) - 1):
            m = _NUMBERED.match(".".join(parts[: i + 1]))
            if m is not None:
                count = 1
                for d in shape:
                    count *= d
                group = sizes.setdefault(m.group(1), {})
                group[m.group(0)] = group.get(m.group(0), 0) + count
                break
    if not sizes:
        return []
    prefix = max(sizes, key=lambda p: (sum(sizes[p].values()), p))
    return sorted(sizes[prefix].items(), key=lambda kv: int(kv[0].rsplit(".", 1)[1]))


def read_model(path: str | os.PathLike[str], names: ModelNames | None = None) -> CheckpointModel:
    """The checkpoint folder ``path`` (``names``: its :func:`read_checkpoint`, read here when
    not given, without building the architecture). Raises
    :class:`~recipe_spec.params.checkpoint.CheckpointError` or
    :class:`~recipe_spec.params.headers.ModelSpecError` for a folder that cannot be read."""
    names = names if names is not None else read_checkpoint(path, classes=False)
    config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    shapes = _shapes(names)
    blocks = _blocks(shapes)
    decoder = decoder_layer_class(config)
    known = set(names.classes and {c for cs in names.classes.values() for c in cs} or ())
    root = (architecture(config) or "Module", "Module")
    infos: list[ModuleInfo] = [ModuleInfo("", tuple(names.class_of("") or root), False)]
    block_names = {b for b, _ in blocks}
    for module in names.modules:
        built = names.class_of(module)
        weight = shapes.get(f"{module}.weight")
        leaf = module.rsplit(".", 1)[-1]
        if built is not None:
            prunable = weight is not None and len(weight) == 2 and any(
                c in ("Linear", "Conv1D") for c in built)
            classes = tuple(built)
        else:
            prunable = weight is not None and len(weight) == 2 and not _EMBEDDING.search(leaf)
            classes = ("Linear", "Module") if prunable else (
                (decoder, "Module") if module in block_names and decoder else ("Module",))
        infos.append(ModuleInfo(module, classes, prunable, tuple(weight) if prunable and weight else ()))
    known_modules = set(names.modules)
    for module, shape in _expert_linears(shapes, hidden_size(config)).items():  # split as the run splits them
        if module not in known_modules:
            infos.append(ModuleInfo(module, ("Linear", "Module"), True, shape))
    if decoder is not None:
        known.add(decoder)
    sizes = _sizes(names)
    per_block = tuple(sum(n for k, n in sizes.items() if k.startswith(b + ".")) for b, _ in blocks)
    return CheckpointModel(os.fspath(path), config, tuple(infos), tuple(b for b, _ in blocks),
                           tuple(n for _, n in blocks), decoder, hidden_size(config), frozenset(known),
                           sum(sizes.values()), per_block)


# --------------------------------------------------------------------------- checks


def _m_of(mod: OneShotModifier) -> int:
    if mod.prune_m:
        return mod.prune_m
    match = _NM.match(mod.mask_type)
    return int(match.group(2)) if match else 0


def _listing(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _quoted_pattern(name: str) -> str:
    """A ``re:`` pattern for exactly ``name``, single-quoted for YAML (no escapes there)."""
    return "'re:" + re.escape(name) + "$'"


def sequential_targets_problem(model: CheckpointModel, targets: Sequence[str]) -> str | None:
    """Why ``targets`` (class or module names, ``re:`` patterns) name no block of ``model``,
    or None when each names a class or a module it has (a ``re:`` pattern: matches a module
    name, as the run matches it)."""
    modules = {i.name for i in model.modules}
    classes = set(model.classes) | {c for i in model.modules for c in i.classes if c != "Module"}

    def names_one(target: str) -> bool:
        if target.startswith("re:"):
            return any(regex_match(target, n) for n in modules if n)
        return target in classes or target in modules

    wrong = [t for t in targets if not names_one(t)]
    if not wrong:
        return None
    layer = f"; its decoder layer is {model.decoder_class}" if model.decoder_class else ""
    return (f"sequential_targets {', '.join(repr(t) for t in wrong)}: the {model.architecture} in "
            f"{model.path} has no such class or module{layer}")


def model_findings(recipe: Recipe, mods: Sequence[OneShotModifier], model: CheckpointModel) -> list[Diagnostic]:
    """P004 (an N:M structure that does not divide a target's ``in_features``) and P006 (a
    recipe's ``sequential_targets`` naming no class of the model) for ``mods`` of ``recipe``."""
    out: list[Diagnostic] = []
    for mod in mods:
        size = _m_of(mod)
        if size > 1:
            shapes = {i.name: i.weight_shape for i in model.modules}
            bad = [n for n in select_modules(model.modules, mod) if shapes[n][-1] % size]
            if bad:
                key = "mask_structure"
                written = mod.entry.args.get(key)
                out.append(codes.P004(
                    f"mask_structure '{written}' needs every target's in_features divisible by "
                    f"{size}: {_listing([f'{n} (in {shapes[n][-1]})' for n in bad])} "
                    f"{'is' if len(bad) == 1 else 'are'} not",
                    f"Choose an N:M whose M divides those layers' in_features, or leave them out "
                    f"with ignore: [{', '.join(_quoted_pattern(n) for n in bad[:2])}].",
                    mod.entry.value_span(key)).in_file(recipe.path))
        written = mod.entry.args.get("sequential_targets")
        if written:
            targets = [written] if isinstance(written, str) else [str(t) for t in written]
            problem = sequential_targets_problem(model, targets)
            if problem is not None:
                out.append(codes.P006(
                    problem, f"Write {model.decoder_class}." if model.decoder_class else
                    "Name the class of the model's repeated decoder layer.",
                    mod.entry.value_span("sequential_targets")).in_file(recipe.path))
    return out


# --------------------------------------------------------------------------- estimate


@dataclass(frozen=True)
class ModifierCost:
    """What one modifier costs on the model: its targets, the largest statistic of one target
    and the sum over the block with the most (bytes), and floating-point operations per block
    (the forward passes, gathering the statistics, the solves)."""

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

    @property
    def flops(self) -> float:
        """Operations of the whole run of this modifier."""
        return (self.forward_flops + self.statistic_flops + self.solve_flops) * max(self.blocks, 1)


@dataclass(frozen=True)
class Estimate:
    """The cost of a one-shot run (see :func:`estimate`); ``cache_bytes``: the block inputs
    held for every calibration sample."""

    model: CheckpointModel
    samples: int
    seq_len: int
    cache_bytes: int
    costs: list[ModifierCost] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The estimate as text lines for a person."""
        m = self.model
        blocks = f"{len(m.blocks)} x {m.decoder_class or 'block'}" if m.blocks else "no repeated block"
        out = [f"one-shot estimate for {m.path} ({m.architecture}, {blocks}, hidden {m.hidden or '?'}), "
               f"{self.samples} samples x {self.seq_len} tokens:"]
        if m.weight_bytes:
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
                continue
            out.append(f"  {mod.type} ({mod.where}): {c.targets} target layers, {c.pipeline} pipeline")
            if c.largest[1]:
                what, rule = algorithm_of(mod).statistic
                out.append(f"    {what} per target ({rule}): largest {_bytes(c.largest[1])} "
                           f"({c.largest[0]}); one block at a time: {_bytes(c.block_bytes)}")
            if mod.needs_data:
                out.append(f"    activation cache (samples x seq_len x hidden x 4 B): {_bytes(self.cache_bytes)}")
                out.append(f"    per block: forward {_flops(c.forward_flops)} (2 passes), statistics "
                           f"{_flops(c.statistic_flops)}, solve {_flops(c.solve_flops)}")
            out.append(f"    time: {_flops(c.flops)} in all: {_seconds(c.flops / CPU_FLOPS)} at "
                       f"{CPU_FLOPS / 1e9:g} GFLOP/s (a CPU), {_seconds(c.flops / GPU_FLOPS)} at "
                       f"{GPU_FLOPS / 1e12:g} TFLOP/s (a GPU)")
        return out


def _smoothing_lines(c: ModifierCost, cache_bytes: int) -> list[str]:
    """The estimate of a smoothing modifier: what it does, its mappings, its passes."""
    mod = c.modifier
    algorithm = algorithm_of(mod)
    what = algorithm.describe
    search = f"grid search {_flops(c.statistic_flops)}, " if algorithm.grid_passes(mod) else ""
    return [f"  {mod.type} ({mod.where}): {what}; {c.mappings} mapping(s) over {c.targets} balance layers "
            f"(no weight pruned or quantized by it), {c.pipeline} pipeline",
            f"    activation cache (samples x seq_len x hidden x 4 B): {_bytes(cache_bytes)}",
            f"    per block: forward {_flops(c.forward_flops)} (2 passes), {search}scaling {_flops(c.solve_flops)}",
            f"    time: {_flops(c.flops)} in all: {_seconds(c.flops / CPU_FLOPS)} at {CPU_FLOPS / 1e9:g} GFLOP/s "
            f"(a CPU), {_seconds(c.flops / GPU_FLOPS)} at {GPU_FLOPS / 1e12:g} TFLOP/s (a GPU)"]


def _smoothing_cost(mod: OneShotModifier, model: CheckpointModel, tokens: int) -> ModifierCost:
    """A smoothing modifier's cost: its mappings resolved on the model (as the run resolves
    them; one that cannot resolve counts none: P006 says why), the forward passes, AWQ's grid
    search (``n_grid`` forward passes of each mapping's balance layers) and the scaling."""
    import logging

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
    forward = 2 * 2.0 * max((params.get(b, 0) for b in by_block), default=0) * tokens
    grid = algorithm_of(mod).grid_passes(mod)
    return ModifierCost(mod, sum(len(r.balance) for r in resolved), "sequential", forward_flops=forward,
                        statistic_flops=grid * 2.0 * weights * tokens, solve_flops=2.0 * weights,
                        blocks=len(by_block), mappings=len(resolved))


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


def _seconds(s: float) -> str:
    if s < 1:
        return "under a second"
    if s < 120:
        return f"about {s:.0f} s"
    if s < 7200:
        return f"about {s / 60:.0f} min"
    return f"about {s / 3600:.1f} h"


def _cost(mod: OneShotModifier, model: CheckpointModel, tokens: int) -> ModifierCost:
    if mod.transform is not None:
        return _smoothing_cost(mod, model, tokens)
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
    forward = statistics = solve = 0.0
    if mod.needs_data:
        biggest = max(by_block, key=lambda b: params.get(b, 0))
        block_params = params.get(biggest, sum(shapes[n][0] * shapes[n][1] for n in by_block[biggest]))
        forward = 2 * 2.0 * block_params * tokens
    for n in heaviest:
        rows, columns = shapes[n]
        more, solving = algorithm.flops(rows, columns, tokens)
        statistics += more
        solve += solving
    return ModifierCost(mod, len(names), pipeline, (largest, per_target(largest)),
                        sum(per_target(n) for n in heaviest), forward, statistics, solve, blocks)


def estimate(mods: Sequence[OneShotModifier], model: CheckpointModel, samples: int, seq_len: int,
             tokens: int | None = None) -> Estimate:
    """The cost of running ``mods`` on ``model`` with ``samples`` calibration samples of
    ``seq_len`` tokens (``tokens``: their total when known, else ``samples x seq_len``).

    Rough by design: the forward passes count 2 operations per parameter and token, twice per
    block (observed, then run again for the next block's inputs); SparseGPT's solve counts the
    factorisations (about 5/3 in^3) and the column updates (out x in^2), its Hessian
    2 x tokens x in^2 per target."""
    total = tokens if tokens is not None else samples * seq_len
    hidden = model.hidden or 0
    cache = total * hidden * 4
    return Estimate(model, samples, seq_len, cache, [_cost(m, model, total) for m in mods])
