"""AutoRound (``AutoRoundModifier``): each decoder block's rounding and clipping tuned by signed
gradient descent on the block's output error (auto-round's algorithm), run as llm-compressor
0.14 runs it: through auto-round itself, one block at a time, by a host that supplies
``tune_block`` (PyTorch: ``recipe_spec_torch.autoround``; capability ``quantize:autoround``).

The pipeline (:mod:`..pipeline`) hands each block its cached calls: the outputs of the block
before *as it was before tuning* (llm-compressor turns its error propagation off for AutoRound;
auto-round carries the quantized outputs itself, block to block), and records what the tuning
gives each quantized Linear under compressed-tensors' names (``weight_scale``,
``weight_zero_point``, ``weight_global_scale``, ``input_scale``, ``input_global_scale``, those
its scheme has; the weight its dequantized grid value).

Arguments: the quantization modifier's (``scheme`` / ``config_groups``, ``targets``,
``ignore``), ``iters`` (0: auto-round's optimised round to nearest), ``lr`` (None: auto-round's
``1 / iters``), ``batch_size``, ``enable_torch_compile``, ``disable_opt_rtn``. Run: integer
weights by group or channel (W4A16, W8A16, their asymmetric forms, explicit ``config_groups``);
FP8 weights by tensor or channel; NVFP4's and the MX formats' float weights (auto-round's
``nv_fp`` and ``mx_fp`` types, with NVFP4A16, MXFP4A16 and MXFP8A16 too, which llm-compressor
0.14.0.1 hands auto-round as a plain ``fp`` type: it cannot tune the first two and gives the
third float group scales); input activations dynamic (quantized as the model runs: the tuning is
the weights', as llm-compressor's translation of a scheme has it; a preset auto-round knows by
name, NVFP4 and MXFP4 among them, is its own, activations in the loop), static symmetric 8-bit
per tensor, int or FP8 (auto-round calibrates ``input_scale``) or NVFP4's (its
``input_global_scale``). Refused, located: other grids and static activations, ``device_ids`` (auto-round's multi-device
dispatch), targets outside the decoder blocks (llm-compressor never tunes them and saves them
with untouched scales).

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


def _not_run(group: Any) -> tuple[str, str] | None:
    """Why auto-round does not tune config group ``group`` (what, and what to write instead), or
    None: integer weights by group or channel, FP8 weights by tensor or channel, NVFP4's 4-bit
    float weights, MX's (MXFP4, MXFP8); input activations dynamic, static symmetric 8-bit per tensor
    (int or FP8), or NVFP4's."""
    w, x = group.weights, group.inputs
    if w is None:
        return "quantizes no weights", "Give the group weights: an integer, FP8, NVFP4 or MXFP4 scheme."
    fits = ((w.type == "int" and w.strategy in ("group", "channel"))
            or (w.type == "float" and w.num_bits == 8 and w.strategy in ("tensor", "channel"))
            or (w.type == "float" and w.num_bits == 4 and w.strategy == "tensor_group" and w.group_size == 16)
            or w.mx)
    if not fits:
        return (f"quantizes its weights on a grid auto-round has no tuning for ({grid_text(group)})",
                "Use integer weights by group or channel (W4A16, W8A16, W8A8, their asymmetric forms), FP8 weights "
                "by tensor or channel (FP8, FP8_DYNAMIC), NVFP4, MXFP4 or MXFP8 (their A16 forms too), or quantize "
                "with a QuantizationModifier or GPTQModifier.")
    if x is not None and not ((x.num_bits, x.strategy, x.symmetric) == (8, "tensor", True)
                              or (x.type, x.num_bits, x.strategy, x.group_size) == ("float", 4, "tensor_group", 16)):
        return ("quantizes static input activations that auto-round does not calibrate "
                f"({x.num_bits}-bit {x.type}{'' if x.symmetric else ' asymmetric'} by {x.strategy})",
                "Make the activations dynamic (W8A8), use symmetric 8-bit ones per tensor (int or FP8) or NVFP4's, "
                "or calibrate them with a QuantizationModifier or GPTQModifier.")
    return None


def _read(recipe: Recipe, m: Modifier, errors: list[Diagnostic]) -> list[OneShotModifier]:
    before = len(errors)
    resolved = resolve_quant(recipe, m, errors)
    if resolved is None:
        return []
    plan, _ = resolved
    key = "scheme" if "scheme" in m.args else "config_groups"
    for group in plan.groups:
        problem = _not_run(group)
        if problem is not None:
            errors.append(b001(recipe, m, f"{m.type}: config group {group.name} {problem[0]}", problem[1], key))
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
    through the host, record each layer's grid and the scales the tuning gave it, and report it;
    ``carry``: what the tuning passes from block to block (auto-round's quantized input)."""
    groups = {n: mod.quant.group_of(n, classes[n]) for n in names}
    results = host.tune_block(block, calls, names, groups, mod.quant.groups[0], mod.tuning, carry)
    out = []
    for name in names:
        r = dict(results[name])
        host.set_quantized(name, r.pop("weight"), r)
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
