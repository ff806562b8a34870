"""Linting a recipe's parameter patterns against a model's parameters.

The model is given as a list of :class:`~recipe_spec.params.ParamRecord` values: from a live
model through a backend, or from a saved manifest (``params.json``), so CI needs no framework.
Linting runs every validation rule too, then the parameter rules (family ``P``):

- P001 an exact name or ``re:`` pattern matches no parameter (with the closest real names);
- P002 a pruning modifier's ``__ALL__`` or regex also hits biases or norm parameters;
- P003 a parameter pruned by two modifiers whose epoch ranges overlap;
- P004 a mask type the parameter's shape cannot take;
- P005 a ``re:`` pattern that does not compile, or that could take exponential time;
- P006 a layer named in QuantizationModifier ``submodules`` / ``ignore`` or LayerPruningModifier
  ``layers`` that does not exist;
- P011 a modifier that freezes every parameter of the model (training cannot go on);
- P013 most names miss: the recipe was written for another naming scheme (one finding with
  the closest mapping, :mod:`recipe_spec.lint_scheme`, instead of one P001 per name).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .diagnostics import codes
from .diagnostics.base import Diagnostic, Severity
from .lint_scheme import naming_scheme_findings
from .loader import RecipeInput, check
from .masks.types import nm_of
from .modifiers import spec
from .params.checkpoint import ModelNames
from .params.records import ParamRecord
from .params.selectors import (
    ParamIndex,
    closest_names,
    compile_selectors,
    names_matcher,
    resolve,
    selector_items,
)
from .recipe.findings import Finding
from .recipe.model import Modifier, Recipe
from .registry import canonical_shape
from .schedule.kinds import track_kind
from .stage_dialect.lint_model import lint_stage_model
from .stage_dialect.versions import Compat
from .text.patterns import PatternError
from .text.similar import CloseMatches
from .validation import apply_noqa, validate_recipe

__all__ = ["lint", "lint_recipe", "as_target", "lint_against_checkpoint"]


def as_target(records: Sequence[ParamRecord], source: str, target: str) -> list[ParamRecord]:
    """The records as the ``target`` backend would name them (its
    :meth:`~recipe_spec.registry.Backend.own_names`): a PyTorch model linted for Keras gets
    Keras paths (``fc1/kernel``) with the PyTorch names as portable aliases; a Keras model
    linted for PyTorch keeps only the portable names.
    """
    if source == target or not target:
        return list(records)
    from .registry import get_backend

    return get_backend(target).own_names(records, source)


def _pruning(m: Modifier) -> bool:
    declared = spec(m.type)
    return declared is not None and declared.prunes


def _selector_groups(m: Modifier) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(path of the selectors in the modifier, selectors) for ``params`` and mapping
    ``final_sparsity`` groups."""
    if "params" in m.args:
        yield ("params",), m.args["params"]
    final = m.args.get("final_sparsity")
    if isinstance(final, Mapping):
        for key, value in final.items():
            yield ("final_sparsity", key), value


def _window(m: Modifier) -> tuple[float, float] | None:
    start, end = m.args.get("start_epoch", -1), m.args.get("end_epoch", -1)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end)):
        return None
    try:
        window = (max(float(start), 0.0), math.inf if end == -1 else float(end))
    except OverflowError:  # an integer beyond a float's range: M005 says so
        return None
    return window if all(not math.isnan(v) for v in window) else None


def _freezes(m: Modifier) -> bool:
    """Whether ``m`` makes its parameters untrainable (``trainable: false``)."""
    declared = spec(m.type)
    return declared is not None and declared.schedule == "trainable" and m.args.get("trainable", True) is False


def _mask_findings(m: Modifier, records: Sequence[ParamRecord], framework: str) -> Iterator[Finding]:
    mask = m.args.get("mask_type", "unstructured")
    nm = nm_of(mask)
    needs_2d = (f"'{mask}'" if mask in ("channel", "filter") else f"block shape {list(mask)}"
                if isinstance(mask, (list, tuple)) else None)
    for r in records:
        axes, canonical = canonical_shape(r, framework)
        dim = axes[1] if len(axes) >= 2 else None
        if needs_2d is not None and len(r.shape) < 2:
            yield Finding(
                codes.P004,
                f"mask_type {needs_2d} prunes blocks or slices of 2 or more dimensions, but "
                f"'{r.name}' has shape {list(r.shape)}",
                "Select only weights of 2 or more dimensions (__ALL_PRUNABLE__, not __ALL__ or a "
                "pattern that takes biases and norms), or use mask_type 'unstructured'.",
                m, ("mask_type",),
            )
            continue
        if isinstance(mask, str) and mask in ("block4", "block") and dim is not None and r.shape[dim] % 4:
            yield Finding(
                codes.P004,
                f"block4 groups dimension {dim} of '{r.name}' {list(r.shape)} in fours, but it has "
                f"{r.shape[dim]} entries: the last block is padded and the measured sparsity "
                "will differ from the target",
                "Exclude this parameter from the block4 modifier or use unstructured masks for it.",
                m, ("mask_type",), severity=Severity.WARNING,
            )
        if nm and dim is not None and r.shape[dim] % nm[1]:
            yield Finding(
                codes.P004,
                f"mask_type '{mask}' needs dimension {dim} of '{r.name}' {list(r.shape)} to be a "
                f"multiple of {nm[1]}",
                "Exclude this parameter, or choose an N:M pattern whose M divides it.",
                m, ("mask_type",),
            )
        if isinstance(mask, (list, tuple)) and len(mask) == 2 and r.shape:
            for block, size in zip(mask, canonical[:2], strict=False):
                if isinstance(block, int) and block > 0 and size % block:
                    yield Finding(
                        codes.P004,
                        f"block shape {list(mask)} does not divide the shape {list(r.shape)} of '{r.name}'",
                        "Use a block shape whose entries divide the parameter's dimensions (-1 for a whole dimension).",
                        m, ("mask_type",),
                    )
                    break


