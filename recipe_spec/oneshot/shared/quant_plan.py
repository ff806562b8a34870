"""QuantizationModifier and GPTQModifier as ``oneshot()`` runs them: their arguments resolved
into compressed-tensors' quantization config (:mod:`recipe_spec.quantization.scheme`, as
llm-compressor 0.14 resolves it), the grid of each config group, and the modules each group
quantizes.

What runs: weights on an int (2-8 bits) or FP8 grid with tensor, channel or group scales from
the memoryless min-max observer; input activations dynamic (nothing to calibrate: the saved
config says so), or static per tensor with the ``minmax`` (running average), ``static_minmax``
(running min and max) or ``memoryless_minmax`` observer. GPTQModifier also reads
``block_size``, ``dampening_frac``, ``actorder`` (``static``/``weight`` or null) and accepts
``offload_hessians`` and ``batched_quantization`` (they change where and how many layers are
solved at once, not the result). Everything else written with a value other than its default
(``kv_cache_scheme``, ``output_activations``, observer overrides, other observers, block/FP4/MX
presets, ``bypass_divisibility_checks: true``, a config group's ``format``) is refused with a
located B001; arguments llm-compressor refuses are refused with a located M008.

Targets and ignore are compressed-tensors': each Linear whose name or class a target names
(``re:`` patterns matched with ``re.match``), unless an ``ignore`` entry names it. A module
that several targets name takes the scheme of the most specific one, as compressed-tensors
0.19's ``apply_quantization_config`` ranks them (``match_targets``): an exact name first, then
a ``re:`` pattern, then a class name, each kind in the sorted order of the target strings; a
target string that two groups both list belongs to the later group (its target-to-scheme
table keeps the last).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...diagnostics import codes
from ...diagnostics.base import Diagnostic
from ...quantization.args import QuantArgs
from ...quantization.scheme import UNSUPPORTED_PRESETS, resolve_config
from ...recipe.model import Modifier, Recipe
from ...text.frozen import thaw
from ..host import ModuleInfo
from ..matching import matches, regex_match
from ..settings import b001 as _b001
from .global_scales import mixed_fused_sets
from ..settings import declared, refuse_unrun, value

__all__ = ["QuantGroup", "QuantPlan", "resolve_quant", "check_quant_shapes"]

_WEIGHT_OBSERVERS = {"memoryless_minmax", "minmax", "static_minmax"}  # all memoryless on weights
_INPUT_OBSERVERS = {"memoryless_minmax", "minmax", "static_minmax"}


@dataclass(frozen=True)
class QuantGroup:
    """One config group as it runs: its targets, the weights' grid (None: weights are not
    quantized) and activation order, and for static input activations their grid, observer
    and the ``minmax`` observer's averaging constant."""

    name: str
    targets: tuple[str, ...]
    weights: QuantArgs | None
    actorder: str | None = None
    inputs: QuantArgs | None = None
    input_observer: str | None = None
    averaging_constant: float = 0.01


@dataclass(frozen=True)
class QuantPlan:
    """A quantization modifier's resolved config (``config_json``: compressed-tensors'
    ``QuantizationConfig.model_dump()`` as JSON, its groups in the recipe's order, the order
    compressed-tensors ranks a target two groups list by), its groups and its ignore list."""

    config_json: str
    groups: tuple[QuantGroup, ...]
    ignore: tuple[str, ...]

    @property
    def config(self) -> dict[str, Any]:
        """The resolved ``QuantizationConfig`` as a mapping (a new one each time)."""
        out: dict[str, Any] = json.loads(self.config_json)
        return out

    @property
    def static_inputs(self) -> bool:
        """Whether a group calibrates static input activations (then data is needed)."""
        return any(g.inputs is not None for g in self.groups)

    def group_of(self, name: str, classes: Sequence[str]) -> QuantGroup | None:
        """The group quantizing module ``name`` (None: no target names it, or ignore does);
        several targets: the most specific (see the module docstring)."""
        if any(matches(t, name, classes) for t in self.ignore):
            return None
        by_target = {t: g for g in self.groups for t in g.targets}
        ordered = sorted(by_target, key=lambda t: ("re:" in t, t))
        for t in ordered:  # names, exact before re: (the sort puts re: last)
            if regex_match(t, name) if t.startswith("re:") else t == name:
                return by_target[t]
        return next((by_target[t] for t in ordered if not t.startswith("re:") and t in classes), None)

    def select(self, modules: Sequence[ModuleInfo]) -> list[str]:
        """The Linear modules quantized, in ``named_modules`` order."""
        return [i.name for i in modules if i.prunable and self.group_of(i.name, i.classes) is not None]


