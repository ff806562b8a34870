"""Which one-shot modifiers a stage/group recipe holds, with their arguments resolved, and which
modules of a model each one compresses.

``oneshot()`` runs SparseGPTModifier, WandaPruningModifier and the one-shot reading of
MagnitudePruningModifier (prune each target to ``final_sparsity`` by ``|w|`` now) and
ConstantPruningModifier (keep the zeros there are: nothing to do in one pass), and
QuantizationModifier / GPTQModifier (resolved by :mod:`.quant_modifiers`). SparseGPT and
Wanda also take a ``sparsity`` list and the OWL profile (:mod:`.owl`). Every other
modifier, an argument this pipeline does not honour, a backend without the modifier's
``oneshot_needs`` and a ``!Modifier`` recipe are refused with located errors (B001) before
any weight changes.

Targets and ignore follow compressed-tensors: a string is a module name, a class name (of the
module's type or a base), or ``re:<pattern>`` matched with ``re.match`` (a prefix match) on the
module name; every prunable layer inside a matched module is a target. Unlike llm-compressor
0.14, a plain name in ``ignore`` (``lm_head``) does exclude that module.

>>> from recipe_spec import load
>>> r = load("s_stage:\\n  s_modifiers:\\n    SparseGPTModifier:\\n      sparsity: 0.5\\n"
...          "      mask_structure: '2:4'\\n      ignore: [lm_head]\\n")
>>> m = resolve(r, frozenset({"oneshot", "scores:sparsegpt"}), "torch")[0]
>>> m.kind, m.sparsity, (m.prune_n, m.prune_m), m.targets, m.ignore, m.pipeline
('sparsegpt', 0.5, (2, 4), ('Linear',), ('lm_head',), 'sequential')
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core_dialect import core_spec
from ..diagnostics import codes
from ..diagnostics.base import Diagnostic, RecipeError
from ..recipe.model import Modifier, Recipe
from .awq.forms import combined_args, older_awq_form
from .awq.releases import CURRENT, awq_release
from .host import ModuleInfo
from .matching import matches, regex_match
from .owl.profile import read_sparsity
from .shared.quant_plan import QUANT_KINDS, QuantPlan, resolve_quant
from .shared.smoothing_args import READ as _SMOOTHING_READ
from .shared.smoothing_args import SMOOTHING_KINDS, smoothing_plan

__all__ = ["OneShotModifier", "resolve", "runnable", "select_modules", "matches"]

#: The one-shot kind of each modifier ``oneshot()`` runs.
KINDS = {"SparseGPTModifier": "sparsegpt", "WandaPruningModifier": "wanda",
         "MagnitudePruningModifier": "magnitude", "ConstantPruningModifier": "constant", **SMOOTHING_KINDS,
         **QUANT_KINDS}
#: The per-layer sparsity arguments (:mod:`.owl`).
_PER_LAYER = ("sparsity_profile", "owl_m", "owl_lmbda")
#: Arguments read by the pipeline or without effect on its result, per kind.
_READ = {
    "sparsegpt": {"sparsity", "mask_structure", "targets", "ignore", "block_size", "dampening_frac",
                  "preserve_sparsity_mask", "offload_hessians", "sequential_update", *_PER_LAYER},
    "wanda": {"sparsity", "mask_structure", "targets", "ignore", "sequential_update", *_PER_LAYER},
    "magnitude": {"targets", "init_sparsity", "final_sparsity", "mask_structure", "leave_enabled",
                  "update_scheduler", "scheduler_args"},
    "constant": {"targets"},
    **_SMOOTHING_READ,
}
#: Base-class arguments that do nothing in a single pass.
_BASE = {"index", "group", "start", "end", "update", "requires_calibration_data"}
_NM = re.compile(r"^([0-9]+):([0-9]+)$")
_TOKENS = {"__ALL__", "__ALL_PRUNABLE__"}


@dataclass(frozen=True)
class OneShotModifier:
    """One modifier as the pipeline runs it.

    ``kind``: ``sparsegpt``, ``wanda``, ``magnitude`` or ``constant``; ``entry``: the recipe
    entry (for located messages). ``prune_n``/``prune_m``: prune N of every M weights
    (llm-compressor's ``mask_structure``; 0 = unstructured); ``mask_type``: the magnitude
    mask type (:func:`recipe_spec.masks.algorithms.compute_mask`). ``sparsities``: a
    ``sparsity`` list, one value per target match; ``owl``: ``(owl_m, owl_lmbda)`` of the OWL
    profile; ``levels``: the sparsity of each module that has its own, filled in by the
    pipeline (:func:`.owl.layer_sparsities`)."""

    type: str
    kind: str
    entry: Modifier
    targets: tuple[str, ...]
    ignore: tuple[str, ...] = ()
    sparsity: float = 0.0
    prune_n: int = 0
    prune_m: int = 0
    mask_type: str = "unstructured"
    block_size: int = 128
    dampening_frac: float = 0.01
    preserve_mask: bool = False
    sparsities: tuple[float, ...] = ()
    owl: tuple[int, float] | None = None
    levels: Mapping[str, float] = field(default_factory=dict)
    #: A smoothing modifier's plan (:class:`~.smoothing_args.SmoothingPlan`); None otherwise.
    transform: Any = None
    quant: QuantPlan | None = None
    #: What the run does otherwise than the recipe's words say (AWQ's combined form, split)
    note: str = ""

    @property
    def needs_data(self) -> bool:
        """Whether it needs calibration data (SparseGPT, Wanda, GPTQ, SmoothQuant, AWQ, and a
        QuantizationModifier with static input activations)."""
        return (self.kind in ("sparsegpt", "wanda", "gptq", "smoothquant", "awq")
                or bool(self.quant and self.quant.static_inputs))

    @property
    def pipeline(self) -> str:
        """The pipeline ``independent`` gives it: ``sequential`` with data, else ``datafree``."""
        return "sequential" if self.needs_data else "datafree"

    @property
    def where(self) -> str:
        """``file:line`` of its recipe entry."""
        return f"{self.entry.file or '<string>'}:{self.entry.span.line}"


def _strings(value: Any, default: tuple[str, ...]) -> tuple[str, ...]:
    if value is None:
        return default
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def _b001(recipe: Recipe, m: Modifier, message: str, hint: str, key: str | None = None) -> Diagnostic:
    span = m.key_span(key) if key is not None else m.span
    return codes.B001(message, hint, span).in_file(recipe.path)


def _release(version: tuple[int, ...] | None) -> tuple[Any, str]:
    label = "llm-compressor " + ".".join(map(str, version)) if version else "llm-compressor"
    return awq_release(version), label


def _one(recipe: Recipe, m: Modifier, kind: str, errors: list[Diagnostic],
         version: tuple[int, ...] | None = None) -> OneShotModifier | None:
    args = m.args
    if kind in QUANT_KINDS.values():
        resolved = resolve_quant(recipe, m, kind, errors)
        if resolved is None:
            return None
        plan, gptq = resolved
        targets = tuple(dict.fromkeys(t for g in plan.groups for t in g.targets))
        return OneShotModifier(m.type, kind, m, targets, plan.ignore, quant=plan,
                               block_size=int(gptq.get("block_size", 128)),
                               dampening_frac=float(gptq.get("dampening_frac", 0.01)))
    release, label = _release(version) if kind == "awq" else (CURRENT, "")
    older = older_awq_form(recipe, m, errors, release, label) if kind == "awq" else set()
    for key in sorted(set(args) - _READ[kind] - _BASE - older):
        errors.append(_b001(recipe, m, f"{m.type} argument `{key}` is not run by recipe_spec.oneshot",
                            f"Remove `{key}`, or run this recipe with llm-compressor.", key))
    if kind in ("smoothquant", "awq"):
        own = combined_args(m) if release is not None and release.combined else {}
        smoothing = smoothing_plan(recipe, m, kind, errors, release or CURRENT, own)
        return None if smoothing is None else OneShotModifier(m.type, kind, m, (), transform=smoothing)
    if kind in ("sparsegpt", "wanda"):
        read = read_sparsity(args)
        if read is None:
            errors.append(_b001(recipe, m, f"{m.type} with sparsity {args.get('sparsity')!r}: "
                                "recipe_spec.oneshot runs a number or a list of numbers",
                                "Write one number (sparsity: 0.5) or one per target match.", "sparsity"))
            return None
        sparsity, listed, owl = read
        match = _NM.match(str(args.get("mask_structure", "0:0")))
        n, size = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
        return OneShotModifier(
            m.type, kind, m, _strings(args.get("targets"), ("Linear",)), _strings(args.get("ignore"), ()),
            sparsity, n, size if n else 0,
            block_size=int(args.get("block_size", 128)),
            dampening_frac=float(args.get("dampening_frac", 0.01) if args.get("dampening_frac") is not None else 0.01),
            preserve_mask=bool(args.get("preserve_sparsity_mask", False)), sparsities=listed, owl=owl,
        )
    targets = _strings(args.get("targets"), ())
    if kind == "constant":
        return OneShotModifier(m.type, kind, m, targets)
    structure = str(args.get("mask_structure", "unstructured"))
    final = float(args.get("final_sparsity", 0.0))
    match = _NM.match(structure)
    if match is None and structure != "unstructured":
        errors.append(_b001(recipe, m, f"MagnitudePruningModifier mask_structure '{structure}' is not "
                            "run by recipe_spec.oneshot", "Write 'unstructured' or 'N:M'.", "mask_structure"))
        return None
    if match is not None and abs((1 - int(match.group(1)) / max(int(match.group(2)), 1)) - final) > 1e-9:
        errors.append(codes.M006(
            f"final_sparsity {final:g} is overridden by mask_structure '{structure}' (sparsity "
            f"{1 - int(match.group(1)) / max(int(match.group(2)), 1):g})",
            "Write the sparsity the N:M pattern gives, or mask_structure: unstructured.",
            m.value_span("final_sparsity")).in_file(recipe.path))
        return None
    return OneShotModifier(m.type, kind, m, targets, sparsity=final, mask_type=structure)


def _combined_quantizer(recipe: Recipe, awq: OneShotModifier, errors: list[Diagnostic]) -> OneShotModifier | None:
    """The QuantizationModifier a combined-form AWQModifier's quantization arguments make (its
    round to nearest after the smoothing, as llm-compressor 0.9-0.10 ran it); None without them."""
    own = combined_args(awq.entry)
    plan = awq.transform
    if not own or plan is None or not plan.release.combined:
        return None
    resolved = resolve_quant(recipe, awq.entry, "quantization", errors, own)
    if resolved is None:
        return None
    quant, _ = resolved
    targets = tuple(dict.fromkeys(t for g in quant.groups for t in g.targets))
    note = (f"{awq.type} ({awq.where}) in the combined form of {plan.release.label}: run as AWQ searching with "
            f"its {', '.join(own)} and then a QuantizationModifier with them (round to nearest), as that "
            "release ran it")
    return OneShotModifier(awq.type, "quantization", awq.entry, targets, quant.ignore, quant=quant, note=note)


def resolve(recipe: Recipe, capabilities: frozenset[str], backend: str,
            version: tuple[int, ...] | None = None) -> list[OneShotModifier]:
    """The one-shot modifiers of ``recipe`` in recipe order (every stage's, concatenated, as
    llm-compressor does). Raises :class:`RecipeError` with a located B001 for each modifier or
    argument ``oneshot()`` does not run on ``backend`` (with ``capabilities``). ``version``:
    the llm-compressor release whose reading the run follows (None: the newest); under 0.9 and
    0.10 an AWQModifier in the combined form becomes AWQ and a QuantizationModifier
    (:func:`_combined_quantizer`)."""
    if recipe.dialect != "core":
        first = recipe.modifiers[0] if recipe.modifiers else None
        span = first.span if first is not None else recipe.stages[0].span
        raise RecipeError([codes.B001(
            "recipe_spec.oneshot runs stage/group recipes (llm-compressor's); this is a `!Modifier` "
            "training recipe", "Write '<name>_stage:' / '<name>_modifiers:' / 'SparseGPTModifier: {...}', "
            "or run this recipe with ScheduledModifierManager.modify().", span).in_file(recipe.path)])
    errors: list[Diagnostic] = []
    out: list[OneShotModifier] = []
    for m in recipe.modifiers:
        declared = core_spec(m.type)
        kind = KINDS.get(m.type)
        needs = declared.oneshot_needs if declared is not None else frozenset()
        if kind is None or not needs:
            errors.append(_b001(recipe, m, f"{m.type} is not run by recipe_spec.oneshot yet",
                                "Run this recipe with llm-compressor, or remove the modifier."))
            continue
        if not needs <= capabilities:
            errors.append(_b001(recipe, m, f"{m.type} is not available in oneshot() on the {backend} "
                                f"backend (it needs {', '.join(sorted(needs - capabilities))})",
                                "Run it on a backend that has it (schemas/backends.json lists them)."))
            continue
        resolved = _one(recipe, m, kind, errors, version)
        if resolved is not None:
            out.append(resolved)
            quantizer = _combined_quantizer(recipe, resolved, errors) if kind == "awq" else None
            if quantizer is not None:
                out.append(quantizer)
    if errors:
        raise RecipeError(sorted(errors, key=lambda d: (d.line, d.column)))
    return out


def runnable(recipe: Recipe) -> list[OneShotModifier]:
    """The modifiers of ``recipe`` that ``oneshot()`` runs, as it would run them, for checks
    against a model (:mod:`.checkpoint`): a modifier it does not run, or whose sparsity it
    cannot read, is left out; an argument it would refuse is not held against the rest (the
    recipe's own checks report both)."""
    out: list[OneShotModifier] = []
    if recipe.dialect != "core":
        return out
    for m in recipe.modifiers:
        kind = KINDS.get(m.type)
        if kind is None:
            continue
        resolved = _one(recipe, m, kind, [])
        if resolved is not None:
            out.append(resolved)
    return out


def _param_match(target: str, name: str) -> bool:
    """A parameter selector (``re:.*weight``, ``x.weight``) that names ``name``'s weight."""
    weight = f"{name}.weight"
    if target.startswith("re:"):
        return regex_match(target, weight)
    return target == weight


def select_modules(modules: Sequence[ModuleInfo], mod: OneShotModifier) -> list[str]:
    """The prunable modules ``mod`` compresses, in ``named_modules`` order: every prunable
    layer inside a module its targets match (magnitude and constant also take parameter
    selectors and ``__ALL_PRUNABLE__``), none that an ``ignore`` entry matches (itself or a
    module containing it); a quantization modifier's: :meth:`~.quant_modifiers.QuantPlan.select`."""
    if mod.quant is not None:
        return mod.quant.select(modules)
    matched = [i.name for i in modules if any(matches(t, i.name, i.classes) for t in mod.targets)]
    tokens = mod.kind in ("magnitude", "constant")
    ignored = [i.name for i in modules if any(matches(t, i.name, i.classes) for t in mod.ignore)]

    def inside(name: str, roots: Sequence[str]) -> bool:
        return any(r == "" or name == r or name.startswith(r + ".") for r in roots)

    out = []
    for info in modules:
        if not info.prunable or inside(info.name, ignored):
            continue
        hit = inside(info.name, matched)
        if not hit and tokens:
            hit = any(t.upper() in _TOKENS or _param_match(t, info.name) for t in mod.targets)
        if hit:
            out.append(info.name)
    return out
