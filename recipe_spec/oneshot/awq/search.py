"""AWQ's scale search (llm-compressor 0.14, ``modifiers/transform/awq/base.py``), written once
over array operations; the model is reached through two callables the caller supplies.

For one mapping (a smooth layer, the balance layers it feeds, and their common parent module):

- ``x_mean``: each input channel's mean ``|x|`` over every calibration token of the balance
  layers' input (:class:`MeanAbs`, float32 sums);
- ``w_mean`` (duo scaling): each input column's mean, over the rows of every quantized
  balance layer, of ``|w|`` divided by the largest ``|w|`` of its quantization group (plus
  ``1e-6``), summed in float64 (:func:`layer_means`);
- the grid (:func:`grid`): ratios ``r`` in ``[0, 1]``; duo scaling takes
  ``s = clamp(x_mean^r / (w_mean^(1-r) + 1e-4), min=1e-4)`` (float64, as ``w_mean``), else
  ``s = clamp(x_mean^r, min=1e-4)``; then ``s / sqrt(max(s) · min(s))``, non-finite entries 1
  (:func:`candidate_scales`);
- each candidate: every quantized balance weight becomes ``Q(W · s) / s`` (``Q``: the
  min-max fake quantization of its grid), the parent module runs on its cached calls, and the
  loss is the mean squared difference to its outputs with the original weights; the first
  ratio with the smallest loss wins (:func:`search`);
- applying: every balance weight ``W · s`` (from the original weights), the smooth layer's
  weight and bias divided by ``s`` (:func:`recipe_spec.oneshot.smoothquant.solve.divide_rows`).

>>> grid(True, 4)
[(0.0, False), (0.0, True), (0.5, True), (1.0, True)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...masks.ops import Array
from ...quantization.args import QuantArgs
from ...quantization.grid import fake_quantize_weight, minmax_qparams
from ..distributed import added_in_order
from ..smoothquant.solve import SmoothingOps

__all__ = ["MeanAbs", "grid", "layer_means", "candidate_scales", "SearchResult", "search", "DUO_SCALING"]

#: ``duo_scaling`` values.
DUO_SCALING = (True, False, "both")


class MeanAbs:
    """The running per-channel sum of ``|x|`` and the token count of the balance layers'
    input (an observer: ``add(x, sequences)``, ``x`` ``[tokens, channels]`` float32)."""

    def __init__(self, ops: SmoothingOps, first_call_sum: bool = False):
        self.ops = ops
        self.total: Any = None
        self.tokens = 0
        self.samples = 0
        #: llm-compressor 0.9 and before: the first call's sum counts once per token of it
        self.first_call_sum = first_call_sum

    def add(self, x: Array, sequences: int) -> None:
        """Fold one input into the sum."""
        part = self.ops.sum(self.ops.abs(x), 0)
        if self.total is None and self.first_call_sum:
            part = part * float(x.shape[0])
        self.total = part if self.total is None else self.total + part
        self.tokens += int(x.shape[0])
        self.samples += sequences

    #: Over several processes each continues the sum of the one before, in the one process's
    #: order (the search follows every bit of the mean); ``distributed_statistics="sum"`` adds
    #: the processes' sums, as llm-compressor does.
    relayed = True

    def state(self) -> tuple[list[Array], list[Any]]:
        """The running sum and counts (:meth:`set_state`)."""
        return [], [self.total, self.tokens, self.samples]

    def set_state(self, arrays: list[Array], state: list[Any]) -> None:
        """Continue from another sum's :meth:`state` (of the same layer), bit for bit."""
        del arrays
        self.total, self.tokens, self.samples = state[0], int(state[1]), int(state[2])

    def combine(self, collective: Any) -> None:
        """The sum of every process's inputs, added in rank order (``collective``: a
        :class:`~..distributed.Collective`)."""
        self.total = added_in_order(self.total, collective)
        self.tokens = int(collective.sum_int(self.tokens))
        self.samples = int(collective.sum_int(self.samples))

    def mean(self) -> Array:
        """``sum / count`` per channel (float32)."""
        if self.total is None or not self.tokens:
            raise ValueError("no activation was observed")
        return self.total / float(self.tokens)


def grid(duo_scaling: bool | str, n_grid: int, to_one: bool = True) -> list[tuple[float, bool]]:
    """The ``(ratio, duo)`` pairs searched, in order (llm-compressor's
    ``_get_grid_search_params``): ``True`` puts ``(0.0, False)`` (no scaling) first, then
    ``n_grid - 1`` ratios with duo scaling; ``False`` ``n_grid`` ratios without; ``"both"``
    ``n_grid // 2`` ratios, each without then with duo scaling. ``to_one=False``: llm-compressor
    0.10 and before, ``n`` ratios ``i / n`` (``n``: ``n_grid``, or ``n_grid // 2`` for
    ``"both"``) with the one duo flag, or each without then with it for ``"both"``.

    >>> grid(True, 4, to_one=False)
    [(0.0, True), (0.25, True), (0.5, True), (0.75, True)]
    """
    if not to_one:
        if duo_scaling not in DUO_SCALING:
            raise ValueError(f"duo_scaling must be true, false or 'both', got {duo_scaling!r}")
        n = int(n_grid / 2) if duo_scaling == "both" else n_grid
        flags = (False, True) if duo_scaling == "both" else (bool(duo_scaling),)
        return [(i / n, duo) for i in range(n) for duo in flags]
    if duo_scaling == "both":
        n = int(n_grid / 2)
        return [(i / (n - 1), duo) for i in range(n) for duo in (False, True)]
    if duo_scaling is False:
        return [(i / (n_grid - 1), False) for i in range(n_grid)]
    if duo_scaling is True:
        return [(0.0, False)] + [(i / (n_grid - 2), True) for i in range(n_grid - 1)]
    raise ValueError(f"duo_scaling must be true, false or 'both', got {duo_scaling!r}")


