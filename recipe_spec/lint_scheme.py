"""Lint's one finding for a recipe written for another naming scheme (P013).

When most of a recipe's parameter names and patterns match nothing in the model (SparseML's
ResNet-50 recipes name ``sections.0.0.conv1.weight``, torchvision's ResNet-50 has
``layer1.0.conv1.weight``), the cause is one: the recipe was written for a model that names
its parameters otherwise. :func:`naming_scheme_findings` replaces the P001 findings ("matches
no parameter") by one P013 that names both layouts and gives the closest mapping
(:func:`recipe_spec.params.schemes.infer_mapping`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .diagnostics import codes
from .diagnostics.base import Severity
from .params.records import ParamRecord
from .params.schemes import infer_mapping, scheme_label
from .params.selectors import selector_items
from .recipe.findings import Finding
from .recipe.model import Modifier, Recipe

__all__ = ["MIN_MISSES", "naming_scheme_findings", "selector_count"]

#: Fewer missed names than this are reported one by one (P001), whatever their share.
MIN_MISSES = 5
_TOKENS = ("__ALL__", "__ALL_PRUNABLE__")


def _groups(m: Modifier) -> list[Any]:
    """The selector values of ``m``: ``params`` and each group of a ``final_sparsity`` mapping."""
    out = [m.args["params"]] if "params" in m.args else []
    final = m.args.get("final_sparsity")
    if isinstance(final, dict) or hasattr(final, "items"):
        out += list(final.values())  # type: ignore[union-attr]
    return out


def selector_count(recipe: Recipe) -> int:
    """How many parameter names and patterns the recipe's modifiers give."""
    return sum(len(selector_items(group)) for m in recipe.modifiers for group in _groups(m))


def _selector(f: Finding) -> str | None:
    """The selector a P001 finding is about (its ``keys`` lead to it in the modifier's args)."""
    value: Any = f.modifier.args
    for key in f.keys:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            return None
    return value if isinstance(value, str) else None


def naming_scheme_findings(findings: list[Finding], recipe: Recipe, records: Sequence[ParamRecord]) -> list[Finding]:
    """``findings`` with the P001s replaced by one P013 when most of the recipe's names and
    patterns (and at least :data:`MIN_MISSES`) match no parameter; otherwise unchanged."""
    missed = [(f, s) for f in findings if f.code is codes.P001 and (s := _selector(f)) is not None]
    total = selector_count(recipe)
    if len(missed) < MIN_MISSES or 2 * len(missed) <= total:
        return findings
    exact = [s for _, s in missed if not s.startswith("re:") and s.upper() not in _TOKENS]
    model_names = {n for r in records for n in r.names}
    given = {s for m in recipe.modifiers for g in _groups(m) for _, s in selector_items(g)}
    mapping = infer_mapping(exact, model_names, taken=given & model_names,
                            preferred={n for r in records if r.prunable for n in r.names})
    first, _ = missed[0]
    lines = sorted({f.modifier.span.line for f, _ in missed} - {first.modifier.span.line})
    message = (
        f"{len(missed)} of the recipe's {total} parameter names and patterns match no parameter "
        f"of the model: the recipe was written for {scheme_label(s for _, s in missed)}, the "
        f"model uses {scheme_label(r.name for r in records)}"
        + (f" (also the modifiers on line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))})"
           if lines else "")
    )
    if mapping.mapped:
        example = next((s, mapping.mapped[s]) for s in exact if s in mapping.mapped)
        rest = [s for s in exact if s not in mapping.mapped]
        hint = (
            f"Closest mapping: {mapping} (fits {len(mapping.mapped)} of the {len(exact)} names, e.g. "
            f"'{example[0]}' -> '{example[1]}')."
            + (f" Not fitted: {', '.join(repr(s) for s in rest[:3])}{' ...' if len(rest) > 3 else ''}." if rest else "")
            + " Rename the parameters in the recipe, or lint against the model it was written for."
        )
    else:
        hint = (f"No renaming fits two or more of them. First: '{missed[0][1]}'; {first.hint} "
                "Lint against the model the recipe was written for, or rename its parameters.")
    strict = any(f.severity is None for f, _ in missed)
    dropped = {id(f) for f, _ in missed}
    one = Finding(codes.P013, message, hint, first.modifier, first.keys,
                  severity=None if strict else Severity.WARNING)
    return [f for f in findings if id(f) not in dropped] + [one]
