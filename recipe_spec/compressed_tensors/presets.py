"""compressed-tensors' preset schemes, once: each name with the compressed-tensors releases
that have it (read at the tags v0.4.0, 0.5.0 ... 0.19.0) and, for the presets on an int or FP8
grid with tensor, channel or group weight scales, and the FP4 and MX ones (NVFP4, MXFP4,
MXFP8, with and without activations), its contents as 0.19's constructor gives them (``None``:
a grid recipe-spec does not run: block scales, or one that quantizes nothing). Names are
matched case-insensitively.

>>> PRESETS["W4A16"].scheme["weights"]["group_size"], PRESETS["FP8_BLOCK"].runs, PRESETS["MXFP4"].ct
(128, False, '>=0.13')
>>> PRESETS["W4A16"].group_size, PRESETS["W8A8"].group_size, PRESETS["NVFP4"].group_size
(128, None, 16)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Preset", "PRESETS", "PRESET_RANGES", "PRESET_SCHEMES", "UNSUPPORTED_PRESETS"]


@dataclass(frozen=True)
class Preset:
    """One preset: ``ct``, the compressed-tensors releases that have it (a range, ``""``: every
    one); ``scheme``, its ``QuantizationScheme`` fields without ``targets`` (None where
    recipe-spec does not run its grid); ``weight_group``, for such a preset, the number of
    weight columns that share a scale (compressed-tensors 0.19 ``quant_scheme.py``: NVFP4's
    ``tensor_group`` of 16, the MX presets' ``group`` of 32), which lint checks against
    ``in_features``."""

    ct: str
    scheme: Mapping[str, Any] | None = None
    weight_group: int | None = None

    @property
    def runs(self) -> bool:
        """Whether recipe-spec quantizes on its grid."""
        return self.scheme is not None

    @property
    def group_size(self) -> int | None:
        """The weights' group size (None: no groups)."""
        if self.scheme is not None:
            weights = self.scheme.get("weights") or {}
            return weights.get("group_size") if weights.get("strategy") in ("group", "tensor_group") else None
        return self.weight_group


def _int_wnam(weight_bits: int, act_bits: int = 16) -> dict[str, Any]:
    scheme: dict[str, Any] = {"weights": {"num_bits": weight_bits, "type": "int", "strategy": "group",
                                          "group_size": 128, "symmetric": True, "dynamic": False}}
    if act_bits < 16:
        scheme["input_activations"] = {"num_bits": act_bits, "type": "int", "strategy": "token",
                                       "symmetric": True, "dynamic": True}
    return scheme


_W8A8 = {"weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True, "dynamic": False},
         "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "symmetric": True,
                               "dynamic": True}}


def _float_weights(bits: int, strategy: str, group_size: int, scale_dtype: str,
                   inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The FP4 / MX schemes: float weights, group scales rounded to ``scale_dtype``; ``inputs``:
    the input activations' own fields over the weights' (None: weight-only)."""
    weights = {"num_bits": bits, "type": "float", "strategy": strategy, "group_size": group_size,
               "symmetric": True, "dynamic": False, "scale_dtype": scale_dtype}
    if scale_dtype == "torch.uint8":  # the MX presets name it; NVFP4's comes from the validator (FP8)
        weights["zp_dtype"] = scale_dtype
    scheme: dict[str, Any] = {"weights": weights}
    if inputs is not None:
        scheme["input_activations"] = {**weights, **inputs}
    return scheme


_W2_W7 = ("W2A4", "W2A8", "W2A16", "W3A4", "W3A8", "W3A16", "W4A4", "W5A8", "W5A16", "W6A8",
          "W6A16", "W7A8", "W7A16")

#: Every preset name of any compressed-tensors release.
PRESETS: dict[str, Preset] = {
    "W8A8": Preset("", _W8A8),
    "W4A16": Preset("", _int_wnam(4)),
    "W8A16": Preset(">=0.5", _int_wnam(8)),
    "W4A8": Preset(">=0.5", _int_wnam(4, 8)),
    "FP8": Preset(">=0.5", {
        "weights": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True, "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True,
                              "dynamic": False, "observer": "static_minmax"}}),
    "FP8_DYNAMIC": Preset(">=0.5", {
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
                              "dynamic": True}}),
    "UNQUANTIZED": Preset(">=0.6"),
    "INT8": Preset(">=0.7", _W8A8),
    "W4A16_ASYM": Preset(">=0.10", {"weights": {"num_bits": 4, "type": "int", "strategy": "group",
                                                "group_size": 128, "symmetric": False, "dynamic": False}}),
    "NVFP4A16": Preset(">=0.10", _float_weights(4, "tensor_group", 16, "torch.float8_e4m3fn")),
    "NVFP4": Preset(">=0.10", _float_weights(4, "tensor_group", 16, "torch.float8_e4m3fn",
                                              {"dynamic": "local", "observer": "static_minmax"})),
    "FP8_BLOCK": Preset(">=0.11"),
    "MXFP4A16": Preset(">=0.13", _float_weights(4, "group", 32, "torch.uint8")),
    "MXFP4": Preset(">=0.13", _float_weights(4, "group", 32, "torch.uint8", {"dynamic": True})),
    "W4AFP8": Preset(">=0.14", {
        "weights": _int_wnam(4)["weights"],
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
                              "dynamic": True, "observer": None}}),
    "MXFP8A16": Preset(">=0.15", _float_weights(8, "group", 32, "torch.uint8")),
    "MXFP8": Preset(">=0.15", _float_weights(8, "group", 32, "torch.uint8", {"dynamic": True})),
    **{name: Preset(">=0.18", _int_wnam(int(name[1]), int(name[3:]))) for name in _W2_W7},
}

#: Preset name -> the compressed-tensors releases that have it.
PRESET_RANGES: dict[str, str] = {name: p.ct for name, p in PRESETS.items()}
#: The presets recipe-spec quantizes on, with their contents.
PRESET_SCHEMES: dict[str, Mapping[str, Any]] = {name: p.scheme for name, p in PRESETS.items()
                                                if p.scheme is not None}
#: The presets on grids recipe-spec does not have (block scales) or that quantize nothing.
UNSUPPORTED_PRESETS = frozenset(name for name, p in PRESETS.items() if p.scheme is None)