def _chunk(shape: Sequence[int], args: QuantArgs) -> int:
    if args.strategy == "tensor":
        return int(shape[0]) * int(shape[1])
    if args.strategy == "channel":
        return int(shape[1])
    return int(args.group_size or 1)


def layer_means(ops: SmoothingOps, weights: Sequence[tuple[Array, QuantArgs]]) -> Array:
    """``w_mean`` over the quantized balance layers ``(weight (out, in), args)`` (float64)."""
    total: Any = None
    rows = 0
    for weight, args in weights:
        shape = tuple(int(d) for d in weight.shape)
        chunks = ops.reshape(ops.abs(weight), (-1, _chunk(shape, args)))
        chunks = chunks / (ops.amax(chunks, 1) + 1e-6)
        part = ops.sum(ops.astype(ops.reshape(chunks, shape), "float64"), 0)
        total = part if total is None else total + part
        rows += shape[0]
    if total is None:
        raise ValueError("no balance layer is quantized")
    return total / float(rows)


def candidate_scales(ops: SmoothingOps, x_mean: Array, w_mean: Array | None, ratio: float,
                     duo: bool) -> Array:
    """The scales of one grid point (see the module docstring)."""
    if duo:
        if w_mean is None:
            raise ValueError("duo scaling needs the weights' means")
        s = ops.maximum(ops.astype(x_mean ** ratio, "float64") / (w_mean ** (1.0 - ratio) + 1e-4), 1e-4)
    else:
        s = ops.maximum(x_mean ** ratio, 1e-4)
    s = s / ops.sqrt(ops.amax(s, 0) * ops.amin(s, 0))
    return ops.where(ops.isfinite(s), s, 1.0)


def _scaled_weight(ops: SmoothingOps, weight: Array, scales: Array) -> Array:
    """``W · s`` written back in the weight's dtype (float32)."""
    return ops.astype(weight * ops.reshape(scales, (1, -1)), "float32")


def _quantized_over_scales(ops: SmoothingOps, weight: Array, scales: Array, args: QuantArgs) -> Array:
    scaled = _scaled_weight(ops, weight, scales)
    scale, zero_point = minmax_qparams(ops, scaled, args)
    fake = fake_quantize_weight(ops, scaled, scale, zero_point, args)
    return ops.astype(fake / ops.reshape(scales, (1, -1)), "float32")


@dataclass
class SearchResult:
    """The search's outcome: the scales chosen, their ratio and duo flag, and each grid
    point's ``(ratio, duo, loss)`` in order."""

    scales: Any
    ratio: float
    duo: bool
    initial_loss: float
    best_loss: float
    history: list[tuple[float, bool, float]] = field(default_factory=list)


def search(ops: SmoothingOps, x_mean: Array, weights: Sequence[tuple[Array, QuantArgs | None]],
           duo_scaling: bool | str, n_grid: int, run: Callable[[Sequence[Array | None]], float],
           to_one: bool = True) -> SearchResult:
    """Search the grid for one mapping. ``weights``: each balance layer's original ``(out, in)``
    float32 weight and its grid (None: not quantized, left as it is during the search).
    ``run(candidate)``: the loss of the parent module with each quantized balance layer's
    weight replaced by ``candidate[i]`` (None: unchanged); ``to_one``: which grid
    (:func:`grid`). Raises ValueError when no grid point gives a finite loss."""
    quantized = [(w, a) for w, a in weights if a is not None]
    w_mean = layer_means(ops, quantized) if duo_scaling is not False and quantized else None
    best: SearchResult | None = None
    best_loss = float("inf")
    history: list[tuple[float, bool, float]] = []
    for ratio, duo in grid(duo_scaling, n_grid, to_one):
        scales = candidate_scales(ops, x_mean, w_mean, ratio, duo)
        candidate = [None if a is None else _quantized_over_scales(ops, w, scales, a) for w, a in weights]
        loss = float(run(candidate))
        history.append((ratio, duo, loss))
        if loss < best_loss:
            best_loss = loss
            best = SearchResult(scales, ratio, duo, history[0][2], loss)
    if best is None:
        raise ValueError("no finite loss was found in the scale search (NaN in the parent module's output)")
    best.history = history
    return best
