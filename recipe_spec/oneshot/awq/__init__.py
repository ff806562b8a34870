"""AWQ (``AWQModifier``): for each mapping, per-channel scales searched over a grid of ratios
of the smooth layer's mean activations (and, with ``duo_scaling``, the balance layers' mean
weights), each candidate scored by the output error of the balance layers quantized on the
weight grid the quantization modifiers after it give them (:mod:`.search`), as llm-compressor
0.14. Settings: ``mappings``, ``duo_scaling`` (true, false or ``both``), ``n_grid``,
``offload_device`` (``cpu``: cached parent inputs kept in host memory); each default is the
catalogue's. The older forms of llm-compressor 0.5-0.10 (:mod:`.forms`, :mod:`.releases`): the
combined form runs as AWQ then a round to nearest of its own quantization arguments where the
release the run follows took it, and is refused with its rewrite elsewhere."""

from __future__ import annotations

from typing import Any

from ...diagnostics.base import Diagnostic
from ...recipe.model import Modifier, Recipe
from ...stage_dialect.catalogue_quant import smallest_grid
from ..algorithm import Algorithm, OneShotModifier, register
from ..rtn import ROUND_TO_NEAREST, read_quantizer
from ..settings import b001, refuse_unrun, strings, value
from ..shared.smoothing_args import (
    QUANTIZERS,
    SmoothingPlan,
    WeightScheme,
    read_mappings,
    weight_schemes,
)
from .forms import combined_args, older_awq_form
from .releases import CURRENT, AwqRelease, awq_release

__all__ = ["AWQ", "AWQ_ALGORITHM", "awq_plan"]


def awq_plan(recipe: Recipe, m: Modifier, errors: list[Diagnostic], release: AwqRelease = CURRENT,
             own: dict[str, Any] | None = None) -> SmoothingPlan | None:
    """The plan of AWQ entry ``m`` under ``release``; ``own``: its quantization arguments in
    the combined form (then AWQ searches with those and no later modifier's). None with a
    located B001 in ``errors`` for each argument value it cannot run."""
    ok, mappings = read_mappings(recipe, m, "awq", errors)
    if not ok:
        return None
    duo, n_grid, device = value(m, "duo_scaling"), value(m, "n_grid"), m.args.get("offload_device")
    bad = False
    if not (duo is True or duo is False or duo == "both"):
        errors.append(b001(recipe, m, f"AWQModifier duo_scaling {duo!r} is not one of true, false, 'both'",
                           "Write true, false or both.", "duo_scaling"))
        bad = True
    least = smallest_grid(duo if not bad else True, release.grid_to_one)
    if not isinstance(n_grid, int) or isinstance(n_grid, bool) or n_grid < least:
        errors.append(b001(recipe, m, f"AWQModifier n_grid {n_grid!r} gives no grid to search with duo_scaling "
                           f"{duo!r}", f"Write a whole number of at least {least}.", "n_grid"))
        bad = True
    if device is not None and str(device) != "cpu":
        errors.append(b001(recipe, m, f"AWQModifier offload_device {device!r}: recipe_spec.oneshot keeps "
                           "cached inputs where the model runs, or in host memory with 'cpu'",
                           "Write offload_device: cpu, or remove it.", "offload_device"))
        bad = True
    later: list[Modifier] = list(recipe.modifiers[recipe.modifiers.index(m) + 1:])
    schemes: list[WeightScheme] = []
    try:
        if own:  # the combined form: AWQ's own arguments, and no later modifier's
            schemes += weight_schemes(m, own)
            later = []
        for other in later:
            if other.type in QUANTIZERS:
                schemes += weight_schemes(other)
    except ValueError as exc:
        errors.append(b001(recipe, m, f"AWQModifier: {exc}", "Give the quantization modifier after AWQ "
                           "an int or FP8 weight grid (config_groups or a preset scheme)."))
        bad = True
    if bad:
        return None
    ignore = strings((own or {}).get("ignore")) if release.ignore_in_mappings else ()
    return SmoothingPlan("awq", mappings, ignore, duo_scaling=duo, n_grid=int(n_grid),
                         offload=device is not None, schemes=tuple(schemes), release=release)


class AWQ(Algorithm):
    name = "awq"
    modifiers = ("AWQModifier",)
    role = "transform"
    describe = "activation-aware scaling (AWQ): each mapping's scales searched over a grid of ratios"

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        runs = awq_release(version)
        label = "llm-compressor " + ".".join(map(str, version)) if version else "llm-compressor"
        older = older_awq_form(recipe, m, errors, runs, label)
        refuse_unrun(recipe, m, errors, skip=older)
        own = combined_args(m) if runs is not None and runs.combined else {}
        plan = awq_plan(recipe, m, errors, runs or CURRENT, own)
        if plan is None:
            return []
        out = [OneShotModifier(m.type, self.name, m, (), transform=plan)]
        if own:  # the combined form as 0.9-0.10 ran it: AWQ, then round to nearest with its arguments
            note = (f"{m.type} ({out[0].where}) in the combined form of {runs.label}: run as AWQ searching "
                    f"with its {', '.join(own)} and then a QuantizationModifier with them (round to nearest), "
                    "as that release ran it")
            out += read_quantizer(ROUND_TO_NEAREST.name, recipe, m, errors, own, "QuantizationModifier", note)
        return out

    def needs_data(self, mod: OneShotModifier) -> bool:
        return True

    def grid_passes(self, mod: OneShotModifier) -> int:
        return int(getattr(mod.transform, "n_grid", 0))


AWQ_ALGORITHM = register(AWQ())
