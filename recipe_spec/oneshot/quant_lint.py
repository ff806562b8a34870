"""GPTQModifier, QuantizationModifier and AutoRoundModifier against a checkpoint's headers (``recipe-spec lint
RECIPE --model DIR``): no weight is read, no quantization runs.

- :func:`weight_groups`: the weight schemes a modifier applies, resolved as llm-compressor's
  ``resolve_quantization_config`` does: ``scheme: W4A16`` (a preset, on the modifier's
  ``targets``, default ``[Linear]``), ``scheme: {W4A16: [targets]}``, or ``config_groups``
  (each group's ``targets`` and ``weights``); ``ignore`` is the modifier's. Group sizes come
  from the preset table (:attr:`recipe_spec.compressed_tensors.presets.Preset.group_size`,
  FP4/MX presets included) and, for ``config_groups``, ``QuantArgs.from_config``.
- :func:`quant_findings`: **P012** for every group whose ``group_size`` does not divide a
  target's ``in_features``. llm-compressor 0.14 refuses such a layer after loading the model
  when ``in_features`` is larger (``group_size_validation.py``: a ValueError naming it), and
  when it is smaller passes that check and stops at calibration, in the weight observer
  (``RuntimeError: unflatten``; conformance case 12); ``bypass_divisibility_checks`` skips only
  the first, the observer fails all the same.
- :func:`mapping_findings`: **P006** for every SmoothQuant/AWQ mapping entry (written in
  ``mappings``, or the architecture's defaults) that resolves to no layer of the model
  (:func:`recipe_spec.oneshot.shared.smoothing.unresolved_for`), naming its patterns that match
  nothing.
- :func:`rotation_findings`: **P014** for every layer a QuIP or SpinQuant rotation does not fit:
  a block size that does not divide its width, or a ``hadamard`` rotation of a size that is not
  a power of two (SpinQuant's per-head R2 is checked when the model runs: the head width is
  the config's).
- :func:`gptq_modifiers`: GPTQModifiers as :class:`~.modifiers.OneShotModifier` (kind
  ``gptq``) for the cost estimate (:func:`.estimate.estimate`: a Hessian of
  ``in_features² × 4`` bytes per target, as SparseGPT's).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..compressed_tensors.presets import PRESETS
from ..diagnostics import codes
from ..diagnostics.base import Diagnostic
from ..quantization.args import QuantArgs
from ..recipe.model import Modifier, Recipe
from ..text.frozen import thaw
from .gptq import GPTQ_ALGORITHM
from .host import ModuleInfo
from .modifiers import OneShotModifier, select_modules

__all__ = ["WeightGroup", "weight_groups", "quant_findings", "mapping_findings", "rotation_findings",
           "gptq_modifiers"]

QUANTIZERS = ("GPTQModifier", "QuantizationModifier", "AutoRoundModifier")


@dataclass(frozen=True)
class WeightGroup:
    """One weight scheme of a quantization modifier: what it is called in the recipe (a preset
    name or ``config_groups.<name>``), its targets, its group size (None: no groups) and the
    argument path it was written at."""

    label: str
    targets: tuple[str, ...]
    group_size: int | None
    path: tuple[Any, ...]


def _strings(value: Any, default: tuple[str, ...]) -> tuple[str, ...]:
    if value is None:
        return default
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def _preset_group(name: str) -> int | None:
    preset = PRESETS.get(name.upper())
    return preset.group_size if preset is not None else None


def _config_group(weights: Any) -> int | None:
    if not isinstance(weights, dict):
        return None
    try:
        return QuantArgs.from_config(weights).group_size
    except (ValueError, TypeError):  # tensor_group and the like: read the size as written
        size = weights.get("group_size")
        grouped = weights.get("strategy") in (None, "group", "tensor_group")
        return size if grouped and isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def weight_groups(m: Modifier) -> list[WeightGroup]:
    """The weight schemes of quantization modifier ``m`` (see the module docstring); [] for
    an argument shape that does not read (the recipe checks report it)."""
    args = thaw(m.args)
    scheme, groups = args.get("scheme"), args.get("config_groups")
    targets = _strings(args.get("targets"), ("Linear",))
    if isinstance(scheme, str):
        return [WeightGroup(f"scheme {scheme}", targets, _preset_group(scheme), ("scheme",))]
    if isinstance(scheme, dict):
        return [WeightGroup(f"scheme {name}", _strings(t, targets), _preset_group(str(name)), ("scheme", name))
                for name, t in scheme.items()]
    if isinstance(groups, dict):
        out = []
        for name, group in groups.items():
            if isinstance(group, dict):
                weights = group.get("weights")
                path = ("config_groups", name, "weights") + (
                    ("group_size",) if isinstance(weights, dict) and "group_size" in weights else ())
                out.append(WeightGroup(f"config_groups.{name}", _strings(group.get("targets"), ()),
                                       _config_group(weights), path))
        return out
    return []


def _as_oneshot(m: Modifier, kind: str, targets: tuple[str, ...]) -> OneShotModifier:
    return OneShotModifier(m.type, kind, m, targets, _strings(m.args.get("ignore"), ()))


def _divisor(columns: Sequence[int], limit: int) -> int:
    """The largest group size up to ``limit`` that divides every one of ``columns``."""
    common = math.gcd(*columns)
    return max(d for d in range(1, min(common, limit) + 1) if common % d == 0)


_IN_BLOCK = re.compile(r"^.*?\.\d+\.(.+)$")


def _ignore_entries(names: Sequence[str]) -> str:
    """``ignore`` entries for ``names``: one ``re:`` pattern per layer name inside the
    numbered blocks (``'re:.*\\.mlp\\.down_proj$'``) when there are at most three, else the
    first two names and ``...``."""
    inner = [_IN_BLOCK.match(n) for n in names]
    if all(inner):
        leaves = list(dict.fromkeys(i.group(1) for i in inner if i is not None))
        if len(leaves) <= 3:
            return ", ".join(f"'re:.*\\.{re.escape(leaf)}$'" for leaf in leaves)
    return ", ".join(f"'re:{re.escape(n)}$'" for n in names[:2]) + (", ..." if len(names) > 2 else "")


def _listing(items: Sequence[str], limit: int = 3) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _indivisible(recipe: Recipe, m: Modifier, modules: Sequence[ModuleInfo]) -> Iterator[Diagnostic]:
    shapes = {i.name: i.weight_shape for i in modules}
    for group in weight_groups(m):
        size = group.group_size
        if not size:
            continue
        names = select_modules(modules, _as_oneshot(m, GPTQ_ALGORITHM.name, group.targets))
        bad = [n for n in names if shapes[n][-1] % size]
        if not bad:
            continue
        fits = _divisor([shapes[n][-1] for n in names], size)
        small = [n for n in bad if shapes[n][-1] < size]
        how = ("0.14 stops at calibration in the weight observer ('unflatten'), where in_features < "
               f"{size}" if small else "0.14 refuses them after loading the model")
        if small and len(small) < len(bad):
            how = f"0.14 refuses those above {size} after loading the model and stops at calibration on the rest"
        quoted = _ignore_entries(bad)
        yield codes.P012(
            f"{m.type} {group.label} quantizes weights in groups of {size} input columns: "
            f"{_listing([f'{n} (in {shapes[n][-1]})' for n in bad])} {'is' if len(bad) == 1 else 'are'} "
            f"not a multiple of {size}; llm-compressor {how}",
            f"Use group_size {fits} (config_groups with weights: {{num_bits: ..., strategy: group, "
            f"group_size: {fits}}}), which divides every target's in_features, or leave those layers "
            f"out with ignore: [{quoted}].",
            m.value_span(*group.path)).in_file(recipe.path)


def quant_findings(recipe: Recipe, modules: Sequence[ModuleInfo]) -> list[Diagnostic]:
    """P012 for each quantization modifier of ``recipe`` against the model's ``modules``."""
    out: list[Diagnostic] = []
    if recipe.dialect != "stage":
        return out
    for m in recipe.modifiers:
        if m.type in QUANTIZERS:
            out += _indivisible(recipe, m, modules)
    return out


