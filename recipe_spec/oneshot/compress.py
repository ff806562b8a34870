"""One module compressed by one modifier: the statistics it gathers from the module's inputs,
then the solve (SparseGPT, Wanda, magnitude), through the backend's array operations.

Statistics are fed each module input ``X`` (``[tokens, in]``, float32) with the number of
sequences it came from: SparseGPT's running-mean Hessian, Wanda's row scalars (``n`` counts
sequences, as llm-compressor).

The statistics are :mod:`recipe_spec.oneshot.shared.hessian`'s, the solvers
:mod:`recipe_spec.oneshot.shared.obs` (SparseGPT) and
:mod:`recipe_spec.oneshot.wanda.solve`; magnitude masks are
:func:`recipe_spec.masks.algorithms.compute_mask`. A per-layer note (a Cholesky failure and
what was done instead) is logged and warned with the layer's name, never dropped.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..masks.algorithms import compute_mask
from .modifiers import OneShotModifier
from .shared.hessian import HessianStats, WandaStats
from .shared.obs import SolverError, sparsegpt_prune
from .shared.quantize import new_quant_statistics, quantize_module
from .wanda.solve import wanda_prune

__all__ = ["LayerReport", "new_statistics", "compress_module"]

_LOG = logging.getLogger("recipe_spec.oneshot")


@dataclass(frozen=True)
class LayerReport:
    """What one modifier did to one module: the zero fraction reached, the solver's loss
    (SparseGPT), the number of calibration sequences seen, and a note when the solve fell
    back (e.g. a Hessian that is not positive definite)."""

    module: str
    modifier: str
    sparsity: float
    loss: float | None = None
    samples: int = 0
    note: str = ""
    #: A quantized module's grid, e.g. ``W int4 group 32 asym, A int8 static`` ("" when not quantized).
    grid: str = ""


def new_statistics(ops: Any, mod: OneShotModifier, columns: int, like: Any, classes: Sequence[str] = (),
                   name: str = "") -> Any:
    """A fresh accumulator for ``mod`` on a module with ``columns`` inputs (None: it needs no
    data). ``like``: an array of the dtype and device to accumulate in (float32); ``classes``:
    and ``name``: the module's class names and name (which config group of a quantization
    modifier it falls in)."""
    if mod.quant is not None:
        return new_quant_statistics(ops, mod, _group(mod, name, classes), columns, like)
    if mod.kind == "sparsegpt":
        return HessianStats(ops, columns, like)
    if mod.kind == "wanda":
        return WandaStats(ops, columns, like)
    return None


def _zero_fraction(ops: Any, weight: Any) -> float:
    total = 1
    for d in weight.shape:
        total *= int(d)
    if not total:
        return 0.0
    with ops.serial(weight):  # a count: the same on one thread, which a busy core does not stall
        return 1.0 - ops.count_nonzero(weight) / total


def _group(mod: OneShotModifier, name: str, classes: Sequence[str]) -> Any:
    return mod.quant.group_of(name, classes) if mod.quant is not None else None


def _args_text(args: Any) -> str:
    kind = f"{args.type}{args.num_bits}" if args.type == "int" else "fp8"
    where = f"group {args.group_size}" if args.strategy == "group" else args.strategy
    return f"{kind} {where}{'' if args.symmetric else ' asym'}"


def _grid_text(group: Any) -> str:
    """A config group's weight and static input grids in a few words."""
    parts = [f"W {_args_text(group.weights)}"] if group.weights is not None else []
    if group.inputs is not None:
        parts.append(f"A {_args_text(group.inputs)} static")
    return ", ".join(parts)


def compress_module(host: Any, mod: OneShotModifier, name: str, stats: Any, classes: Sequence[str] = ()) -> LayerReport:
    """Compress module ``name`` of ``host`` by ``mod`` (``stats`` from :func:`new_statistics`)
    and write the weight back (a quantization modifier: record it, :mod:`.quantize`)."""
    ops = host.ops
    if mod.quant is not None:
        group = _group(mod, name, classes)
        if group is None:
            raise ValueError(f"{mod.type} ({mod.where}): no config group quantizes {name}")
        samples = int(getattr(stats, "samples", 0) or 0)
        new, loss, note = quantize_module(host, mod, name, group, stats)
        report = LayerReport(name, mod.type, _zero_fraction(ops, new), loss, samples, note, _grid_text(group))
        _LOG.info("%s: %s quantized %s%s%s", mod.where, mod.type, name, f" using {samples} samples" if samples
                  else "", f", loss {loss:.4g}" if loss is not None else "")
        if note:
            warnings.warn(f"{mod.type} ({mod.where}) on {name}: {note}", UserWarning, stacklevel=2)
        return report
    if mod.kind == "constant":
        weight = host.weight(name)
        return LayerReport(name, mod.type, _zero_fraction(ops, weight))
    weight = host.weight(name)
    loss, note, samples = None, "", int(getattr(stats, "samples", 0) or 0)
    sparsity = mod.levels.get(name, mod.sparsity)  # a list's or OWL's value for this layer
    if mod.kind == "magnitude":
        mask = compute_mask(ops, weight, mod.sparsity, mod.mask_type)
        new = ops.where(mask, weight, 0.0)
    else:
        try:
            if mod.kind == "sparsegpt":
                result = sparsegpt_prune(
                    ops, weight, stats.hessian, sparsity=sparsity, prune_n=mod.prune_n,
                    prune_m=mod.prune_m, block_size=mod.block_size, dampening_frac=mod.dampening_frac,
                    preserve_mask=True if mod.preserve_mask else None)
            else:
                result = wanda_prune(ops, weight, stats.row_scalars, sparsity=sparsity,
                                     prune_n=mod.prune_n, prune_m=mod.prune_m)
        except (SolverError, ValueError) as exc:
            raise type(exc)(f"{mod.type} ({mod.where}) on {name}: {exc}; no later layer was "
                            "compressed") from None
        new, loss, note = result.weight, result.loss, result.report or ""
    host.set_weight(name, new)
    report = LayerReport(name, mod.type, _zero_fraction(ops, new), loss, samples, note)
    _LOG.info("%s: %s compressed %s to sparsity %.4f%s%s", mod.where, mod.type, name, report.sparsity,
              f" using {samples} samples" if samples else "", f", loss {loss:.4g}" if loss is not None else "")
    if note:
        warnings.warn(f"{mod.type} ({mod.where}) on {name}: {note}", UserWarning, stacklevel=2)
    return report
