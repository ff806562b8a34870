"""Smoothing mappings and how they resolve to a model's layers, as llm-compressor 0.14 resolves
them (compressed-tensors 0.19 ``match_modules_set``), over module names and class names only.

A mapping pairs a *smooth* layer (its output is divided by per-channel scales) with the
*balance* layers that layer feeds (their weights' input columns are multiplied by the same
scales). A recipe writes it SmoothQuant's way, ``[[balance, ...], smooth]``, or AWQ's way,
``{smooth_layer: ..., balance_layers: [...], activation_hook_target: ...}``; each string is a
module name, a class name, or ``re:<pattern>`` matched with ``re.match`` (a prefix match).

Resolution (:func:`match_sets`) walks the modules in ``named_modules`` order and groups the
matches of all of a mapping's patterns by their lowest common ancestor: a new group starts
when every pattern has a match and the next match lies outside the current group's
ancestor. So ``re:.*input_layernorm`` with ``re:.*q_proj`` pairs each decoder layer's norm
with that layer's projections.

:func:`unresolved_mappings` is the lint's question: which mapping entry resolves to no layer
of a model known by its module names (e.g. read from a checkpoint's headers).

>>> names = ["model.layers.0.input_layernorm", "model.layers.0.self_attn.q_proj",
...          "model.layers.1.input_layernorm", "model.layers.1.self_attn.q_proj"]
>>> [[list(g) for g in s] for s in match_sets([(n, ()) for n in names], ["re:.*q_proj", "re:.*input_layernorm"])][1]
[['model.layers.1.self_attn.q_proj'], ['model.layers.1.input_layernorm']]
>>> unresolved_mappings(names, [SmoothMapping("re:.*post_attention_layernorm", ("re:.*gate_proj",))])
[UnresolvedMapping(index=0, mapping=SmoothMapping(smooth='re:.*post_attention_layernorm', balance=('re:.*gate_proj',), hook=None), missing=('re:.*post_attention_layernorm', 're:.*gate_proj'))]
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..matching import matches

__all__ = ["SmoothMapping", "UnresolvedMapping", "parse_mappings", "match_sets",
           "common_ancestor", "unresolved_mappings"]

#: A module as matching sees it: its name and its class names (type and bases).
Named = tuple[str, Sequence[str]]


@dataclass(frozen=True)
class SmoothMapping:
    """One mapping: the ``smooth`` layer's pattern, the ``balance`` layers' patterns, and AWQ's
    ``activation_hook_target`` (``hook``: the submodule of the balance layers' common parent
    whose input is observed; None: the first balance layer)."""

    smooth: str
    balance: tuple[str, ...]
    hook: str | None = None

    @property
    def patterns(self) -> tuple[str, ...]:
        """The smooth pattern, then the balance ones."""
        return (self.smooth, *self.balance)


@dataclass(frozen=True)
class UnresolvedMapping:
    """A mapping entry (``index`` in its list) that resolves to no layer, and its patterns
    that match no module (``missing``; empty when each matches something but no group of
    them completes)."""

    index: int
    mapping: SmoothMapping
    missing: tuple[str, ...]


def _leaves(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    raise ValueError(f"a mapping holds layer names or patterns (strings), got {value!r}")


def parse_mappings(value: Any, style: str) -> tuple[SmoothMapping, ...]:
    """A recipe's ``mappings`` list read as :class:`SmoothMapping` entries. ``style``:
    ``smoothquant`` (``[[balance...], smooth]``: every string but the last is a balance
    pattern, as llm-compressor flattens it) or ``awq`` (``{smooth_layer, balance_layers,
    activation_hook_target}``). Raises ValueError naming the entry that is malformed."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"mappings must be a list, got {type(value).__name__}")
    out = []
    for i, entry in enumerate(value):
        if style == "awq":
            if not isinstance(entry, Mapping) or set(entry) - {"smooth_layer", "balance_layers",
                                                             "activation_hook_target"}:
                raise ValueError(f"mappings[{i}]: an AWQ mapping is {{smooth_layer: ..., balance_layers: "
                                 f"[...]}} (optionally activation_hook_target), got {entry!r}")
            smooth, balance = entry.get("smooth_layer"), entry.get("balance_layers")
            if not isinstance(smooth, str) or not isinstance(balance, (list, tuple)) or not balance:
                raise ValueError(f"mappings[{i}]: smooth_layer must be a string and balance_layers a "
                                 f"non-empty list, got {entry!r}")
            hook = entry.get("activation_hook_target")
            out.append(SmoothMapping(smooth, tuple(_leaves(balance)), None if hook is None else str(hook)))
            continue
        leaves = _leaves(entry) if isinstance(entry, (list, tuple)) else []
        if len(leaves) < 2:
            raise ValueError(f"mappings[{i}]: a SmoothQuant mapping is [[balance layers], smooth layer], "
                             f"got {entry!r}")
        out.append(SmoothMapping(leaves[-1], tuple(leaves[:-1])))
    return tuple(out)


