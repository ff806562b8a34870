"""How a scheme quantizes a layer's input activations: compressed-tensors' ``QuantizationArgs``
(0.19) for ``input_activations``, the part a deployed layer's call depends on.

A weight's grid is :class:`~.args.QuantArgs`; this is the other half of a scheme: whether the
layer quantizes its inputs when it runs, on which grid (bits, int or FP8, symmetric), with one
scale per token computed at run time (``dynamic``) or one calibrated scale per tensor (static).
None means the inputs stay in float (``W4A16``, ``W8A16``: weight-only).

>>> preset_activations("W8A8")
ActivationArgs(num_bits=8, type='int', strategy='token', symmetric=True, dynamic=True, group_size=None)
>>> preset_activations("W4A16") is None
True
>>> ActivationArgs.from_config({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}).describe()
'float8 per tensor static'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ActivationArgs", "PRESET_ACTIVATIONS", "preset_activations", "ACTIVATION_STRATEGIES"]

#: The activation strategies compressed-tensors 0.19 names: one scale per token (row of the
#: flattened input), per tensor, per group of columns, or per tensor and group (NVFP4).
ACTIVATION_STRATEGIES = ("token", "tensor", "group", "tensor_group")
_IGNORED = frozenset({"observer", "observer_kwargs", "actorder", "block_structure", "scale_dtype", "zp_dtype"})


@dataclass(frozen=True)
class ActivationArgs:
    """A scheme's ``input_activations``: ``num_bits``, ``type`` (``"int"`` or ``"float"``),
    ``strategy`` (:data:`ACTIVATION_STRATEGIES`), ``symmetric``, ``dynamic`` (scales computed
    at run time; ``"local"``, NVFP4's, counts as dynamic) and ``group_size``."""

    num_bits: int = 8
    type: str = "int"
    strategy: str = "token"
    symmetric: bool = True
    dynamic: bool = True
    group_size: int | None = None

    def __post_init__(self) -> None:
        if self.type not in ("int", "float"):
            raise ValueError(f"activation type must be 'int' or 'float', got {self.type!r}")
        if self.strategy not in ACTIVATION_STRATEGIES:
            raise ValueError(f"activation strategy must be one of {', '.join(ACTIVATION_STRATEGIES)}, "
                             f"got {self.strategy!r}")

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> ActivationArgs | None:
        """Read a recipe's ``input_activations:`` mapping (None: weight-only), with
        compressed-tensors' defaults (8 bits, int, symmetric, static; the strategy ``tensor``
        unless ``group_size`` is given)."""
        if config is None:
            return None
        unknown = sorted(set(config) - {"num_bits", "type", "strategy", "symmetric", "dynamic", "group_size"}
                         - _IGNORED)
        if unknown:
            raise ValueError(f"unknown input_activations argument(s) {', '.join(unknown)}")
        group_size = config.get("group_size")
        strategy = config.get("strategy") or ("tensor" if group_size is None else "group")
        dynamic = config.get("dynamic", False)
        return cls(num_bits=int(config.get("num_bits", 8)), type=str(config.get("type", "int")),
                   strategy=str(strategy), symmetric=bool(config.get("symmetric", True)),
                   dynamic=bool(dynamic), group_size=group_size)

    def describe(self) -> str:
        """``int8 per token dynamic``, ``float8 per tensor static``, ..."""
        kind = f"{self.type}{self.num_bits}"
        where = {"token": "per token", "tensor": "per tensor"}.get(self.strategy, self.strategy)
        sym = "" if self.symmetric else " asymmetric"
        return f"{kind} {where}{sym} {'dynamic' if self.dynamic else 'static'}"


_INT8_TOKEN = ActivationArgs(8, "int", "token", True, True)
_INT4_TOKEN = ActivationArgs(4, "int", "token", True, True)
_FP8_TOKEN = ActivationArgs(8, "float", "token", True, True)

#: The input activations of compressed-tensors 0.19's preset schemes (those of
#: :data:`~.args.PRESET_WEIGHTS`): None where the scheme is weight-only.
PRESET_ACTIVATIONS: dict[str, ActivationArgs | None] = {
    **{f"W{bits}A{act}": {4: _INT4_TOKEN, 8: _INT8_TOKEN, 16: None}[act]
       for bits, acts in ((2, (4, 8, 16)), (3, (4, 8, 16)), (4, (4, 8, 16)), (5, (8, 16)), (6, (8, 16)),
                          (7, (8, 16)), (8, (16,))) for act in acts},
    "W4A16_ASYM": None,
    "W4AFP8": _FP8_TOKEN,
    "W8A8": _INT8_TOKEN,
    "INT8": _INT8_TOKEN,
    "FP8": ActivationArgs(8, "float", "tensor", True, False),
    "FP8_DYNAMIC": _FP8_TOKEN,
}


def preset_activations(name: str) -> ActivationArgs | None:
    """The input activations of a preset scheme, by its name (None: weight-only)."""
    try:
        return PRESET_ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown preset scheme {name!r}: one of {', '.join(PRESET_ACTIVATIONS)}") from None
