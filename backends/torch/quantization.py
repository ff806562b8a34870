"""QuantizationModifier on PyTorch: quantization-aware training on CPU.

API choice: the fake-quantize operators of torch itself (``torch.fake_quantize_per_tensor_affine``,
straight-through gradients, CPU and GPU), wrapped in small modules here. ``torch.ao.quantization``
eager-mode QAT (what SparseML used) is deprecated since torch 2.10 and SparseML's use of it
crashes on 2.13; torchao's QAT would add a dependency. The core operators are stable and
enough for the scheme recipes ask for.

What it does at the start step (SparseML's default scheme):

- every Linear and Conv1d/2d/3d inside ``submodules`` (default: the whole model), minus the
  layers and layer types named in ``ignore``, becomes its QAT twin *in place*: same parameter
  objects and names (``fc1.weight`` stays ``fc1.weight``, so masks and optimizer state carry
  over), plus fake quantization of its weights (8-bit symmetric, per tensor) and of its inputs
  (8-bit asymmetric, moving-average min/max); outputs are not quantized;
- fusing: a Conv directly followed by a BatchNorm in the same parent is trained with the BN
  folded into the quantized conv weights (the standard QAT conv-BN fold), unless
  ``model_fuse_fn_name: no_fuse``;
- at ``disable_quantization_observer_epoch`` the observers freeze their ranges; at
  ``freeze_bn_stats_epoch`` the folded BatchNorms stop updating their running statistics.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from recipe_spec.recipe.findings import Finding
from recipe_spec.runtime.structure import nothing_to_quantize_findings
from torch import nn

if TYPE_CHECKING:
    from recipe_spec.recipe import Modifier, Recipe

__all__ = ["FakeQuantize", "QuantizationState", "qat_modules", "nothing_to_quantize"]

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_BNS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


class FakeQuantize(nn.Module):
    """Fake-quantizes a tensor to ``bits`` bits: symmetric (weights) or asymmetric
    (activations), with a min/max observer (moving average for activations). Its buffers are
    made on ``device``: the device of the layer it quantizes."""

    def __init__(self, bits: int = 8, symmetric: bool = False, averaging: float = 0.01,
                 device: torch.device | str | None = None):
        super().__init__()
        device = torch.device("cpu") if device is None else torch.device(device)
        self.bits, self.symmetric, self.averaging = bits, symmetric, averaging
        if symmetric:
            self.qmin, self.qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        else:
            self.qmin, self.qmax = 0, 2**bits - 1
        self.register_buffer("min_val", torch.tensor(float("inf"), device=device))
        self.register_buffer("max_val", torch.tensor(float("-inf"), device=device))
        self.register_buffer("observer_enabled", torch.tensor(True, device=device))
        self.register_buffer("scale", torch.tensor(1.0, device=device))
        self.register_buffer("zero_point", torch.tensor(0, dtype=torch.int32, device=device))

    @torch.no_grad()
    def _observe(self, x: torch.Tensor) -> bool:
        """Update the range from ``x``; False (range kept) when ``x`` holds NaN or inf."""
        lo, hi = x.detach().min(), x.detach().max()
        if not bool(torch.isfinite(lo) & torch.isfinite(hi)):
            return False
        if self.averaging and bool(torch.isfinite(self.min_val)):
            lo = self.min_val + self.averaging * (lo - self.min_val)
            hi = self.max_val + self.averaging * (hi - self.max_val)
        self.min_val.copy_(lo)
        self.max_val.copy_(hi)
        lo, hi = torch.clamp(self.min_val, max=0.0), torch.clamp(self.max_val, min=0.0)
        eps = torch.finfo(torch.float32).eps
        if self.symmetric:
            scale = torch.maximum(-lo, hi) / ((self.qmax - self.qmin) / 2)
            zero = torch.zeros((), dtype=torch.int32, device=self.zero_point.device)
        else:
            scale = (hi - lo) / (self.qmax - self.qmin)
            zero = torch.clamp(self.qmin - torch.round(lo / torch.clamp(scale, min=eps)), self.qmin, self.qmax).to(torch.int32)
        self.scale.copy_(torch.clamp(scale, min=eps))
        self.zero_point.copy_(zero)
        return True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(self.observer_enabled) and not self._observe(x):
            # NaN or inf (a diverged run): passed through as they are, so that the loss shows
            # the divergence, instead of clamped to a range that would hide it
            return x
        return torch.fake_quantize_per_tensor_affine(
            x, float(self.scale), int(self.zero_point), self.qmin, self.qmax
        )

    def extra_repr(self) -> str:
        kind = "symmetric" if self.symmetric else "asymmetric"
        return f"bits={self.bits}, {kind}"


class _QATMixin:
    """Adds input and weight fake quantization to a Linear or Conv (its own parameters kept)."""

    def _qat_init(self, bn: nn.Module | None) -> None:
        device = self.weight.device  # type: ignore[attr-defined]
        self.input_fake_quant = FakeQuantize(8, symmetric=False, averaging=0.01, device=device)
        self.weight_fake_quant = FakeQuantize(8, symmetric=True, averaging=0.0, device=device)
        self.__dict__["folded_bn"] = bn  # not a child: the BN keeps its own place and name


class QATLinear(_QATMixin, nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.input_fake_quant(x), self.weight_fake_quant(self.weight), self.bias)


def _conv_forward(self: Any, x: torch.Tensor, base: type) -> torch.Tensor:
    x = self.input_fake_quant(x)
    bn = self.__dict__.get("folded_bn")
    if bn is None:
        return base._conv_forward(self, x, self.weight_fake_quant(self.weight), self.bias)
    # QAT conv-BN fold: quantize the weights as they will be after folding the BN in.
    std = torch.sqrt(bn.running_var + bn.eps)
    factor = (bn.weight if bn.affine else torch.ones_like(std)) / std
    # a pruned gamma (0) would divide 0 by 0 below and make every gradient NaN: that channel
    # keeps its own weights, so the BN sees its real output (and multiplies it by 0)
    factor = torch.where(factor == 0, torch.ones_like(factor), factor)
    shape = [-1] + [1] * (self.weight.dim() - 1)
    folded = self.weight_fake_quant(self.weight * factor.reshape(shape))
    out = base._conv_forward(self, x, folded, None) / factor.reshape([1, -1] + [1] * (self.weight.dim() - 2))
    if self.bias is not None:
        out = out + self.bias.reshape([1, -1] + [1] * (self.weight.dim() - 2))
    return out


class QATConv1d(_QATMixin, nn.Conv1d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _conv_forward(self, x, nn.Conv1d)


class QATConv2d(_QATMixin, nn.Conv2d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _conv_forward(self, x, nn.Conv2d)


class QATConv3d(_QATMixin, nn.Conv3d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _conv_forward(self, x, nn.Conv3d)


_QAT_OF = {nn.Linear: QATLinear, nn.Conv1d: QATConv1d, nn.Conv2d: QATConv2d, nn.Conv3d: QATConv3d}


def qat_modules(model: nn.Module) -> list[nn.Module]:
    """The modules that carry fake quantization."""
    return [m for m in model.modules() if isinstance(m, FakeQuantize)]


def _convert(module: nn.Module, bn: nn.Module | None) -> nn.Module:
    """Make ``module`` its QAT twin in place: same object, same parameters, new class."""
    module.__class__ = _QAT_OF[type(module)]
    module._qat_init(bn)  # type: ignore[attr-defined]
    return module


def _targets(model: nn.Module, modifier: Modifier) -> list[tuple[str, nn.Module]]:
    submodules = [s.removeprefix("module.") for s in modifier.args.get("submodules") or () if s != ""]
    ignore = set(modifier.args.get("ignore") or ())
    found = []
    for name, module in model.named_modules():
        if type(module) not in _QAT_OF:
            continue
        if submodules and not any(name == s or name.startswith(s + ".") for s in submodules):
            continue
        if name in ignore or type(module).__name__ in ignore or any(name.startswith(i + ".") for i in ignore):
            continue
        found.append((name, module))
    return found


def nothing_to_quantize(model: nn.Module, modifiers: Any) -> Iterator[Finding]:
    """P007, an error here, for each quantization modifier that would find no Linear or Conv
    layer of ``model`` to quantize at its start (:func:`recipe_spec.runtime.structure.nothing_to_quantize_findings`).
    Refused at ``modify()``, not at its start step."""
    return nothing_to_quantize_findings(modifiers, lambda m: [name for name, _ in _targets(model, m)])


def _bn_after(model: nn.Module, conv_name: str) -> nn.Module | None:
    """The BatchNorm registered right after ``conv_name`` in the same parent, if any."""
    parent_name, _, attr = conv_name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    names = list(parent._modules)
    i = names.index(attr)
    if i + 1 < len(names):
        nxt = parent._modules[names[i + 1]]
        if isinstance(nxt, _BNS):
            return nxt
    return None


class QuantizationState:
    """What QAT changed in a model, so it can be saved and applied again on resume."""

    def __init__(self, modifier: int, converted: list[str], folded: dict[str, str]):
        self.modifier, self.converted, self.folded = modifier, converted, folded
        self.model: nn.Module | None = None
        self.observers_disabled = False
        self.bn_frozen = False

    @classmethod
    def start(cls, model: nn.Module, modifier: Modifier, optimizer: Any = None, index: int | None = None) -> QuantizationState:
        fuse = modifier.args.get("model_fuse_fn_name") not in ("no_fuse",)
        converted, folded = [], {}
        for name, module in _targets(model, modifier):
            bn = _bn_after(model, name) if fuse and isinstance(module, _CONVS) else None
            _convert(module, bn)
            converted.append(name)
            if bn is not None:
                folded[name] = next(n for n, m in model.named_modules() if m is bn)
        if not converted:
            raise ValueError(
                f"QuantizationModifier (line {modifier.span.line}) found no Linear or Conv layer to "
                "quantize (check submodules / ignore)"
            )
        state = cls(index if index is not None else -1, converted, folded)
        state.model = model
        return state

    def disable_observers(self) -> None:
        assert self.model is not None
        for fq in qat_modules(self.model):
            fq.observer_enabled.fill_(False)
        self.observers_disabled = True

    def freeze_bn_stats(self) -> None:
        assert self.model is not None
        for bn_name in self.folded.values():
            bn = self.model.get_submodule(bn_name)
            bn.momentum = 0.0  # running statistics stay as they are
            bn.track_running_stats = True
        self.bn_frozen = True

    def state(self) -> dict[str, Any]:
        return {
            "converted": list(self.converted),
            "folded": dict(self.folded),
            "observers_disabled": self.observers_disabled,
            "bn_frozen": self.bn_frozen,
        }

    @classmethod
    def restore(cls, model: nn.Module, recipe: Recipe, saved: Mapping[str, Any], optimizer: Any = None) -> QuantizationState:
        """Apply the saved structure again to a fresh model (resume)."""
        folded = dict(saved.get("folded", {}))
        for name in saved["converted"]:
            module = model.get_submodule(name)
            bn = model.get_submodule(folded[name]) if name in folded else None
            if type(module) in _QAT_OF:
                _convert(module, bn)
        state = cls(-1, list(saved["converted"]), folded)
        state.model = model
        if saved.get("observers_disabled"):
            state.disable_observers()
        if saved.get("bn_frozen"):
            state.freeze_bn_stats()
        return state
