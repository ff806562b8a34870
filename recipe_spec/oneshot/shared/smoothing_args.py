"""What a SmoothQuantModifier, LogarithmicEqualizationModifier or AWQModifier of a recipe asks
``oneshot()`` to do (:class:`SmoothingPlan`), read from its arguments with llm-compressor
0.14's defaults; what it cannot honour is a located B001.

- SmoothQuant: ``smoothing_strength`` (alpha, 0.5), ``mappings`` (``[[balance...], smooth]``;
  default: the architecture's, :mod:`recipe_spec.oneshot.shared.mappings`), ``ignore``,
  ``algorithm`` (``smoothquant`` or ``log_equalization``; the latter is
  LogarithmicEqualizationModifier's default). ``num_calibration_steps`` and
  ``calibration_function`` are declared by llm-compressor 0.14 and never read there; a value
  other than null is refused here rather than ignored.
- AWQ: ``mappings`` (``{smooth_layer, balance_layers, activation_hook_target}``), ``duo_scaling``
  (true, false or ``both``), ``n_grid`` (20), ``offload_device`` (``cpu``: cached parent inputs
  kept in host memory; null: where the model runs). AWQ is a transform: the weight grid it
  searches for each balance layer is the one the quantization modifiers after it in the recipe
  (QuantizationModifier, GPTQModifier) give that layer (their ``config_groups``, or ``scheme``
  with ``targets``, and ``ignore``), as llm-compressor attaches their schemes before AWQ
  runs. In the combined form of llm-compressor 0.9-0.10 (``own``: its quantization
  arguments) AWQ searches with its own arguments and no other modifier's; ``release``
  (:mod:`recipe_spec.oneshot.awq.releases`) says how that release searched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...core_dialect.catalogue_quant import smallest_grid
from ...diagnostics import codes
from ...diagnostics.base import Diagnostic
from ...quantization.args import PRESET_WEIGHTS, QuantArgs
from ...recipe.model import Modifier, Recipe
from ..awq.releases import CURRENT, AwqRelease
from ..smoothquant.solve import ALGORITHMS
from .mapping_match import SmoothMapping, parse_mappings

__all__ = ["SMOOTHING_KINDS", "READ", "QUANTIZERS", "WeightScheme", "SmoothingPlan", "smoothing_plan"]

#: The one-shot kind of each smoothing modifier.
SMOOTHING_KINDS = {"SmoothQuantModifier": "smoothquant", "LogarithmicEqualizationModifier": "smoothquant",
                   "AWQModifier": "awq"}
#: The arguments each kind reads.
READ = {
    "smoothquant": {"smoothing_strength", "mappings", "ignore", "algorithm", "num_calibration_steps",
                    "calibration_function"},
    "awq": {"mappings", "duo_scaling", "n_grid", "offload_device"},
}
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


def _b001(recipe: Recipe, m: Modifier, message: str, hint: str, key: str | None = None) -> Diagnostic:
    span = m.key_span(key) if key is not None else m.span
    return codes.B001(message, hint, span).in_file(recipe.path)


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _schemes(mod: Modifier, args: Mapping[str, Any] | None = None) -> list[WeightScheme]:
    """The weight grids one QuantizationMixin modifier attaches (llm-compressor's
    ``resolve_quantization_config``): ``scheme`` (a preset name with ``targets``, or
    ``{PRESET: targets}``) takes precedence over ``config_groups``. ``args``: the modifier's
    quantization arguments when not its own (AWQ's combined form)."""
    args = mod.args if args is None else args
    ignore = _strings(args.get("ignore"))
    scheme, groups = args.get("scheme"), args.get("config_groups")
    out = []
    if scheme is not None:
        named = {str(scheme).upper(): args.get("targets", ["Linear"])} if isinstance(scheme, str) else dict(scheme)
        for name, targets in named.items():
            if str(name).upper() not in PRESET_WEIGHTS:
                raise ValueError(f"{mod.type}: scheme {name!r} is not a preset whose weight grid AWQ can search")
            out.append(WeightScheme(_strings(targets), ignore, PRESET_WEIGHTS[str(name).upper()]))
        return out
    for name, group in dict(groups or {}).items():
        if not isinstance(group, Mapping):
            raise ValueError(f"{mod.type}: config group {name!r} is not a mapping")
        weights = group.get("weights")
        out.append(WeightScheme(_strings(group.get("targets")), ignore,
                                None if weights is None else QuantArgs.from_config(weights)))
    return out


def smoothing_plan(recipe: Recipe, m: Modifier, kind: str, errors: list[Diagnostic],
                   release: AwqRelease = CURRENT, own: Mapping[str, Any] | None = None) -> SmoothingPlan | None:
    """The plan of modifier ``m`` (``kind``: ``smoothquant`` or ``awq``); None with a located
    B001 appended to ``errors`` for each argument value it cannot run. AWQ: ``release`` whose
    AWQ runs, ``own`` its quantization arguments in the combined form (see the module
    docstring)."""
    args = m.args
    style = "awq" if kind == "awq" else "smoothquant"
    mappings = None
    if args.get("mappings") is not None:
        try:
            mappings = parse_mappings(args["mappings"], style)
        except ValueError as exc:
            errors.append(_b001(recipe, m, f"{m.type} mappings: {exc}",
                                "Write the mappings as llm-compressor documents them.", "mappings"))
            return None
    if kind == "smoothquant":
        for key in ("num_calibration_steps", "calibration_function"):
            if args.get(key) is not None:
                errors.append(_b001(recipe, m, f"{m.type} argument `{key}` is not run by recipe_spec.oneshot "
                                    "(llm-compressor 0.14 declares it and never reads it)",
                                    f"Remove `{key}`: every calibration sample is used.", key))
        default = "log_equalization" if m.type == "LogarithmicEqualizationModifier" else "smoothquant"
        algorithm = str(args.get("algorithm", default))
        alpha = args.get("smoothing_strength", 0.5)
        if algorithm not in ALGORITHMS:
            errors.append(_b001(recipe, m, f"{m.type} algorithm {algorithm!r} is not run by recipe_spec.oneshot",
                                f"Write one of {', '.join(ALGORITHMS)}.", "algorithm"))
        if not _number(alpha):
            errors.append(_b001(recipe, m, f"{m.type} smoothing_strength {alpha!r} is not a number",
                                "Write a number from 0 to 1, e.g. 0.5.", "smoothing_strength"))
        if errors:
            return None
        return SmoothingPlan(algorithm, mappings, _strings(args.get("ignore")), float(alpha))
    duo = args.get("duo_scaling", True)
    n_grid = args.get("n_grid", 20)
    device = args.get("offload_device")
    bad = False
    if not (duo is True or duo is False or duo == "both"):
        errors.append(_b001(recipe, m, f"AWQModifier duo_scaling {duo!r} is not one of true, false, 'both'",
                            "Write true, false or both.", "duo_scaling"))
        bad = True
    least = smallest_grid(duo if not bad else True, release.grid_to_one)
    if not isinstance(n_grid, int) or isinstance(n_grid, bool) or n_grid < least:
        errors.append(_b001(recipe, m, f"AWQModifier n_grid {n_grid!r} gives no grid to search with duo_scaling "
                            f"{duo!r}", f"Write a whole number of at least {least}.", "n_grid"))
        bad = True
    if device is not None and str(device) != "cpu":
        errors.append(_b001(recipe, m, f"AWQModifier offload_device {device!r}: recipe_spec.oneshot keeps "
                            "cached inputs where the model runs, or in host memory with 'cpu'",
                            "Write offload_device: cpu, or remove it.", "offload_device"))
        bad = True
    later: list[Modifier] = list(recipe.modifiers[recipe.modifiers.index(m) + 1:])
    schemes: list[WeightScheme] = []
    try:
        if own:  # the combined form: AWQ's own arguments, and no later modifier's
            schemes += _schemes(m, own)
            later = []
        for other in later:
            if other.type in QUANTIZERS:
                schemes += _schemes(other)
    except ValueError as exc:
        errors.append(_b001(recipe, m, f"AWQModifier: {exc}", "Give the quantization modifier after AWQ "
                            "an int or FP8 weight grid (config_groups or a preset scheme)."))
        bad = True
    if bad:
        return None
    ignore = _strings((own or {}).get("ignore")) if release.ignore_in_mappings else ()
    return SmoothingPlan("awq", mappings, ignore, duo_scaling=duo, n_grid=int(n_grid),
                         offload=device is not None, schemes=tuple(schemes), release=release)
