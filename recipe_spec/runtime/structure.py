"""Checks at ``modify()`` that need the model's layers, written once for every backend: a
removed layer that would change the shape of what flows through it (P010), and a quantization
modifier with no layer left to quantize (P007, an error at run time). A backend supplies what
only it knows: why one of its layers cannot stand in as an identity, and which layers a
quantization modifier selects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from ..diagnostics import Severity, codes
from ..modifiers import emits_of
from ..recipe.findings import Finding
from ..recipe.model import Modifier

__all__ = ["reshaping_layer_findings", "nothing_to_quantize_findings"]


def reshaping_layer_findings(modifiers: Iterable[Modifier], why: Callable[[str], str | None]) -> Iterator[Finding]:
    """P010 for each layer a layer-removing modifier names whose output cannot have the shape
    of its input. ``why(name)``: the reason (``"a Linear from 16 to 32 features"``), or None
    when the layer may be an identity or the model lacks it (that is P006's)."""
    for m in modifiers:
        layers = m.args.get("layers")
        if "layers" not in emits_of(m.type) or not isinstance(layers, (str, list, tuple)):
            continue
        single = isinstance(layers, str)
        for i, name in enumerate([layers] if single else layers):
            reason = why(name) if isinstance(name, str) else None
            if reason is not None:
                yield Finding(
                    codes.P010,
                    f"layers names '{name}', {reason}: replaced by an identity at the start step, "
                    "its input would reach the next layer in the wrong shape",
                    "Remove only layers whose output has their input's shape (a residual block, "
                    "a square Linear), or drop this entry.",
                    m, ("layers",) if single else ("layers", i),
                )


def _start(m: Modifier) -> float:
    value = m.args.get("start_epoch", -1)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def nothing_to_quantize_findings(modifiers: Iterable[Modifier], targets: Callable[[Modifier], Sequence[str]],
                                 kinds: str = "Linear or Conv") -> Iterator[Finding]:
    """P007, an error here, for each quantization modifier that would find no layer of the
    model to quantize at its start: its ``submodules`` / ``ignore`` rule out every one, or a
    quantization modifier that starts earlier quantizes them all first. ``targets(m)``: the
    names of the layers ``m`` selects; ``kinds``: the layer kinds the backend quantizes."""
    quantizing = [m for m in modifiers if "quantization" in emits_of(m.type)]
    claimed: dict[str, Modifier] = {}  # layer name -> the modifier that quantizes it first
    for m in sorted(quantizing, key=lambda m: (max(_start(m), 0.0), m.span.line)):
        names = list(targets(m))
        left = [n for n in names if n not in claimed]
        if names and not left:
            first = claimed[names[0]]
            yield Finding(
                codes.P007,
                f"{m.type} finds no layer left to quantize: the {first.type} on line {first.span.line} "
                f"quantizes every one it selects ({', '.join(names[:3])}{' ...' if len(names) > 3 else ''}) first",
                "Keep one quantization modifier, or give each its own layers (submodules / ignore).",
                m, (), severity=Severity.ERROR,
            )
        elif not names:
            keys = ("ignore",) if m.args.get("ignore") else ("submodules",) if m.args.get("submodules") else ()
            yield Finding(
                codes.P007,
                f"{m.type} leaves no {kinds} layer of the model to quantize"
                + (f" ({', '.join(keys)} rule{'s' if len(keys) > 1 else ''} out every one)" if keys else ""),
                f"Narrow ignore, or name submodules that hold {kinds} layers.",
                m, keys, on_key=bool(keys), severity=Severity.ERROR,
            )
        claimed.update((n, m) for n in left)
