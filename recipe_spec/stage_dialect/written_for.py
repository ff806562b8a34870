"""Which tool a stage/group recipe was written for, when ``--compat`` does not say:
:func:`written_for`.

Two tools read the dialect: SparseML 1.6-1.9 and llm-compressor, its maintained successor.
Checked against every release of both, a recipe written for llm-compressor would be told
about SparseML releases its author never meant (``QuantizationModifier has no argument
config_groups in SparseML ≤1.7``). So a recipe that uses what only llm-compressor reads (one
of its modifiers or arguments, from the catalogue; ``config_groups`` or a compressed-tensors
preset ``scheme``; ``targets`` on a one-shot modifier), and
nothing that only SparseML reads, is checked against llm-compressor's releases alone. Any
other recipe, one that both tools read or one that needs SparseML, is checked against every
release of both, as before.

>>> from recipe_spec import loads
>>> written_for(loads("s_stage:\\n  g_modifiers:\\n    GPTQModifier: {scheme: W4A16, targets: Linear}\\n"))
('llmcompressor',)
>>> written_for(loads("s_stage:\\n  g_modifiers:\\n    SparseGPTModifier: {sparsity: 0.5, quantize: false}\\n"))
('sparseml', 'llmcompressor')
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from ..recipe.model import Recipe
from .catalogue import variant_in
from .quant_args import canonical_preset
from .versions import RELEASES, TIMELINE, TOOL_LABELS, TOOLS

__all__ = ["written_for", "checked_against"]

@functools.lru_cache(maxsize=1024)
def _one_shot(name: str) -> bool:
    """Whether ``name`` is a one-shot modifier in llm-compressor's newest release."""
    spec = variant_in(name, ("llmcompressor", RELEASES["llmcompressor"][-1]))
    return spec is not None and not spec.training


@functools.lru_cache(maxsize=1024)
def _modifier_tools(name: str) -> frozenset[str]:
    return frozenset(t for t, v in TIMELINE if variant_in(name, (t, v)) is not None)


@functools.lru_cache(maxsize=4096)
def _arg_tools(name: str, key: str) -> frozenset[str]:
    """The tools some release of which takes argument ``key`` of modifier ``name``."""
    found = set()
    for pair in TIMELINE:
        spec = variant_in(name, pair)
        if spec is not None and key in spec.args_in(pair):
            found.add(pair[0])
    return frozenset(found)


def _preset(value: object) -> bool:
    if isinstance(value, str):
        return canonical_preset(value) is not None
    return isinstance(value, Mapping) and any(isinstance(k, str) and canonical_preset(k) for k in value)


def written_for(recipe: Recipe) -> tuple[str, ...]:
    """The tools whose releases a stage/group ``recipe`` is checked against without
    ``--compat``: ``("llmcompressor",)`` for a recipe only llm-compressor reads as written
    (see the module docstring), else every tool."""
    newer = older = False
    for m in recipe.modifiers:
        tools = _modifier_tools(m.type)
        if not tools:
            continue  # an unknown modifier says nothing about the tool
        if "sparseml" not in tools:
            newer = True
        elif "llmcompressor" not in tools:
            older = True
        args = m.raw_args if isinstance(m.raw_args, Mapping) else {}
        for key, value in args.items():
            if not isinstance(key, str):
                continue
            if key == "config_groups" or (key == "scheme" and _preset(value)) \
                    or (key == "targets" and _one_shot(m.type)):
                newer = True
                continue
            where = _arg_tools(m.type, key)
            if where == {"llmcompressor"}:
                newer = True
            elif where == {"sparseml"}:
                older = True
    return ("llmcompressor",) if newer and not older else TOOLS


def checked_against(tools: tuple[str, ...], newest_only: bool = False) -> str:
    """The releases :func:`written_for`'s answer covers (``newest_only``: each tool's newest),
    in words.

    >>> checked_against(("llmcompressor",)), checked_against(("llmcompressor",), newest_only=True)
    ('llm-compressor 0.1–0.14', 'llm-compressor 0.14')
    """
    if newest_only:
        return ", ".join(f"{TOOL_LABELS[t]} {RELEASES[t][-1]}" for t in tools)
    return ", ".join(f"{TOOL_LABELS[t]} {RELEASES[t][0]}–{RELEASES[t][-1]}" for t in tools)