def mapping_findings(recipe: Recipe, mods: Sequence[OneShotModifier], modules: Sequence[ModuleInfo],
                     architecture: str) -> list[Diagnostic]:
    """P006 for each SmoothQuant/AWQ mapping entry of ``mods`` (from
    :func:`~.modifiers.runnable`) that resolves to no module of a model with ``modules`` and
    class ``architecture``: llm-compressor finds out only after loading the model."""
    from .shared.smoothing import unresolved_for

    names = [i.name for i in modules]
    out: list[Diagnostic] = []
    for mod in mods:
        try:
            missing = unresolved_for(mod, names, architecture)
        except ValueError as exc:
            out.append(codes.P006(f"{mod.type}: {exc}", "Write its `mappings` for this model.",
                                  mod.entry.span).in_file(recipe.path))
            continue
        written = mod.entry.args.get("mappings") is not None
        for entry in missing:
            what = (f"mappings[{entry.index}]" if written else
                    f"the default mapping {entry.index} for {architecture}")
            patterns = entry.missing or entry.mapping.patterns
            out.append(codes.P006(
                f"{mod.type} {what} ({entry.mapping.smooth} -> {', '.join(entry.mapping.balance)}) "
                f"resolves to no layer of this model: {', '.join(patterns)} "
                f"{'matches' if len(patterns) == 1 else 'match'} "
                f"{'nothing' if entry.missing else 'no complete set'}",
                "Write `mappings` whose smooth and balance layers this model has (e.g. "
                "[[['re:.*q_proj', 're:.*k_proj', 're:.*v_proj'], 're:.*input_layernorm']]), or "
                "remove the entry.",
                mod.entry.value_span("mappings", entry.index) if written else mod.entry.span,
            ).in_file(recipe.path))
    return out


