"""How one weight is quantized: compressed-tensors' ``QuantizationArgs`` (0.19), the part of it a
weight's grid depends on.

``strategy`` is inferred as compressed-tensors infers it: no strategy and no ``group_size`` is
``tensor``, a positive ``group_size`` is ``group``, ``group_size: -1`` is ``channel``.

>>> QuantArgs.from_config({"num_bits": 4, "group_size": 128}).strategy
'group'
>>> preset_weights("W4A16")
QuantArgs(num_bits=4, type='int', symmetric=True, strategy='group', group_size=128, scale_dtype=None)
>>> QuantArgs(num_bits=8).q_range
(-128, 127)
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..compressed_tensors.presets import PRESET_SCHEMES

__all__ = ["QuantArgs", "PRESET_WEIGHTS", "preset_weights", "STRATEGIES", "SCALE_DTYPES", "FP8_E4M3_MAX",
           "FP4_E2M1_MAX"]

#: The weight strategies the grid supports: one scale per tensor, per output row, per output
#: row and group of ``group_size`` consecutive input columns, or per group and a global scale
#: per tensor (``tensor_group``: NVFP4).
STRATEGIES = ("tensor", "channel", "group", "tensor_group")
#: The dtypes scales are rounded to (compressed-tensors' ``scale_dtype``): ``float8_e4m3fn``
#: (NVFP4's group scales) and ``uint8``, the E8M0 exponent of the MX formats (group 32).
SCALE_DTYPES = ("float8_e4m3fn", "uint8")
#: The largest finite magnitude of ``float8_e4m3fn``.
FP8_E4M3_MAX = 448.0
#: The largest magnitude of FP4 ``e2m1``.
FP4_E2M1_MAX = 6.0
#: compressed-tensors fields that say nothing about a weight's grid, accepted and not read.
_IGNORED = frozenset({"dynamic", "actorder", "observer", "observer_kwargs", "block_structure", "zp_dtype"})


@dataclass(frozen=True)
class QuantArgs:
    """One weight's quantization: ``num_bits`` and ``type`` (``"int"``: ``num_bits`` from 2 to
    8; ``"float"``: 8, FP8 e4m3, or 4, FP4 e2m1), ``symmetric`` (float grids are symmetric
    only), ``strategy`` (:data:`STRATEGIES`), ``group_size`` (``group`` and ``tensor_group``)
    and ``scale_dtype`` (:data:`SCALE_DTYPES`, None: the scales stay in the weight's float
    dtype; ``uint8``, the MX formats' E8M0 exponents, needs a float grid with groups of 32)."""

    num_bits: int = 8
    type: str = "int"
    symmetric: bool = True
    strategy: str = "tensor"
    group_size: int | None = None
    scale_dtype: str | None = None

    def __post_init__(self) -> None:
        if self.type not in ("int", "float"):
            raise ValueError(f"quantization type must be 'int' or 'float', got {self.type!r}")
        if not _whole(self.num_bits) or (self.type == "int" and not 2 <= self.num_bits <= 8):
            raise ValueError(f"an int grid takes num_bits from 2 to 8, got {self.num_bits!r}")
        if self.type == "float" and self.num_bits not in (4, 8):
            raise ValueError(f"a float grid is FP8 (e4m3, num_bits 8) or FP4 (e2m1, num_bits 4), got num_bits "
                             f"{self.num_bits!r}")
        if self.type == "float" and not self.symmetric:
            raise ValueError(f"an FP{self.num_bits} grid is symmetric: set symmetric: true")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"weight strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.strategy in ("group", "tensor_group"):
            if self.group_size is None or not _whole(self.group_size) or self.group_size < 1:
                raise ValueError(f"strategy {self.strategy!r} needs a positive group_size, got {self.group_size!r}")
        elif self.group_size is not None:
            raise ValueError(f"group_size {self.group_size} needs strategy 'group' or 'tensor_group', not {self.strategy!r}")
        if self.strategy == "tensor_group" and (self.type, self.num_bits) != ("float", 4):
            raise ValueError("strategy 'tensor_group' (a global scale and group scales) is FP4's: set type: float "
                             "and num_bits: 4")
        if self.scale_dtype is not None and self.scale_dtype not in SCALE_DTYPES:
            raise ValueError(f"scale_dtype must be one of {', '.join(SCALE_DTYPES)} or left out, got "
                             f"{self.scale_dtype!r}")
        if self.scale_dtype == "uint8" and not self.mx:
            raise ValueError("scale_dtype uint8 is the MX formats' E8M0 scale: it needs type float (num_bits 4 or "
                             "8), strategy 'group' and group_size 32")

    @property
    def mx(self) -> bool:
        """Whether the scales are MX's E8M0 powers of two (compressed-tensors'
        ``should_generate_mx_scales``: a float grid, groups of 32, ``scale_dtype: uint8``)."""
        return (self.type == "float" and self.strategy == "group" and self.group_size == 32
                and self.scale_dtype == "uint8")

    @property
    def q_range(self) -> tuple[int, int] | tuple[float, float]:
        """``(qmin, qmax)``: ``(-2^(b-1), 2^(b-1) - 1)`` for int, ``(-448.0, 448.0)`` for FP8,
        ``(-6.0, 6.0)`` for FP4."""
        if self.type == "float":
            top = FP8_E4M3_MAX if self.num_bits == 8 else FP4_E2M1_MAX
            return -top, top
        half = 1 << (self.num_bits - 1)
        return -half, half - 1

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> QuantArgs:
        """Read a recipe's ``weights:`` mapping (compressed-tensors' field names and defaults:
        8 bits, int, symmetric; the strategy inferred from ``group_size``)."""
        unknown = sorted(set(config) - {"num_bits", "type", "symmetric", "strategy", "group_size", "scale_dtype"}
                         - _IGNORED)
        if unknown:
            raise ValueError(f"unknown quantization argument(s) {', '.join(unknown)}")
        strategy, group_size = config.get("strategy"), config.get("group_size")
        if group_size == -1:
            if strategy not in (None, "channel"):
                raise ValueError(f"group_size -1 means strategy 'channel', not {strategy!r}")
            strategy, group_size = "channel", None
        if strategy is None:
            strategy = "tensor" if group_size is None else "group"
        scale_dtype = config.get("scale_dtype")
        if isinstance(scale_dtype, str):  # compressed-tensors writes torch's name: "torch.float8_e4m3fn"
            scale_dtype = scale_dtype.removeprefix("torch.")
        return cls(num_bits=config.get("num_bits", 8), type=str(config.get("type", "int")),
                   symmetric=bool(config.get("symmetric", True)), strategy=str(strategy),
                   group_size=group_size, scale_dtype=scale_dtype)


def _whole(x: object) -> bool:
    """A whole number, not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


#: The weights of compressed-tensors' preset schemes (``scheme: W4A16`` ...; 0.19's
#: ``PRESET_SCHEMES``), those recipe-spec runs (not the block scales, nor FP4 activations), read from :data:`recipe_spec.compressed_tensors.presets.PRESET_SCHEMES`; their activation
#: halves are :data:`recipe_spec.compressed_tensors.config.PRESET_ACTIVATIONS`.
PRESET_WEIGHTS: dict[str, QuantArgs] = {name: QuantArgs.from_config(scheme["weights"])
                                        for name, scheme in PRESET_SCHEMES.items()}


def preset_weights(name: str) -> QuantArgs:
    """The weight arguments of a preset scheme, by its name (upper case, as in a recipe)."""
    try:
        return PRESET_WEIGHTS[name]
    except KeyError:
        raise ValueError(f"unknown preset scheme {name!r}: one of {', '.join(PRESET_WEIGHTS)}") from None
