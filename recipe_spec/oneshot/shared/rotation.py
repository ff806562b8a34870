"""What a rotation modifier (QuIP, SpinQuant) asks of the calibration host: a compressed-tensors
``TransformConfig`` mapping (``config``; the groups named in ``head_dim_groups`` take the
model's attention head width, which only the model knows), and the steps llm-compressor's
SpinQuant takes before it so that the rotations leave the model's function unchanged:
``untie`` the word embeddings, ``center`` each embedding row (subtract its mean, in float64),
and fuse each normalisation's scale into the Linear layers it feeds (``norms``: pairs of a
norm's name or ``re:`` pattern and the patterns of its Linear layers, grouped per parent as
compressed-tensors' ``match_modules_set`` groups them; the norm's scale becomes ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...diagnostics.base import Diagnostic
from ...recipe.model import Modifier, Recipe
from ..settings import b001, value

__all__ = ["Rotation", "TRANSFORM_TYPES", "check_transform"]

#: The rotation kinds compressed-tensors builds.
TRANSFORM_TYPES = ("hadamard", "random-hadamard", "random-matrix")


@dataclass(frozen=True)
class Rotation:
    """One rotation modifier's work (see the module docstring)."""

    config: dict[str, Any]
    head_dim_groups: tuple[str, ...] = ()
    untie: bool = False
    center: str | None = None
    norms: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def transform_config(self, head_dim: int | None) -> dict[str, Any]:
        """The ``TransformConfig`` mapping with the model's ``head_dim`` filled in."""
        groups = {name: dict(group) for name, group in self.config["config_groups"].items()}
        for name in self.head_dim_groups:
            groups[name]["head_dim"] = head_dim
        return {**self.config, "config_groups": groups}


def check_transform(recipe: Recipe, m: Modifier, errors: list[Diagnostic]) -> None:
    """A located B001 in ``errors`` for a ``transform_type`` compressed-tensors does not build
    and a ``transform_block_size`` that is not a positive whole number (QuIP's and SpinQuant's
    shared arguments)."""
    kind = value(m, "transform_type")
    if kind not in TRANSFORM_TYPES:
        errors.append(b001(recipe, m, f"{m.type} transform_type {kind!r} is not one of {', '.join(TRANSFORM_TYPES)}",
                           "Write hadamard, random-hadamard or random-matrix.", "transform_type"))
    size = value(m, "transform_block_size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        errors.append(b001(recipe, m, f"{m.type} transform_block_size {size!r} is not a positive whole number",
                           "Write a size that divides every rotated width, or leave it out.", "transform_block_size"))
