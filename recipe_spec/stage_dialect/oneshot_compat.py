"""Where llm-compressor's ``oneshot()`` does something other than a one-shot recipe says
(C005, C006), checked per release like the other tool-version rules.

- **C005**: SparseGPTModifier / WandaPruningModifier (llm-compressor 0.5 and later, the releases
  with ``ignore``) name each hooked layer ``f"{target match}.{name inside it}"``. When a target
  matches the layer itself (``targets: [Linear]``, the default) the name ends in ``.``
  (``lm_head.``), so a plain name in ``ignore`` never equals it and the layer is pruned; a
  ``re:`` pattern (``re:.*lm_head``, matched with ``re.match``) still excludes it.
- **C006**: MagnitudePruningModifier multiplies its masks into the weights only after optimizer
  steps (``OPTIM_POST_STEP``), in every llm-compressor release; ``oneshot()`` takes none, so
  the weights stay dense. A modifier scheduled over training (an ``end`` after its ``start``)
  or in a ``run_type: train`` stage is left alone.

recipe-spec's ``oneshot`` does what the recipe says in both cases; these are warnings about the
other tool.

>>> from recipe_spec import load
>>> r = load("s_stage:\\n  s_modifiers:\\n    WandaPruningModifier:\\n      sparsity: 0.5\\n"
...          "      ignore: [lm_head, 're:.*embed']\\n")
>>> [(d.code, d.line, d.column) for d in oneshot_differences(r, None)]
[('C005', 5, 16)]
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic, Severity
from ..recipe.model import Modifier, Recipe
from ..text.frozen import FrozenDict
from .versions import Compat, affects

__all__ = ["oneshot_differences", "IGNORE_NAME_RELEASES", "MAGNITUDE_RELEASES"]

#: The llm-compressor releases whose SparseGPT/Wanda read ``ignore`` and name hooked layers
#: ``<match>.<inside>`` (``sgpt_base.py``: ``name = f"{layer_name}.{name}"``).
IGNORE_NAME_RELEASES = {"llmcompressor": ">=0.5"}
#: The llm-compressor releases whose MagnitudePruningModifier applies masks only on steps.
MAGNITUDE_RELEASES = {"llmcompressor": ""}

_LAYER_PRUNERS = ("SparseGPTModifier", "WandaPruningModifier")
#: Target class names that match a prunable layer itself (llm-compressor's prunable types).
_LAYER_CLASSES = frozenset({"Linear", "Conv1d", "Conv2d", "Conv3d", "Conv1D", "__ALL_PRUNABLE__"})
_CLASS_LIKE = re.compile(r"^[A-Z][A-Za-z0-9_]*$")


def _strings(value: Any) -> list[tuple[tuple[Any, ...], str]]:
    if isinstance(value, str):
        return [((), value)]
    if isinstance(value, (tuple, list)):
        return [((i,), v) for i, v in enumerate(value) if isinstance(v, str)]
    return []


def targets_layers(m: Modifier) -> bool:
    """Whether a target matches prunable layers themselves (the default ``[Linear]``)."""
    targets = m.args.get("targets")
    if targets is None:
        return True
    return any(t in _LAYER_CLASSES for _, t in _strings(targets))


def _plain_ignores(m: Modifier) -> Iterator[tuple[tuple[Any, ...], str]]:
    for where, name in _strings(m.args.get("ignore")):
        if not name.startswith("re:") and not _CLASS_LIKE.match(name) and name.strip():
            yield where, name


def _instead(name: str) -> str:
    return "re:.*lm_head" if name.rsplit(".", 1)[-1] == "lm_head" else "re:" + re.escape(name)


def _ignore_names(recipe: Recipe, m: Modifier, compat: Compat | None) -> Iterator[Diagnostic]:
    if m.type not in _LAYER_PRUNERS or not targets_layers(m):
        return
    hit, versions = affects(IGNORE_NAME_RELEASES, compat)
    if not hit:
        return
    for where, name in _plain_ignores(m):
        instead = _instead(name)
        yield codes.C005(
            f"ignore '{name}' does not exclude {name} in {versions}: {m.type} names the layers "
            f"its targets match '<name>.' (here '{name}.'), so the plain name matches nothing "
            f"and the layer is pruned; recipe-spec's oneshot excludes it as written",
            f"Write '{instead}', which both tools read the same way.",
            m.value_span("ignore", *where), Severity.WARNING,
        ).in_file(recipe.path)


def _stage_run_type(recipe: Recipe, m: Modifier) -> Any:
    root = recipe.document.value if recipe.document is not None else None
    if not isinstance(root, FrozenDict) or m.stage is None:
        return None
    stage = root.get(m.stage)
    return stage.get("run_type") if isinstance(stage, FrozenDict) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _over_training(recipe: Recipe, m: Modifier) -> bool:
    """Whether the modifier is scheduled over training steps (then it prunes as it should)."""
    if _stage_run_type(recipe, m) == "train":
        return True
    end, start = _number(m.args.get("end")), _number(m.args.get("start"))
    return end is not None and end > (start if start is not None else 0.0)


def _magnitude(recipe: Recipe, m: Modifier, compat: Compat | None) -> Iterator[Diagnostic]:
    if m.type != "MagnitudePruningModifier" or _over_training(recipe, m):
        return
    hit, versions = affects(MAGNITUDE_RELEASES, compat)
    if not hit:
        return
    final = _number(m.args.get("final_sparsity"))
    what = f"to final_sparsity {final:g}" if final is not None else "to final_sparsity"
    where = "every llm-compressor release" if versions == "llm-compressor" else versions
    yield codes.C006(
        f"MagnitudePruningModifier prunes nothing in the oneshot() of {where}: it "
        "applies its masks to the weights only after optimizer steps, and oneshot() takes none, "
        f"so the model stays dense; recipe-spec's oneshot prunes the targets {what}",
        "With llm-compressor, prune in one shot with SparseGPTModifier or WandaPruningModifier, "
        "or train with the recipe; recipe-spec's oneshot runs it as written.",
        m.span, Severity.WARNING,
    ).in_file(recipe.path)


def oneshot_differences(recipe: Recipe, compat: Compat | None) -> list[Diagnostic]:
    """The C005/C006 warnings of a stage/group ``recipe`` under ``compat`` (None: every
    release; a warning names the releases it concerns)."""
    out: list[Diagnostic] = []
    for m in recipe.modifiers:
        out += _ignore_names(recipe, m, compat)
        out += _magnitude(recipe, m, compat)
    return out
