"""Rotations of the PyTorch calibration host (a base of :class:`~.oneshot.TorchCalibrationHost`):
a rotation modifier's work (:class:`recipe_spec.oneshot.shared.rotation.Rotation`: QuIP's,
SpinQuant's) done as llm-compressor 0.14 does it. First the steps that keep the model's function
(SpinQuant's): the word embeddings untied, each embedding row centred, each normalisation's
scale fused into the Linear layers it feeds (in float64, the norm's scale set to ones); then the
compressed-tensors ``TransformConfig`` applied with compressed-tensors' own
``apply_transform_config``: each weight-side rotation fused into the weight, each
activation-side one a submodule its layer calls (an input rotation as a forward pre-hook that
runs first, so calibration observes rotated inputs), the config kept on the model, which the
compressed save writes as ``transform_config``.

:meth:`Rotations.check_rotations` refuses, before any weight changes, what would fail half way:
a target that is neither a Linear nor an Embedding, a block size that does not divide a rotated
width, a Hadamard size compressed-tensors cannot build, a norm mapping that matches nothing.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["Rotations"]

_PRECISION = torch.float64


@functools.lru_cache(maxsize=64)
def _buildable(kind: str, size: int) -> str | None:
    """Why compressed-tensors cannot build a ``kind`` rotation of ``size``, or None."""
    from compressed_tensors.transform.utils.hadamard import (
        deterministic_hadamard_matrix,
        random_hadamard_matrix,
    )

    try:
        if kind == "hadamard":
            deterministic_hadamard_matrix(size, torch.float64)
        elif kind == "random-hadamard":
            random_hadamard_matrix(size, torch.float64, gen=torch.Generator())
    except (ValueError, RuntimeError, AssertionError) as exc:
        return str(exc)
    return None


def _value(x: Any) -> str:
    return str(getattr(x, "value", x))


class Rotations:
    """The host's rotations (see the module docstring); ``model``: the host's model."""

    model: torch.nn.Module

    def _config(self, rotation: Any) -> Any:
        from compressed_tensors.transform import TransformConfig
        from compressed_tensors.utils import get_head_dim

        head_dim = get_head_dim(self.model.config) if rotation.head_dim_groups else None
        try:
            return TransformConfig.model_validate(rotation.transform_config(head_dim))
        except ValueError as exc:  # pydantic's ValidationError is one
            raise ValueError(f"compressed-tensors refuses the transform config: {exc}") from None

    def check_rotations(self, rotation: Any) -> None:
        """Raise a ValueError naming the layer and the fix for what ``rotation`` cannot do."""
        from compressed_tensors.transform.utils.matrix import get_transform_size
        from compressed_tensors.utils import match_modules_set, match_named_modules

        if rotation.head_dim_groups and not hasattr(self.model, "config"):
            raise ValueError("the model has no config to read its attention head width from (a Hugging Face model)")
        parsed = self._config(rotation)
        for scheme in parsed.config_groups.values():
            for args in scheme.apply:
                for name, module in match_named_modules(self.model, args.targets, args.ignore):
                    if _value(args.location) in ("q_attn", "k_cache"):  # per head, inside attention
                        why = _buildable(_value(scheme.type), scheme.head_dim)
                        if why is not None:
                            raise ValueError(f"{name}: compressed-tensors cannot build a {_value(scheme.type)} "
                                             f"rotation of the head width {scheme.head_dim} ({why}); use "
                                             "transform_type random-matrix, or leave R3 out")
                        continue
                    if not isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                        raise ValueError(f"{name} is a {type(module).__name__}: recipe_spec.oneshot rotates Linear "
                                         "and Embedding layers; narrow the targets or add it to ignore")
                    width = get_transform_size(module, args.location, None)
                    size = scheme.head_dim or width
                    if width % size:
                        raise ValueError(f"{name}: the rotation's block of {size} does not divide its width {width}; "
                                         "pick a transform_block_size that divides every rotated width")
                    why = _buildable(_value(scheme.type), size)
                    if why is not None:
                        raise ValueError(f"{name}: compressed-tensors cannot build a {_value(scheme.type)} rotation "
                                         f"of size {size} ({why}); use transform_type random-matrix, or a "
                                         "transform_block_size it can build (a power of two)")
        for norm, linears in rotation.norms:
            if not any(True for _ in match_modules_set(self.model, (norm, *linears))):
                raise ValueError(f"no {norm} feeding {', '.join(linears)} in this model: the norm fusing knows "
                                 "Llama-style models (input_layernorm, post_attention_layernorm, model.norm)")

    @torch.no_grad()
    def apply_rotations(self, rotation: Any) -> None:
        """Do ``rotation``'s work on the model (see the module docstring)."""
        from compressed_tensors.transform import apply_transform_config
        from compressed_tensors.utils import match_modules_set, match_named_modules

        config = self._config(rotation)
        if rotation.untie or self._rotates_embeddings(config):
            self._untie()
        if rotation.center is not None:
            for _, embedding in match_named_modules(self.model, [rotation.center]):
                w = embedding.weight
                w.data = (w.data.to(_PRECISION) - w.data.to(_PRECISION).mean(dim=-1, keepdim=True)).to(w.dtype)
        for norm_name, linears in rotation.norms:
            for norm, *layers in match_modules_set(self.model, (norm_name, *linears)):
                (norm,) = norm
                for linear in (m for group in layers for m in group):
                    w = linear.weight
                    w.data = (w.data.to(_PRECISION) * norm.weight.data.to(_PRECISION)).to(w.dtype)
                norm.weight.data = torch.ones_like(norm.weight.data)
        apply_transform_config(self.model, config)

    def _rotates_embeddings(self, config: Any) -> bool:
        """Whether ``config`` rotates the word embeddings (llm-compressor's ``targets_embeddings``:
        QuIP then unties them, as SpinQuant always does)."""
        from compressed_tensors.utils import match_named_modules

        embeddings = {id(m) for m in self._embeddings()}
        return any(id(module) in embeddings for scheme in config.config_groups.values() for args in scheme.apply
                   for _, module in match_named_modules(self.model, args.targets, args.ignore))

    def _untie(self) -> None:
        """The input and output word embeddings as two parameters, the config saying so
        (llm-compressor's ``untie_word_embeddings``; the host's ``own_weight``)."""
        for module in self._embeddings():
            self.own_weight(module)  # type: ignore[attr-defined]

    def _embeddings(self) -> list[torch.nn.Module]:
        """The model's input and output word embeddings (those it names)."""
        found = (getattr(self.model, name, lambda: None)() for name in ("get_input_embeddings", "get_output_embeddings"))
        return [m for m in found if m is not None]