def gptq_modifiers(recipe: Recipe, already: Sequence[OneShotModifier] = ()) -> list[OneShotModifier]:
    """The GPTQModifiers of ``recipe`` as kind ``gptq`` one-shot modifiers over all their
    groups' targets, for the cost estimate; those in ``already`` (by recipe entry) left out."""
    seen = {id(mod.entry) for mod in already}
    out: list[OneShotModifier] = []
    if recipe.dialect != "stage":
        return out
    for m in recipe.modifiers:
        if m.type in GPTQ_ALGORITHM.modifiers and id(m) not in seen:
            targets = tuple(dict.fromkeys(t for g in weight_groups(m) for t in g.targets))
            out.append(_as_oneshot(m, GPTQ_ALGORITHM.name, targets or ("Linear",)))
    return out


def _width(info: ModuleInfo, location: str) -> int | None:
    """The width a rotation at ``location`` spans: a Linear's input or output features, an
    Embedding's rows or width (None: neither)."""
    if len(info.weight_shape) != 2 or not (info.prunable or "Embedding" in info.classes):
        return None
    rows, cols = info.weight_shape
    if info.prunable:  # (out, in)
        return cols if location in ("input", "weight_input") else rows
    return rows if location in ("input", "weight_input") else cols


def rotation_findings(recipe: Recipe, mods: Sequence[OneShotModifier], modules: Sequence[ModuleInfo]) -> list[Diagnostic]:
    """P014 for each layer a rotation of ``mods`` (QuIP, SpinQuant) does not fit, one per
    modifier and rotation group (see the module docstring)."""
    from .matching import matches

    out: list[Diagnostic] = []
    for mod in mods:
        rotation = getattr(mod, "rotation", None)
        if rotation is None:
            continue
        for group_name, group in rotation.config["config_groups"].items():
            if group_name in rotation.head_dim_groups:
                continue
            bad: list[str] = []
            for args in group["apply"]:
                for info in modules:
                    if not any(matches(t, info.name, info.classes) for t in args["targets"]) or any(
                            matches(t, info.name, info.classes) for t in args.get("ignore") or []):
                        continue
                    width = _width(info, args["location"])
                    size = group.get("head_dim") or width
                    if width is None or size is None:
                        continue
                    if width % size or (group["type"] == "hadamard" and size & (size - 1)):
                        bad.append(f"{info.name} ({width} wide, blocks of {size})")
            if bad:
                more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
                out.append(codes.P014(
                    f"{mod.type} {group_name} ({group['type']}) does not fit {', '.join(dict.fromkeys(bad[:3]))}{more}",
                    "Pick a transform_block_size that divides every rotated width and is a power of two, or "
                    "use transform_type: random-matrix.", mod.entry.span).in_file(recipe.path))
    return out