def _layers(records: Sequence[ParamRecord]) -> tuple[set[str], set[str]]:
    names, types = set(), set()
    for r in records:
        for name in r.names:
            parts = re.split(r"[./]", name)
            for i in range(1, len(parts)):
                names.add(".".join(parts[:i]))
        if r.layer_type:
            types.add(r.layer_type)
    return names, types


def _layer_name_findings(m: Modifier, layer_names: set[str], layer_types: set[str],
                         matcher: Callable[[], CloseMatches]) -> Iterator[Finding]:
    """P006 for each entry of an argument declared to name layers (``Arg.names``) that names
    no layer (or, where allowed, layer type) of the model. ``matcher()``: the layer names
    and types, sorted, to find the closest among."""
    declared = spec(m.type)
    for arg in declared.args if declared is not None else ():
        entries = m.args.get(arg.name)
        if arg.names is None or not isinstance(entries, (list, tuple, str)):
            continue
        single = isinstance(entries, str)
        types_too = arg.names == "layers_or_types"
        for i, entry in enumerate([entries] if single else entries):
            if not isinstance(entry, str) or entry == "":
                continue
            name = entry.removeprefix("module.")
            if name in layer_names or (types_too and name in layer_types):
                continue
            where = (arg.name,) if single else (arg.name, i)
            if name.upper() in ("__ALL__", "__ALL_PRUNABLE__"):  # no backend reads a token here
                yield Finding(
                    codes.P006,
                    f"{arg.name} names '{entry}', a parameter selector token; {arg.name} takes "
                    f"layer{' or layer type' if types_too else ''} names",
                    "Name the layers (`recipe-spec params` lists them).", m, where,
                )
                continue
            close = matcher().get(name, n=3, cutoff=0.5)
            yield Finding(
                codes.P006,
                f"{arg.name} names '{entry}', which is not a layer{' or layer type' if types_too else ''} of the model",
                ("Closest: " + ", ".join(close) + ".") if close else "Check the layer names with `recipe-spec params`.",
                m, where,
            )


