"""One module compressed by one modifier: the statistics it gathers from the module's inputs,
then the solve (SparseGPT, Wanda, magnitude), through the backend's array operations.

Statistics, fed a module input ``X`` (``[tokens, in]``, float32) from ``b`` sequences:

- SparseGPT, the running-mean Hessian (``n`` counts sequences, as llm-compressor):
  ``H *= n/(n+b); n += b; Xf = sqrt(2/n) X^T; H += Xf Xf^T``;
- Wanda, per input column ``S *= n/(n+b); n += b; S += ||X[:, j]||^2 / n``.

The solvers are :mod:`recipe_spec.pruning.second_order.blockwise` (SparseGPT) and
:mod:`recipe_spec.pruning.second_order.wanda`; magnitude masks are
:func:`recipe_spec.masks.algorithms.compute_mask`. A per-layer note (a Cholesky failure and
what was done instead) is logged and warned with the layer's name, never dropped.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any

from ..masks.algorithms import compute_mask
from .modifiers import OneShotModifier

__all__ = ["LayerReport", "RunningHessian", "RunningRowScalars", "new_statistics", "compress_module"]

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


class RunningHessian:
    """The SparseGPT input Hessian of one module, accumulated as llm-compressor does."""

    def __init__(self, ops: Any, columns: int, like: Any):
        self.ops, self.n = ops, 0
        self.value = ops.zeros((columns, columns), like)

    def add(self, x: Any, sequences: int) -> None:
        """Fold in ``x`` (``[tokens, columns]``) from ``sequences`` sequences."""
        ops = self.ops
        self.value = self.value * (self.n / (self.n + sequences))
        self.n += sequences
        xf = ops.permute(ops.cast(x, self.value), (1, 0)) * math.sqrt(2.0 / self.n)
        self.value = self.value + ops.matmul(xf, ops.permute_view(xf, (1, 0)))


class RunningRowScalars:
    """Wanda's per-input-column activation statistic of one module."""

    def __init__(self, ops: Any, columns: int, like: Any):
        self.ops, self.n = ops, 0
        self.value = ops.zeros((columns,), like)

    def add(self, x: Any, sequences: int) -> None:
        ops = self.ops
        self.value = self.value * (self.n / (self.n + sequences))
        self.n += sequences
        x = ops.cast(x, self.value)
        self.value = self.value + ops.sum(x * x, 0) / self.n


def _solvers() -> Any:
    """The second-order solvers module, or None where it is not installed."""
    try:
        from ..pruning.second_order import blockwise
    except ImportError:
        return None
    return blockwise


def new_statistics(ops: Any, mod: OneShotModifier, columns: int, like: Any) -> Any:
    """A fresh accumulator for ``mod`` on a module with ``columns`` inputs (None: it needs no
    data). ``like``: an array of the dtype and device to accumulate in (float32)."""
    if mod.kind == "sparsegpt":
        solvers = _solvers()
        make = getattr(solvers, "HessianStats", None) if solvers is not None else None
        return make(ops, columns, like) if make is not None else RunningHessian(ops, columns, like)
    if mod.kind == "wanda":
        solvers = _solvers()
        make = getattr(solvers, "WandaStats", None) if solvers is not None else None
        return make(ops, columns, like) if make is not None else RunningRowScalars(ops, columns, like)
    return None


def _value(stats: Any) -> Any:
    for attr in ("value", "hessian", "row_scalars", "result"):
        if hasattr(stats, attr):
            found = getattr(stats, attr)
            return found() if callable(found) else found
    raise TypeError(f"cannot read the statistic of {type(stats).__name__}")


def _zero_fraction(ops: Any, weight: Any) -> float:
    total = 1
    for d in weight.shape:
        total *= int(d)
    return 1.0 - ops.count_nonzero(weight) / total if total else 0.0


def _note_of(report: Any) -> str:
    """The solver's account of a fallback (a string, or a mapping/object with ``note``)."""
    if report is None:
        return ""
    if isinstance(report, str):
        return report
    if isinstance(report, dict):
        return str(report.get("note") or report.get("fallback") or "")
    return str(getattr(report, "note", "") or getattr(report, "fallback", "") or "")


def compress_module(host: Any, mod: OneShotModifier, name: str, stats: Any) -> LayerReport:
    """Compress module ``name`` of ``host`` by ``mod`` (``stats`` from :func:`new_statistics`)
    and write the weight back."""
    ops = host.ops
    if mod.kind == "constant":
        weight = host.weight(name)
        return LayerReport(name, mod.type, _zero_fraction(ops, weight))
    weight = host.weight(name)
    loss, note, samples = None, "", int(getattr(stats, "n", 0) or 0)
    if mod.kind == "magnitude":
        mask = compute_mask(ops, weight, mod.sparsity, mod.mask_type)
        new = ops.where(mask, weight, 0.0)
    else:
        solvers = _solvers()
        if solvers is None:
            raise RuntimeError(f"{mod.type} ({mod.where}) needs recipe_spec.pruning.second_order.blockwise, "
                               "which this installation lacks")
        if mod.kind == "sparsegpt":
            result = solvers.sparsegpt_prune(
                ops, weight, _value(stats), sparsity=mod.sparsity, prune_n=mod.prune_n,
                prune_m=mod.prune_m, block_size=mod.block_size, dampening_frac=mod.dampening_frac,
                preserve_mask=mod.preserve_mask)
        else:
            prune = getattr(solvers, "wanda_prune", None)
            if prune is None:
                from ..pruning.second_order import wanda as wanda_module  # type: ignore[attr-defined]

                prune = wanda_module.wanda_prune
            result = prune(ops, weight, _value(stats), sparsity=mod.sparsity, prune_n=mod.prune_n,
                           prune_m=mod.prune_m)
        new = result.weight
        loss = getattr(result, "loss", None)
        loss = float(loss) if loss is not None else None
        note = _note_of(getattr(result, "report", None))
    host.set_weight(name, new)
    report = LayerReport(name, mod.type, _zero_fraction(ops, new), loss, samples, note)
    _LOG.info("%s: %s compressed %s to sparsity %.4f%s%s", mod.where, mod.type, name, report.sparsity,
              f" using {samples} samples" if samples else "", f", loss {loss:.4g}" if loss is not None else "")
    if note:
        warnings.warn(f"{mod.type} ({mod.where}) on {name}: {note}", UserWarning, stacklevel=2)
    return report