def common_ancestor(names: Iterable[str | None]) -> str:
    """compressed-tensors' ``get_lowest_common_ancestor_name``: the deepest module name that
    contains every one of ``names`` (``""``: the model).

    >>> common_ancestor(["a.b.q", "a.b.k"]), common_ancestor(["a.b"]), common_ancestor(["ab.", "a."])
    ('a.b', 'a.b', '')
    """
    kept = [n for n in names if n is not None]
    if not kept:
        return ""
    prefix = os.path.commonprefix(["." + min(kept) + ".", "." + max(kept) + "."])
    return prefix[1:prefix.rfind(".")]


def match_sets(modules: Iterable[Named], targets: Sequence[str]) -> Iterator[list[list[str]]]:
    """compressed-tensors' ``match_modules_set``: groups of module names, one list per target
    (in ``targets`` order, each in module order), grouped by parent context (see the module
    docstring). Raises ValueError when a module matches two targets or the last group is
    incomplete (some target has no match in it)."""
    found: dict[str, list[str]] = {t: [] for t in targets}
    parent: str | None = None
    unmatched = set(targets)
    for name, classes in modules:
        hits = set()
        for target in targets:
            if not matches(target, name, classes):
                continue
            context = common_ancestor([name, parent])
            if not unmatched and context != parent:
                yield [found[t] for t in targets]
                found = {t: [] for t in targets}
                context = name
                unmatched = set(targets)
            found[target].append(name)
            parent = context
            unmatched.discard(target)
            hits.add(target)
        if len(hits) > 1:
            raise ValueError(f"module {name} is matched by several patterns of one mapping: "
                             f"{', '.join(sorted(hits))}")
    if unmatched == set(targets):
        return
    if not unmatched:
        yield [found[t] for t in targets]
        return
    raise ValueError(f"the last group of layers is incomplete: {', '.join(sorted(set(targets) - unmatched))} "
                     f"matched but {', '.join(sorted(unmatched))} did not")


def unresolved_mappings(names: Iterable[str], mappings: Sequence[SmoothMapping]) -> list[UnresolvedMapping]:
    """The entries of ``mappings`` that resolve to no layer of a model whose modules are
    ``names`` (class names unknown: a class-name pattern matches nothing), in list order.

    An entry resolves when :func:`match_sets` yields at least one complete group for its
    patterns; ``missing`` lists its patterns that match no name. An entry whose groups do not
    close (a ValueError in resolution) is reported with ``missing`` empty."""
    modules = [(n, ()) for n in names]
    out = []
    for i, mapping in enumerate(mappings):
        missing = tuple(p for p in mapping.patterns if not any(matches(p, n, ()) for n, _ in modules))
        if missing:
            out.append(UnresolvedMapping(i, mapping, missing))
            continue
        try:
            resolved = any(True for _ in match_sets(modules, mapping.patterns))
        except ValueError:
            resolved = False
        if not resolved:
            out.append(UnresolvedMapping(i, mapping, ()))
    return out
