"""AutoRound (``AutoRoundModifier``): each decoder block's rounding and clipping tuned by signed
gradient descent on the block's output error (auto-round's algorithm), run as llm-compressor
0.14 runs it: through auto-round itself, one block at a time, by a host that supplies
``tune_block`` (PyTorch: ``recipe_spec_torch.autoround``; capability ``quantize:autoround``).

The pipeline (:mod:`..pipeline`) hands each block its cached calls: the outputs of the block
before *as it was before tuning* (llm-compressor turns its error propagation off for AutoRound;
auto-round carries the quantized outputs itself, block to block), and records what the tuning
gives each quantized Linear under compressed-tensors' names (``weight_scale``,
``weight_zero_point``; the weight its dequantized grid value).

Arguments: the quantization modifier's (``scheme`` / ``config_groups``, ``targets``,
``ignore``), ``iters`` (0: auto-round's optimised round to nearest), ``lr`` (None: auto-round's
``1 / iters``), ``batch_size``, ``enable_torch_compile``, ``disable_opt_rtn``. Run: integer
schemes by group or channel (W4A16, W8A16, their asymmetric forms, explicit ``config_groups``),
with dynamic input activations too (W8A8: the activations are quantized as the model runs, so
the tuning is the weights'). Refused, located: static input activations and float grids
(auto-round's activation calibration and FP8/FP4 paths are not run here), ``device_ids`` (auto-round's multi-device dispatch), targets outside the decoder
blocks (llm-compressor never tunes them and saves them with untouched scales).

>>> from recipe_spec.oneshot.autoround import Tuning
>>> Tuning(iters=200, lr=None, batch_size=8, compile=False, disable_opt_rtn=False, preset="W4A16").iters
200
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...diagnostics.base import Diagnostic
from ...recipe.model import Modifier, Recipe
from ..algorithm import Algorithm, LayerReport, OneShotModifier, Prepared, Solved, register
from ..settings import b001, value
from ..shared.quant_plan import resolve_quant
from ..shared.quantize import grid_text

__all__ = ["AutoRound", "AUTOROUND", "Tuning", "tune"]


@dataclass(frozen=True)
class Tuning:
    """An ``AutoRoundModifier`` entry's tuning settings; ``preset``: the scheme's name when the
    recipe names a preset (auto-round then reads it by that name), else None."""

    iters: int
    lr: float | None
    batch_size: int
    compile: bool
    disable_opt_rtn: bool
    preset: str | None = None


def _read(recipe: Recipe, m: Modifier, errors: list[Diagnostic]) -> list[OneShotModifier]:
    before = len(errors)
    resolved = resolve_quant(recipe, m, errors)
    if resolved is None:
        return []
    plan, _ = resolved
    key = "scheme" if "scheme" in m.args else "config_groups"
    for group in plan.groups:
        w = group.weights
        if group.inputs is not None:
            errors.append(b001(recipe, m, f"{m.type}: config group {group.name} quantizes static input activations, "
                               "which auto-round calibrates on a path recipe_spec.oneshot does not run",
                               "Make the activations dynamic (W8A8), or calibrate them with a QuantizationModifier or "
                               "GPTQModifier.", key))
        elif w is None or w.type != "int" or w.strategy not in ("group", "channel"):
            errors.append(b001(recipe, m, f"{m.type} tunes integer weights by group or channel (W4A16, W8A16, W8A8, "
                               f"their asymmetric forms) on this backend; config group {group.name} is not one",
                               "Use an integer scheme, or quantize with a QuantizationModifier or GPTQModifier.", key))
    iters, batch, lr = value(m, "iters"), value(m, "batch_size"), value(m, "lr")
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 0:
        errors.append(b001(recipe, m, f"{m.type} iters {iters!r} is not a count", "Write iters: 200.", "iters"))
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        errors.append(b001(recipe, m, f"{m.type} batch_size {batch!r} is not a positive count",
                           "Write batch_size: 8.", "batch_size"))
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr <= 0):
        errors.append(b001(recipe, m, f"{m.type} lr {lr!r} is not a positive number",
                           "Write lr: 0.005, or leave it out (1 / iters).", "lr"))
    if len(errors) > before:
        return []
    scheme = m.args.get("scheme")
    settings = Tuning(int(iters), None if lr is None else float(lr), int(batch),
                      bool(value(m, "enable_torch_compile")), bool(value(m, "disable_opt_rtn")),
                      scheme.upper() if isinstance(scheme, str) else None)
    targets = tuple(dict.fromkeys(t for g in plan.groups for t in g.targets))
    return [OneShotModifier(m.type, "autoround", m, targets, plan.ignore, quant=plan, tuning=settings)]


def tune(host: Any, mod: OneShotModifier, block: str, names: list[str], calls: Any, carry: dict[str, Any],
         classes: dict[str, Any]) -> list[LayerReport]:
    """Tune block ``block`` (its quantized Linear layers ``names``) on its cached ``calls``
    through the host, record each layer's grid, and report it; ``carry``: what the tuning
    passes from block to block (auto-round's quantized input)."""
    groups = {n: mod.quant.group_of(n, classes[n]) for n in names}
    results = host.tune_block(block, calls, names, {n: g.weights for n, g in groups.items()},
                              mod.quant.groups[0].weights, mod.tuning, carry)
    out = []
    for name in names:
        r = results[name]
        host.set_quantized(name, r["weight"], {"weight_scale": r["weight_scale"],
                                               "weight_zero_point": r["weight_zero_point"]})
        out.append(LayerReport(name, mod.type, 0.0, samples=len(calls), grid=grid_text(groups[name])))
    return out


class AutoRound(Algorithm):
    name = "autoround"
    modifiers = ("AutoRoundModifier",)
    role = "quantize"
    describe = "AutoRound: each block's rounding and clipping tuned on its output error, through auto-round"

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        return _read(recipe, m, errors)

    def needs_data(self, mod: OneShotModifier) -> bool:
        return True

    def solve(self, host: Any, mod: OneShotModifier, name: str, stats: Any, group: Any,
              prepared: Prepared | None = None) -> Solved:
        raise ValueError(f"{mod.type} ({mod.where}) tunes whole decoder blocks: {name} is outside every block")


AUTOROUND = register(AutoRound())