def _param_findings(recipe: Recipe, records: Sequence[ParamRecord], framework: str) -> Iterator[Finding]:
    pruned: dict[str, list[tuple[Modifier, tuple[float, float], bool]]] = {}
    layer_names, layer_types = _layers(records)
    param_index = ParamIndex(records)
    matchers: dict[str, CloseMatches] = {}  # made on first use, once for every modifier

    def layer_matcher() -> CloseMatches:
        if "layers" not in matchers:
            matchers["layers"] = CloseMatches(sorted(layer_names | layer_types))
        return matchers["layers"]

    def param_matcher() -> CloseMatches:
        if "params" not in matchers:
            matchers["params"] = names_matcher(records)
        return matchers["params"]
    for m in recipe.modifiers:
        strict = _pruning(m) or m.args.get("params_strict", True) is not False
        for path, params in _selector_groups(m):
            items = selector_items(params)
            good: list[str] = []
            for index, selector in items:
                keys = path + ((index,) if index is not None else ())
                if selector.startswith("re:"):
                    try:
                        compile_selectors([selector])
                    except PatternError:
                        continue  # P005, reported by validation
                good.append(selector)
            if not good:
                continue
            result = resolve(good, param_index)
            for index, selector in items:
                if selector not in result.unmatched:
                    continue
                keys = path + ((index,) if index is not None else ())
                close = closest_names(selector, records, matcher=param_matcher())
                yield Finding(
                    codes.P001,
                    f"'{selector}' matches no parameter of the model",
                    ("Closest: " + ", ".join(close) + ".") if close else "The model has no parameters.",
                    m, keys, severity=None if strict else Severity.WARNING,
                )
            if _freezes(m) and records and len({r.name for r in result.matched}) == len({r.name for r in records}):
                yield Finding(
                    codes.P011,
                    f"{m.type} freezes every parameter of the model ({len(records)}): from its "
                    "start, backward() has nothing to compute and training stops with an error",
                    "Select the parameters to freeze (e.g. 're:embeddings.*'), leaving some trainable.",
                    m, ("params",),
                )
            if not _pruning(m):
                continue
            broad = [s for s in good if s.upper() == "__ALL__" or s.startswith("re:")]
            if broad:
                extra = [r for r in resolve(broad, param_index).matched if r.is_bias_or_norm]
                if extra:
                    index = next(i for i, s in items if s in broad)
                    keys = path + ((index,) if index is not None else ())
                    shown = ", ".join(r.name for r in extra[:3]) + (" ..." if len(extra) > 3 else "")
                    yield Finding(
                        codes.P002,
                        f"{m.type} also prunes {len(extra)} bias or normalisation parameter(s): {shown}",
                        "Did you mean __ALL_PRUNABLE__ (the weights of Linear/Conv/Embedding layers)?",
                        m, keys,
                    )
            window = _window(m)
            exact = {s for s in good if not s.startswith("re:") and s.upper() not in ("__ALL__", "__ALL_PRUNABLE__")}
            if window is not None and not track_kind(m.type).holds_only:
                for r in result.matched:
                    pruned.setdefault(r.name, []).append((m, window, bool(exact & set(r.names))))
            if path == ("params",):
                yield from _mask_findings(m, result.matched, framework)
        yield from _layer_name_findings(m, layer_names, layer_types, layer_matcher)
    for name, uses in pruned.items():
        for j in range(1, len(uses)):
            m, window, by_exact = uses[j]
            for other, other_window, other_exact in uses[:j]:
                if other is m or (by_exact and other_exact):
                    continue  # E005 reports parameters named exactly in both
                if max(window[0], other_window[0]) < min(window[1], other_window[1]):
                    yield Finding(
                        codes.P003,
                        f"'{name}' is pruned by this {m.type} and by the {other.type} on line "
                        f"{other.span.line} over overlapping epochs",
                        "Give each parameter to one pruning modifier, or make the ranges follow each other.",
                        m, ("params",),
                    )
                    break


def lint_recipe(
    recipe: Recipe,
    records: Sequence[ParamRecord],
    framework: str | None = None,
    backend: str | None = None,
) -> list[Diagnostic]:
    """Validation diagnostics plus the parameter rules for ``recipe`` against ``records``."""
    out = validate_recipe(recipe, backend)
    for f in naming_scheme_findings(list(_param_findings(recipe, records, framework)), recipe, records):
        span = f.modifier.value_span(*f.keys) if f.keys else f.modifier.span
        out.append(f.code(f.message, f.hint, span, f.severity).in_file(recipe.path))
    seen: set[tuple[Any, ...]] = set()
    unique = []
    for d in sorted(out, key=lambda d: (d.line, d.column, d.code)):
        key = (d.code, d.line, d.column, d.message)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


def lint(
    recipe: RecipeInput,
    records: Sequence[ParamRecord],
    framework: str | None = None,
    variables: Mapping[str, Any] | None = None,
    target: str | None = None,
) -> list[Diagnostic]:
    """Load ``recipe`` and lint it against ``records`` (of a ``framework`` model).

    ``target`` lints the recipe for the other backend's names (``"keras"`` for a PyTorch
    model: Keras paths with the PyTorch names as aliases).
    """
    loaded, diagnostics = check(recipe, variables)
    if loaded is None:
        return diagnostics
    use = as_target(records, framework, target or framework)
    result = diagnostics + lint_recipe(loaded, use, target or framework, target)
    return apply_noqa(result, loaded.source.text) if loaded.source is not None else result


def lint_against_checkpoint(recipe: Any, names: ModelNames, compat: Compat | None = None,
                            variables: Any = None) -> list[Diagnostic]:
    """Load ``recipe`` (a path or text) and lint it against a checkpoint's ``names``: every
    validation diagnostic, then the pattern findings. A ``!Modifier`` recipe gets one error
    saying what to pass instead."""
    loaded, diagnostics = check(recipe, variables)
    if loaded is None:
        return diagnostics
    if loaded.dialect != "stage":
        return diagnostics + [codes.S005(
            "--model DIR (a Hugging Face checkpoint) lints stage/group recipes; this is a "
            "'!Modifier' recipe", "Pass the model as --model package.module:callable or a "
            ".pt/.safetensors state_dict, or a manifest with --params.", loaded.stages[0].span,
        ).in_file(loaded.path)]
    result = diagnostics + validate_recipe(loaded, None, compat) + lint_stage_model(loaded, names, compat)
    result.sort(key=lambda d: (d.line, d.column, d.code))
    return apply_noqa(result, loaded.source.text) if loaded.source is not None else result
