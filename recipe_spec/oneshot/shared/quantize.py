"""One module quantized by a QuantizationModifier (round to nearest) or a GPTQModifier, through
the backend's array operations, as llm-compressor 0.14 does it:

- the weight's scale and zero point come from the memoryless min-max observer on the weight as
  it is when the module's turn comes (:func:`recipe_spec.quantization.grid.minmax_qparams`);
- round to nearest keeps the float weight in the model (llm-compressor does too: the grid is
  applied when the model runs quantized or is saved); GPTQ writes its dequantized weight
  (:func:`recipe_spec.oneshot.gptq.solve.gptq_quantize`, Hessian
  :class:`~recipe_spec.oneshot.shared.hessian.GPTQHessianStats`);
- static per-tensor input activations: the observer sees each forward call's input ``X``
  (``min``/``max`` over every entry) and keeps the last (``memoryless_minmax``), the running
  extremes (``static_minmax``) or the running average ``old·(1-c) + new·c`` with ``c`` the
  ``averaging_constant`` (``minmax``, c = 0.01); ``input_scale`` / ``input_zero_point`` are
  compressed-tensors' ``calculate_qparams`` of the result. Over several processes the
  ranges are relayed in the one process's order, or joined (:meth:`InputRange.combine`).

The host records the values under compressed-tensors' names (``weight_scale``,
``weight_zero_point``, ``input_scale``, ``input_zero_point``;
:meth:`~.host.CalibrationHost.set_quantized`).
"""

from __future__ import annotations

from typing import Any

from ...quantization.args import QuantArgs
from ...quantization.fp4 import global_scale
from ...quantization.grid import qparams
from ..distributed import joined_extremes
from .hessian import GPTQHessianStats
from .quant_plan import QuantGroup

__all__ = ["InputRange", "QuantStats", "new_quant_statistics", "record_quantized", "grid_text"]


