"""One parameter of a model, framework-free: :class:`ParamRecord` (name, shape, layer type,
prunable flag, portable alias), the selector tokens, and Keras names made portable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..text.patterns import MAX_NAME

__all__ = ["ParamRecord", "TOKENS", "MAX_NAME", "MANIFEST_VERSION", "portable_alias"]

MANIFEST_VERSION = 1
TOKENS = ("__ALL__", "__ALL_PRUNABLE__")


@dataclass(frozen=True, slots=True)
class ParamRecord:
    """One parameter of a model, framework-free.

    ``name``: the framework's own name (PyTorch ``fc1.weight``; Keras path relative to the
    model, ``fc1/kernel``). ``alias``: the portable name (``fc1.weight``), or None when it is
    the name itself. ``layer_type``: the class of the owning layer (``Linear``, ``Dense``).
    ``prunable``: whether ``__ALL_PRUNABLE__`` selects it.
    """

    name: str
    shape: tuple[int, ...] = ()
    layer_type: str = ""
    prunable: bool = False
    alias: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The name and, if different, the alias."""
        return (self.name,) if not self.alias or self.alias == self.name else (self.name, self.alias)

    @property
    def is_bias_or_norm(self) -> bool:
        """Biases and normalisation parameters (what ``__ALL__`` adds to the prunable set)."""
        last = (self.alias or self.name).replace("/", ".").rsplit(".", 1)[-1].lower()
        norm = any(n in self.layer_type.lower() for n in ("norm", "batchnorm"))
        return last in ("bias", "beta", "running_mean", "running_var", "moving_mean", "moving_variance") or norm or len(self.shape) <= 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "shape": list(self.shape),
            "layer_type": self.layer_type,
            "prunable": self.prunable,
        }
        if self.alias and self.alias != self.name:
            out["alias"] = self.alias
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ParamRecord:
        return cls(
            str(data["name"]),
            tuple(int(d) for d in data.get("shape", ())),
            str(data.get("layer_type", "")),
            bool(data.get("prunable", False)),
            data.get("alias"),
        )


_KERAS_TO_TORCH = {
    "kernel": "weight",
    "embeddings": "weight",
    "gamma": "weight",
    "beta": "bias",
    "moving_mean": "running_mean",
    "moving_variance": "running_var",
}


def portable_alias(keras_path: str) -> str:
    """The portable (PyTorch-style) name of a Keras variable path.

    >>> portable_alias("fc1/kernel"), portable_alias("block_1/bn/moving_variance")
    ('fc1.weight', 'block_1.bn.running_var')
    """
    parts = keras_path.split("/")
    parts[-1] = _KERAS_TO_TORCH.get(parts[-1], parts[-1])
    return ".".join(parts)