def _group(recipe: Recipe, m: Modifier, name: str, scheme: Mapping[str, Any], key: str,
           errors: list[Diagnostic]) -> QuantGroup | None:
    """One resolved config group as it runs, or None with a B001 for what does not run."""
    def refuse(what: str, hint: str) -> None:
        errors.append(_b001(recipe, m, f"{m.type} {name}: {what} is not run by recipe_spec.oneshot", hint, key))

    if scheme.get("output_activations") is not None:
        refuse("output_activations", "Set output_activations: null, or run this recipe with llm-compressor.")
        return None
    if scheme.get("format") is not None:
        refuse(f"format {scheme['format']!r}", "Leave format out: the saved format is inferred from the scheme.")
        return None
    weights = None
    raw = scheme.get("weights")
    if raw is not None:
        if raw["observer"] not in _WEIGHT_OBSERVERS:
            refuse(f"weight observer {raw['observer']!r}", "Use memoryless_minmax (leave observer out).")
            return None
        if raw["dynamic"]:
            refuse("dynamic weights", "Leave dynamic out of weights (weight scales are computed once).")
            return None
        try:
            weights = QuantArgs.from_config({k: v for k, v in raw.items() if k != "group_size" or v != -1})
        except ValueError as exc:
            refuse(f"the weight grid ({exc})", "Use int (2-8 bits), FP8 or FP4 weights with tensor, channel, group "
                   "or tensor_group scales.")
            return None
    inputs, observer, constant = None, None, 0.01
    act = scheme.get("input_activations")
    if act is not None and act["dynamic"] is not True:
        static = act["dynamic"] is False and act["strategy"] == "tensor"
        nvfp4 = act["dynamic"] == "local" and act["strategy"] == "tensor_group"  # a calibrated global scale
        if not (static or nvfp4) or act["observer"] not in _INPUT_OBSERVERS:
            refuse(f"static input activations with strategy {act['strategy']!r}, dynamic {act['dynamic']!r} "
                   f"and observer {act['observer']!r}", "Use dynamic: true, static per-tensor input activations "
                   "or NVFP4's (tensor_group, dynamic: local), with the minmax, static_minmax or "
                   "memoryless_minmax observer.")
            return None
        try:
            inputs = QuantArgs.from_config(act)
        except ValueError as exc:
            refuse(f"the input activation grid ({exc})", "Use int (2-8 bits), FP8 or FP4 input activations.")
            return None
        observer = act["observer"]
        kwargs = act.get("observer_kwargs") or {}
        constant = float(kwargs.get("averaging_constant", 0.01))
    actorder = raw["actorder"] if raw is not None else None
    return QuantGroup(name, tuple(scheme["targets"]), weights, "static" if actorder else None, inputs,
                      observer, constant)


