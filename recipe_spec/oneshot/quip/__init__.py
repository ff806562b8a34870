"""QuIP (``QuIPModifier``): rotations of the targets' inputs (``v``) and outputs (``u``), as
llm-compressor 0.14 applies them: a compressed-tensors ``TransformConfig`` (one scheme per
side, each a rotation fused into the weight, ``weight_input`` / ``weight_output``, and its
inverse applied to the activations while the model runs, ``input`` / ``output``), built from
the modifier's arguments (``transform_type``: ``hadamard``, ``random-hadamard`` or
``random-matrix``; ``transform_block_size``: the rotation's block, default each layer's width;
``precision``; ``targets``, ``ignore``) or given whole as ``transform_config``. It needs no
data; the host applies it when the modifier's turn comes, before the modifiers after it
(quantization) read the rotated weights. ``randomize`` and ``learnable`` are refused, located,
as llm-compressor 0.14 refuses them (NotImplementedError).

>>> quip_config({"transform_type": "hadamard"})["config_groups"]["v"]["apply"][1]["location"]
'weight_input'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...diagnostics.base import Diagnostic
from ...recipe.model import Modifier, Recipe
from ...text.frozen import thaw
from ..algorithm import Algorithm, OneShotModifier, register
from ..settings import b001, refuse_unrun, strings, value
from ..shared.rotation import Rotation, check_transform

__all__ = ["QuIP", "QUIP", "quip_config"]

def _scheme(args: Mapping[str, Any], side: str) -> dict[str, Any]:
    """One side's scheme: the rotation fused into the weight and its inverse online (``v``:
    inputs; ``u``: outputs), as llm-compressor's ``_create_v_scheme`` / ``_create_u_scheme``."""
    targets = list(strings(value(args, "targets", "QuIPModifier")))
    ignore = list(strings(value(args, "ignore", "QuIPModifier")))
    if side == "v":
        apply = [{"targets": targets, "location": "input", "ignore": ignore},
                 {"targets": targets, "location": "weight_input", "inverse": True, "ignore": ignore}]
    else:
        apply = [{"targets": targets, "location": "weight_output", "ignore": ignore},
                 {"targets": targets, "location": "output", "inverse": True, "ignore": ignore}]
    return {"type": value(args, "transform_type", "QuIPModifier"),
            "head_dim": value(args, "transform_block_size", "QuIPModifier"), "apply": apply,
            "randomize": False, "requires_grad": False,
            "precision": str(value(args, "precision", "QuIPModifier"))}


def quip_config(args: Mapping[str, Any]) -> dict[str, Any]:
    """The compressed-tensors ``TransformConfig`` mapping a QuIPModifier's arguments make
    (``transform_config`` as given, else one scheme per rotated side, ``v`` before ``u``)."""
    given = args.get("transform_config")
    if given:  # {} is left out, as every empty argument
        return dict(thaw(given))
    sides = [str(r).lower() for r in value(args, "rotations", "QuIPModifier")]
    return {"config_groups": {side: _scheme(args, side) for side in ("v", "u") if side in sides}}


def _read(recipe: Recipe, m: Modifier, errors: list[Diagnostic]) -> dict[str, Any] | None:
    before = len(errors)
    refuse_unrun(recipe, m, errors)
    check_transform(recipe, m, errors)
    sides = value(m, "rotations")
    if isinstance(sides, str) or not sides or any(str(r).lower() not in ("v", "u") for r in sides):
        errors.append(b001(recipe, m, f"{m.type} rotations {sides!r} is not a list of v and u",
                           "Write rotations: [v] (the inputs), [u] (the outputs) or [v, u].", "rotations"))
    config = m.args.get("transform_config")
    if config and not (isinstance(config, Mapping) and isinstance(config.get("config_groups"), Mapping)
                       and config["config_groups"]):
        errors.append(b001(recipe, m, f"{m.type} transform_config is not a TransformConfig with config_groups",
                           "Give compressed-tensors' TransformConfig fields (config_groups: {name: scheme}), or "
                           "leave it out.", "transform_config"))
    return None if len(errors) > before else quip_config(m.args)


class QuIP(Algorithm):
    name = "quip"
    modifiers = ("QuIPModifier",)
    role = "transform"
    describe = "rotations: QuIP's transforms fused into the targets' weights, their inverses applied while it runs"

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        config = _read(recipe, m, errors)
        return [] if config is None else [OneShotModifier(m.type, self.name, m, (), rotation=Rotation(config))]


QUIP = register(QuIP())
