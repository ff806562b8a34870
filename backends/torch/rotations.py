"""Rotations of the PyTorch calibration host (a base of :class:`~.oneshot.TorchCalibrationHost`):
a compressed-tensors ``TransformConfig`` (QuIP's, :mod:`recipe_spec.oneshot.quip`) applied with
compressed-tensors' own ``apply_transform_config``, as llm-compressor 0.14 applies it: each
weight-side rotation fused into the weight, each activation-side one a submodule its layer calls
(an input rotation as a forward pre-hook that runs first, so calibration observes rotated
inputs), the config kept on the model, which the compressed save writes as ``transform_config``.

:meth:`Rotations.check_rotations` refuses, before any weight changes, what would fail half way:
a target that is not a Linear, a block size that does not divide a rotated width, a Hadamard
size compressed-tensors cannot build.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["Rotations"]


@functools.lru_cache(maxsize=64)
def _buildable(kind: str, size: int) -> str | None:
    """Why compressed-tensors cannot build a ``kind`` rotation of ``size``, or None."""
    from compressed_tensors.transform.utils.hadamard import deterministic_hadamard_matrix, random_hadamard_matrix

    try:
        if kind == "hadamard":
            deterministic_hadamard_matrix(size, torch.float64)
        elif kind == "random-hadamard":
            random_hadamard_matrix(size, torch.float64, gen=torch.Generator())
    except (ValueError, RuntimeError, AssertionError) as exc:
        return str(exc)
    return None


class Rotations:
    """The host's rotations (see the module docstring); ``model``: the host's model."""

    model: torch.nn.Module

    def _transform_config(self, config: Mapping[str, Any]) -> Any:
        from compressed_tensors.transform import TransformConfig

        try:
            return TransformConfig.model_validate(dict(config))
        except ValueError as exc:  # pydantic's ValidationError is one
            raise ValueError(f"compressed-tensors refuses the transform config: {exc}") from None

    def check_rotations(self, config: Mapping[str, Any]) -> None:
        """Raise a ValueError naming the layer and the fix for what ``config`` cannot rotate."""
        from compressed_tensors.utils import match_named_modules

        parsed = self._transform_config(config)
        for scheme in parsed.config_groups.values():
            for args in scheme.apply:
                for name, module in match_named_modules(self.model, args.targets, args.ignore):
                    if not isinstance(module, torch.nn.Linear):
                        raise ValueError(f"{name} is a {type(module).__name__}: recipe_spec.oneshot rotates Linear "
                                         "layers; narrow targets or add it to ignore")
                    location = str(getattr(args.location, "value", args.location))
                    width = module.in_features if location in ("input", "weight_input") else module.out_features
                    size = scheme.head_dim or width
                    if width % size:
                        raise ValueError(f"{name}: transform_block_size {size} does not divide its width {width}; "
                                         "pick a block size that divides every rotated width")
                    why = _buildable(str(getattr(scheme.type, "value", scheme.type)), size)
                    if why is not None:
                        raise ValueError(f"{name}: compressed-tensors cannot build a {scheme.type} rotation of "
                                         f"size {size} ({why}); use transform_type random-hadamard or "
                                         "random-matrix, or a transform_block_size it can build (a power of two)")

    def apply_rotations(self, config: Mapping[str, Any]) -> None:
        """Rotate the model as ``config`` says (compressed-tensors' ``apply_transform_config``)."""
        from compressed_tensors.transform import apply_transform_config

        apply_transform_config(self.model, self._transform_config(config))
