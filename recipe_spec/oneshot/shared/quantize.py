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
  compressed-tensors' ``calculate_qparams`` of the result.

The host records the values under compressed-tensors' names (``weight_scale``,
``weight_zero_point``, ``input_scale``, ``input_zero_point``;
:meth:`~.host.CalibrationHost.set_quantized`).
"""

from __future__ import annotations

from typing import Any

from ...quantization.args import QuantArgs
from ...quantization.grid import minmax_qparams, qparams
from ..gptq.solve import gptq_quantize
from .hessian import GPTQHessianStats
from .obs import SolverError
from .quant_plan import QuantGroup

__all__ = ["InputRange", "QuantStats", "quantize_module"]


class InputRange:
    """A static input-activation observer of one module, per tensor (see the module
    docstring); ``observer``: ``minmax``, ``static_minmax`` or ``memoryless_minmax``."""

    def __init__(self, ops: Any, args: QuantArgs, observer: str, averaging_constant: float = 0.01):
        self._ops, self.args, self.observer, self.constant = ops, args, observer, averaging_constant
        self.low: Any = None
        self.high: Any = None

    def add(self, x: Any) -> None:
        """Observe one forward call's input (any shape)."""
        flat = self._ops.reshape(x, (1, -1))
        low = self._ops.reshape(self._ops.amin(flat, 1), (1,))
        high = self._ops.reshape(self._ops.amax(flat, 1), (1,))
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

    def qparams(self) -> tuple[Any, Any]:
        """``(input_scale, input_zero_point)``, each of shape ``(1,)``."""
        if self.low is None:
            raise ValueError("no calibration input reached this module")
        return qparams(self._ops, self.low, self.high, self.args)


class QuantStats:
    """What a quantization modifier gathers from one module's inputs: GPTQ's Hessian
    (``hessian_stats``) and the static input observer (``inputs``), either may be None."""

    def __init__(self, ops: Any, kind: str, group: QuantGroup, columns: int, like: Any):
        self.hessian_stats = GPTQHessianStats(ops, columns, like) if kind == "gptq" else None
        self.inputs = (InputRange(ops, group.inputs, group.input_observer or "minmax", group.averaging_constant)
                       if group.inputs is not None else None)
        self.samples = 0

    def add(self, x: Any, sequences: int | None = None) -> None:
        """Feed one forward call's input ``x`` (``[tokens, in]``) from ``sequences`` sequences."""
        if self.hessian_stats is not None:
            self.hessian_stats.add(x, sequences)
        if self.inputs is not None:
            self.inputs.add(x)
        self.samples += int(sequences or 1)

    @property
    def hessian(self) -> Any:
        """GPTQ's ``H / n``."""
        assert self.hessian_stats is not None
        return self.hessian_stats.hessian


def new_quant_statistics(ops: Any, mod: Any, group: QuantGroup | None, columns: int, like: Any) -> QuantStats | None:
    """A fresh accumulator for a quantization modifier on one module (None: it needs none)."""
    if group is None or (mod.kind != "gptq" and group.inputs is None):
        return None
    return QuantStats(ops, mod.kind, group, columns, like)


def quantize_module(host: Any, mod: Any, name: str, group: QuantGroup, stats: QuantStats | None
                    ) -> tuple[Any, float | None, str]:
    """Quantize module ``name`` of ``host`` by ``mod`` (its ``group``) and record the result on
    the host; ``(weight after, GPTQ loss or None, solver note)``."""
    ops = host.ops
    weight = host.weight(name)
    values: dict[str, Any] = {}
    new, loss, note = None, None, ""
    if group.weights is not None:
        if mod.kind == "gptq":
            if stats is None or stats.hessian_stats is None or not stats.hessian_stats.samples:
                raise ValueError(f"{mod.type} ({mod.where}) on {name}: no calibration input reached this "
                                 "module, so GPTQ has no Hessian")
            mask = ops.astype(weight, "bool") if mod.preserve_mask else None
            try:
                result = gptq_quantize(ops, weight, stats.hessian, args=group.weights, block_size=mod.block_size,
                                       dampening_frac=mod.dampening_frac, actorder=group.actorder, mask=mask)
            except (SolverError, ValueError) as exc:
                raise type(exc)(f"{mod.type} ({mod.where}) on {name}: {exc}; no later layer was "
                                "compressed") from None
            new, loss, note = result.weight, result.loss, result.report or ""
            scale, zero = result.scale, result.zero_point
        else:  # extremes and elementwise steps: the same bits on one thread, no wait on a busy core
            with ops.serial(weight):
                scale, zero = minmax_qparams(ops, weight, group.weights)
        values["weight_scale"], values["weight_zero_point"] = scale, zero
    if stats is not None and stats.inputs is not None:
        values["input_scale"], values["input_zero_point"] = stats.inputs.qparams()
    host.set_quantized(name, new, values)
    return (new if new is not None else weight), loss, note
