"""What a smoothing modifier of a recipe asks ``oneshot()`` to do (:class:`SmoothingPlan`), the
parts SmoothQuant (:mod:`recipe_spec.oneshot.smoothquant`) and AWQ (:mod:`recipe_spec.oneshot.awq`)
read alike: their ``mappings`` (default: the architecture's,
:mod:`recipe_spec.oneshot.shared.mappings`) and, for AWQ, the weight grids of the quantization
modifiers after it (:func:`weight_schemes`, as llm-compressor's ``resolve_quantization_config``
reads them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...compressed_tensors.config import resolve_config
from ...diagnostics.base import Diagnostic
from ...quantization.args import QuantArgs
from ...recipe.model import Modifier, Recipe
from ...text.frozen import thaw
from ..awq.releases import CURRENT, AwqRelease
from ..settings import b001
from .mapping_match import SmoothMapping, parse_mappings

__all__ = ["QUANTIZERS", "WeightScheme", "SmoothingPlan", "read_mappings", "weight_schemes"]

#: The modifiers whose weight grids AWQ searches with (QuantizationMixin's).
QUANTIZERS = ("QuantizationModifier", "GPTQModifier")


@dataclass(frozen=True)
class WeightScheme:
    """One quantization config group as AWQ sees it: the modules it ``targets`` (names, class
    names, ``re:`` patterns), those its modifier ``ignore``s, and the weights' grid (None: the
    group leaves weights unquantized)."""

    targets: tuple[str, ...]
    ignore: tuple[str, ...]
    weights: QuantArgs | None


@dataclass(frozen=True)
class SmoothingPlan:
    """What one smoothing modifier runs. ``algorithm``: ``smoothquant``, ``log_equalization``
    or ``awq``; ``mappings``: None for the architecture's defaults; ``schemes`` (AWQ): the
    weight grids of the quantization modifiers after it, in recipe order."""

    algorithm: str
    mappings: tuple[SmoothMapping, ...] | None = None
    ignore: tuple[str, ...] = ()
    alpha: float = 0.5
    duo_scaling: bool | str = True
    n_grid: int = 20
    offload: bool = False
    schemes: tuple[WeightScheme, ...] = ()
    #: the llm-compressor release whose AWQ runs (:func:`~recipe_spec.oneshot.awq.releases.awq_release`)
    release: AwqRelease = CURRENT


def weight_schemes(mod: Modifier, args: Mapping[str, Any] | None = None) -> list[WeightScheme]:
    """The weight grids one QuantizationMixin modifier attaches, read as its run reads them
    (:func:`recipe_spec.compressed_tensors.config.resolve_config`: ``scheme``, a preset name
    with ``targets`` or ``{PRESET: targets}``, or ``config_groups``; and ``ignore``); none when
    it gives neither. ``args``: the modifier's quantization arguments when not its own (AWQ's
    combined form). A ValueError says what its run would refuse."""
    args = thaw(mod.args if args is None else args)
    if args.get("scheme") is None and not args.get("config_groups"):
        return []
    try:
        config = resolve_config(args)
    except ValueError as exc:
        raise ValueError(f"{mod.type}: {exc}") from None
    ignore = tuple(config["ignore"])
    return [WeightScheme(tuple(group["targets"]), ignore,
                         None if group["weights"] is None else QuantArgs.from_config(group["weights"]))
            for group in config["config_groups"].values()]


def read_mappings(recipe: Recipe, m: Modifier, style: str, errors: list[Diagnostic]) -> tuple[bool, Any]:
    """``(ok, mappings)``: entry ``m``'s ``mappings`` in ``style`` (``smoothquant`` pairs or
    ``awq`` records; None: the architecture's), or ``(False, None)`` with a located B001."""
    if m.args.get("mappings") is None:
        return True, None
    try:
        return True, parse_mappings(m.args["mappings"], style)
    except ValueError as exc:
        errors.append(b001(recipe, m, f"{m.type} mappings: {exc}",
                           "Write the mappings as llm-compressor documents them.", "mappings"))
        return False, None