def resolve_quant(recipe: Recipe, m: Modifier, errors: list[Diagnostic], args: Mapping[str, Any] | None = None,
                  name: str | None = None, gptq: bool = False) -> tuple[QuantPlan, dict[str, Any]] | None:
    """A quantization modifier's plan and its solver settings (GPTQ: ``block_size``,
    ``dampening_frac``, each as written or its declared default), or None with located errors
    in ``errors``. ``args``: the quantization arguments of modifier ``name`` when not ``m``'s
    own (AWQ's combined form); ``gptq``: read as GPTQ (its ``actorder``)."""
    name = name or m.type
    args = thaw(m.args) if args is None else thaw(args)
    before = len(errors)
    refuse_unrun(recipe, m, errors, name, args)
    scheme = args.get("scheme")
    names = [scheme] if isinstance(scheme, str) else list(scheme) if isinstance(scheme, Mapping) else []
    for preset in names:
        if isinstance(preset, str) and preset.upper() in UNSUPPORTED_PRESETS:
            why = "it quantizes nothing" if preset.upper() == "UNQUANTIZED" else "block scales are not implemented"
            errors.append(_b001(recipe, m, f"preset scheme {preset} is not run by recipe_spec.oneshot ({why})",
                                "Use another preset (W4A16, W8A8, FP8_DYNAMIC, NVFP4, MXFP4, ...), or run this "
                                "recipe with llm-compressor.", "scheme"))
    settings = {k: value(args, k, name) for k in ("block_size", "dampening_frac") if k in declared(name)}
    if len(errors) > before:
        return None
    try:
        config = resolve_config(args, gptq=gptq)
    except ValueError as exc:
        order = ("actorder",) if str(exc).startswith("actorder") else ()
        key = next((k for k in (*order, "config_groups", "scheme", "actorder") if k in args), None)
        span = m.value_span(key) if key else m.span
        errors.append(codes.M008(f"{m.type}: {exc}", "Fix the quantization arguments (compressed-tensors 0.19 "
                                 "refuses them).", span).in_file(recipe.path))
        return None
    key = "scheme" if "scheme" in args else "config_groups"
    groups = [_group(recipe, m, name, scheme, key, errors) for name, scheme in config["config_groups"].items()]
    if len(errors) > before:
        return None
    plan = QuantPlan(json.dumps(config), tuple(g for g in groups if g is not None),
                     tuple(config["ignore"]))
    return plan, settings


def check_quant_shapes(recipe: Recipe, mods: Sequence[Any], modules: Sequence[ModuleInfo]) -> list[Diagnostic]:
    """Located errors for group scales whose ``group_size`` does not divide a quantized
    module's input columns (compressed-tensors cannot store them): checked on the model before
    any weight changes (llm-compressor refuses some at initialisation and fails on the others
    in its observer)."""
    out: list[Diagnostic] = []
    for mod in mods:
        plan = getattr(mod, "quant", None)
        if plan is None:
            continue
        bad: dict[str, list[str]] = {}
        sizes: dict[str, int] = {}
        for info in modules:
            group = plan.group_of(info.name, info.classes) if info.prunable else None
            if group is None or group.weights is None or group.weights.strategy not in ("group", "tensor_group"):
                continue
            size, columns = int(group.weights.group_size or 1), int(info.weight_shape[-1])
            if columns % size:
                bad.setdefault(group.name, []).append(f"{info.name or 'the model itself'} ({columns} columns)")
                sizes[group.name] = size
        m = mod.entry
        for name, layers in bad.items():
            span = (m.value_span("scheme") if "scheme" in m.args
                    else m.value_span("config_groups", name, "weights", "group_size"))
            more = f" and {len(layers) - 3} more" if len(layers) > 3 else ""
            out.append(codes.P004(
                f"{m.type}: group_size {sizes[name]} does not divide the input columns of "
                f"{', '.join(layers[:3])}{more}",
                "Add these layers to `ignore`, or pick a group_size that divides their input features.",
                span).in_file(recipe.path))
        for members, left in mixed_fused_sets(plan, modules):
            key = "scheme" if "scheme" in m.args else "config_groups" if "config_groups" in m.args else None
            out.append(_b001(recipe, m, f"{m.type}: {', '.join(members)} share one NVFP4 global scale (a serving "
                             f"kernel fuses them), but {', '.join(left)} {'is' if len(left) == 1 else 'are'} not "
                             "quantized with the same tensor_group grid (llm-compressor 0.14 stops here with an "
                             "AssertionError)", "Quantize all of them with the NVFP4 scheme, or leave all of them "
                             "out (ignore:).", key))
    return out
