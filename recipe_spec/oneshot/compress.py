"""One module compressed by one modifier: the statistic its algorithm gathers from the module's
inputs, then the algorithm's solve (:data:`.algorithms.ALGORITHMS`), through the backend's
array operations.

Statistics are fed each module input ``X`` (``[tokens, in]``, float32) with the number of
sequences it came from (SparseGPT's and GPTQ's running-mean Hessians, Wanda's row scalars,
a static input range; ``n`` counts sequences, as llm-compressor). A per-layer note (a
Cholesky failure and what was done instead) is logged and warned with the layer's name,
never dropped.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any

from .algorithm import LayerReport, OneShotModifier, Prepared
from .algorithms import algorithm_of
from .shared.solver import Solver

__all__ = ["LayerReport", "new_statistics", "prepare_module", "compress_module"]

_LOG = logging.getLogger("recipe_spec.oneshot")


def new_statistics(ops: Any, mod: OneShotModifier, columns: int, like: Any, classes: Sequence[str] = (),
                   name: str = "") -> Any:
    """A fresh accumulator for ``mod`` on a module with ``columns`` inputs (None: it needs no
    data). ``like``: an array of the dtype and device to accumulate in (float32); ``classes``
    and ``name``: the module's class names and name (which config group of a quantization
    modifier it falls in)."""
    return algorithm_of(mod).new_stats(ops, mod, _group(mod, name, classes), columns, like)


def prepare_module(solver: Solver, mod: OneShotModifier, name: str, stats: Any, classes: Sequence[str] = ()) -> Any:
    """The part of module ``name``'s solve that reads its statistic alone
    (:meth:`~.algorithm.Algorithm.prepare`), on ``solver`` (the host's:
    :func:`~.shared.solver.solver_of`), None when there is none or it has no group."""
    group = _group(mod, name, classes)
    if mod.quant is not None and group is None:
        return None  # compress_module refuses it in its turn
    return algorithm_of(mod).prepare(solver, mod, stats, group)


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


def compress_module(host: Any, mod: OneShotModifier, name: str, stats: Any, classes: Sequence[str] = (),
                    prepared: Prepared | None = None) -> LayerReport:
    """Compress module ``name`` of ``host`` by ``mod`` (``stats`` from :func:`new_statistics`):
    its algorithm's solve writes the weight back (a quantizer records its grid on the host).
    ``prepared``: :func:`prepare_module`'s work for it, made ahead."""
    group = _group(mod, name, classes)
    if mod.quant is not None and group is None:
        raise ValueError(f"{mod.type} ({mod.where}): no config group quantizes {name}")
    samples = int(getattr(stats, "samples", 0) or 0)
    solved = algorithm_of(mod).solve(host, mod, name, stats, group, prepared)
    report = LayerReport(name, mod.type, _zero_fraction(host.ops, solved.weight), solved.loss, samples,
                         solved.note, solved.grid)
    loss = f", loss {solved.loss:.4g}" if solved.loss is not None else ""
    used = f" using {samples} samples" if samples else ""
    if mod.quant is not None:
        _LOG.info("%s: %s quantized %s%s%s", mod.where, mod.type, name, used, loss)
    else:
        _LOG.info("%s: %s compressed %s to sparsity %.4f%s%s", mod.where, mod.type, name, report.sparsity,
                  used, loss)
    if solved.note:
        warnings.warn(f"{mod.type} ({mod.where}) on {name}: {solved.note}", UserWarning, stacklevel=2)
    return report
