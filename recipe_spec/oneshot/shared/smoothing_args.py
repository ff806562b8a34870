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

from ...diagnostics.base import Diagnostic
from ...quantization.args import PRESET_WEIGHTS, QuantArgs
from ...recipe.model import Modifier, Recipe
from ..awq.releases import CURRENT, AwqRelease
from ..settings import b001, strings
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
    """The weight grids one QuantizationMixin modifier attaches (llm-compressor's
    ``resolve_quantization_config``): ``scheme`` (a preset name with ``targets``, or
    ``{PRESET: targets}``) takes precedence over ``config_groups``. ``args``: the modifier's
    quantization arguments when not its own (AWQ's combined form)."""
    args = mod.args if args is None else args
    ignore = strings(args.get("ignore"))
    scheme, groups = args.get("scheme"), args.get("config_groups")
    out = []
    if scheme is not None:
        named = {str(scheme).upper(): args.get("targets", ["Linear"])} if isinstance(scheme, str) else dict(scheme)
        for name, targets in named.items():
            if str(name).upper() not in PRESET_WEIGHTS:
                raise ValueError(f"{mod.type}: scheme {name!r} is not a preset whose weight grid AWQ can search")
            out.append(WeightScheme(strings(targets), ignore, PRESET_WEIGHTS[str(name).upper()]))
        return out
    for name, group in dict(groups or {}).items():
        if not isinstance(group, Mapping):
            raise ValueError(f"{mod.type}: config group {name!r} is not a mapping")
        weights = group.get("weights")
        out.append(WeightScheme(strings(group.get("targets")), ignore,
                                None if weights is None else QuantArgs.from_config(weights)))
    return out


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