class InputRange:
    """A static input-activation observer of one module, per tensor (see the module
    docstring); ``observer``: ``minmax``, ``static_minmax`` or ``memoryless_minmax``."""

    def __init__(self, ops: Any, args: QuantArgs, observer: str, averaging_constant: float = 0.01):
        self._ops, self.args, self.observer, self.constant = ops, args, observer, averaging_constant
        self.low: Any = None
        self.high: Any = None

    def add(self, x: Any) -> None:
        """Observe one forward call's input (any shape; NVFP4's ``tensor_group`` inputs: the range
        of each group of ``group_size`` features over every token, as llm-compressor's observers
        keep them, the global scale made from their extremes when read)."""
        ops = self._ops
        if self.args.strategy == "tensor_group":
            size = int(self.args.group_size or 1)
            groups = ops.reshape(x, (-1, int(x.shape[-1]) // size, size))
            count = int(groups.shape[1])
            low = ops.reshape(ops.amin(ops.reshape(ops.amin(groups, 2), (-1, count)), 0), (count,))
            high = ops.reshape(ops.amax(ops.reshape(ops.amax(groups, 2), (-1, count)), 0), (count,))
        else:
            flat = ops.reshape(x, (1, -1))
            low = ops.reshape(ops.amin(flat, 1), (1,))
            high = ops.reshape(ops.amax(flat, 1), (1,))
        if self.low is None or self.observer == "memoryless_minmax":
            self.low, self.high = low, high
        elif self.observer == "static_minmax":
            self.low, self.high = self._ops.minimum(self.low, low), self._ops.maximum(self.high, high)
        elif self.constant != 1.0:
            keep = 1.0 - self.constant
            self.low = self.low * keep + low * self.constant
            self.high = self.high * keep + high * self.constant
        else:
            self.low, self.high = low, high

    def state(self) -> tuple[Any, Any]:
        """The running ``(low, high)`` (None, None before any input): :meth:`set_state`
        continues from it, bit for bit."""
        return self.low, self.high

    def set_state(self, state: tuple[Any, Any]) -> None:
        """Continue from another observer's :meth:`state` (of the same module)."""
        self.low, self.high = state

    def combine(self, collective: Any) -> None:
        """Join every process's ranges (``collective``: a :class:`~..distributed.Collective`):
        ``static_minmax`` the extremes (the one-process values), ``memoryless_minmax`` the last
        process's that saw an input, ``minmax`` the mean of the processes' running averages
        (llm-compressor's ``ReduceOp.AVG``: a relay gives the one-process values)."""
        if self.observer == "static_minmax":
            self.low, self.high = joined_extremes(self.low, self.high, self._ops, collective)
            return
        seen = [(lo, hi) for lo, hi in collective.gather((self.low, self.high)) if lo is not None]
        if not seen:
            return
        if self.observer == "memoryless_minmax":
            low, high = seen[-1]
        else:
            low, high = seen[0]
            for lo, hi in seen[1:]:
                low, high = low + lo, high + hi
            low, high = low / float(len(seen)), high / float(len(seen))
        self.low, self.high = low, high

    def qparams(self) -> tuple[Any, Any]:
        """``(input_scale, input_zero_point)``, each of shape ``(1,)``."""
        if self.low is None:
            raise ValueError("no calibration input reached this module")
        return qparams(self._ops, self.low, self.high, self.args)

    def values(self) -> dict[str, Any]:
        """The module's calibrated input parameters under compressed-tensors' names:
        ``input_scale`` and ``input_zero_point`` (static per tensor), or ``input_global_scale``
        alone (NVFP4's ``tensor_group`` inputs: the group scales are made at run time, the
        global scale from the calibrated range, float32)."""
        if self.args.strategy != "tensor_group":
            scale, zero = self.qparams()
            return {"input_scale": scale, "input_zero_point": zero}
        if self.low is None:
            raise ValueError("no calibration input reached this module")
        ops = self._ops
        low = ops.reshape(ops.amin(ops.reshape(self.low, (1, -1)), 1), (1,))
        high = ops.reshape(ops.amax(ops.reshape(self.high, (1, -1)), 1), (1,))
        return {"input_global_scale": ops.astype(global_scale(ops, low, high), "float32")}


class QuantStats:
    """What a quantization modifier gathers from one module's inputs: GPTQ's Hessian
    (``hessian_stats``, when ``hessian``) and the static input observer (``inputs``), either
    may be None."""

    #: Its :meth:`add` takes a :class:`~.hessian.SharedInput`.
    shares_input = True

    def __init__(self, ops: Any, group: QuantGroup, columns: int, like: Any, hessian: bool):
        self.hessian_stats = GPTQHessianStats(ops, columns, like) if hessian else None
        self.inputs = (InputRange(ops, group.inputs, group.input_observer or "minmax", group.averaging_constant)
                       if group.inputs is not None else None)
        self.samples = 0

    def add(self, x: Any, sequences: int | None = None, shared: Any = None) -> None:
        """Feed one forward call's input ``x`` (``[tokens, in]``) from ``sequences`` sequences;
        ``shared``: a :class:`~.hessian.SharedInput` of the layers fed ``x``."""
        if self.hessian_stats is not None:
            self.hessian_stats.add(x, sequences, shared)
        if self.inputs is not None:
            self.inputs.add(x)
        self.samples += int(sequences or 1)

    def combine(self, collective: Any) -> None:
        """The statistic of every process's inputs (``collective``: a
        :class:`~..distributed.Collective`)."""
        if self.hessian_stats is not None:
            self.hessian_stats.combine(collective)
        if self.inputs is not None:
            self.inputs.combine(collective)
        self.samples = int(collective.sum_int(self.samples))

    #: Over several processes, each continues the sum of the one before (``distributed.relay``):
    #: GPTQ's grid follows every bit of its Hessian, a running average every input's order.
    relayed = True

    def state(self) -> tuple[list[Any], list[Any]]:
        """The accumulator's arrays, and its counts and input ranges (:meth:`set_state`)."""
        inputs = self.inputs.state() if self.inputs is not None else None
        if self.hessian_stats is None:
            return [], [self.samples, inputs]
        arrays, counts = self.hessian_stats.state()
        return arrays, [*counts, self.samples, inputs]

    def set_state(self, arrays: list[Any], counts: list[Any]) -> None:
        """Continue from another accumulator's :meth:`state` (of the same layer)."""
        if self.hessian_stats is not None:
            self.hessian_stats.set_state(arrays, counts[:-2])
        if self.inputs is not None:
            self.inputs.set_state(counts[-1])
        self.samples = int(counts[-2])

    @property
    def hessian(self) -> Any:
        """GPTQ's ``H / n``."""
        assert self.hessian_stats is not None
        return self.hessian_stats.hessian


def new_quant_statistics(ops: Any, group: QuantGroup | None, columns: int, like: Any,
                         hessian: bool) -> QuantStats | None:
    """A fresh accumulator for a quantization modifier on one module (None: it needs none:
    no Hessian wanted and no static input activations)."""
    if group is None or (not hessian and group.inputs is None):
        return None
    return QuantStats(ops, group, columns, like, hessian)


def record_quantized(host: Any, name: str, weight: Any, new: Any, scale: Any, zero: Any,
                     stats: QuantStats | None, global_scale: Any = None) -> Any:
    """Record module ``name``'s quantization on the host (``new``: a solver's weight, None to
    keep the float weight; ``scale``/``zero``: the weight's, None when weights are not
    quantized; ``global_scale``: NVFP4's, None for other grids; the input range from
    ``stats``); the weight after."""
    values: dict[str, Any] = {}
    if scale is not None:
        values["weight_scale"], values["weight_zero_point"] = scale, zero
    if global_scale is not None:
        values["weight_global_scale"] = global_scale
    if stats is not None and stats.inputs is not None:
        values.update(stats.inputs.values())
    host.set_quantized(name, new, values)
    return new if new is not None else weight


def _args_text(args: Any) -> str:
    kind = f"{args.type}{args.num_bits}" if args.type == "int" else f"fp{args.num_bits}"
    if getattr(args, "mx", False):
        kind = f"mx{kind}"
    where = {"group": f"group {args.group_size}", "tensor_group": f"group {args.group_size} + global"}.get(
        args.strategy, args.strategy)
    return f"{kind} {where}{'' if args.symmetric else ' asym'}"


def grid_text(group: QuantGroup) -> str:
    """A config group's weight and static input grids in a few words."""
    parts = [f"W {_args_text(group.weights)}"] if group.weights is not None else []
    if group.inputs is not None:
        parts.append(f"A {_args_text(group.inputs)} static")
    return ", ".join(parts)
