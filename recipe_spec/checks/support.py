"""Whether a modifier can run at all: an unknown modifier (M001), a one-shot modifier of the
stage/group dialect inside a ``!Modifier`` recipe (S007), arguments that break the schema or
its numbers (M002-M005), and what a backend cannot run (B001)."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping

from ..diagnostics import codes
from ..modifiers import spec
from ..recipe.findings import Finding
from ..recipe.model import Recipe
from ..registry import available_backends, backend_capabilities
from ..text.variables import did_you_mean
from .arguments import (
    deprecated_findings,
    number_findings,
    plain_numbers_ok,
    schema_findings,
    schema_ok,
)
from .schemas import modifier_names

__all__ = ["CORE_DIALECT_MODIFIERS", "backend_findings", "modifier_findings", "known_names"]

#: One-shot modifiers of SparseML's stage/group (LLM) dialect.
CORE_DIALECT_MODIFIERS = frozenset(
    {
        "SparseGPTModifier", "SparseOPTModifier", "SparseLlamaModifier", "GPTQModifier",
        "SmoothQuantModifier", "WandaPruningModifier", "LegacyQuantizationModifier",
        "LogarithmicEqualizationModifier", "OutputDistillationModifier",
    }
)


def backend_findings(recipe: Recipe, backend: str, capabilities: frozenset[str]) -> Iterator[Finding]:
    """B001 for each declared modifier that ``backend`` (with ``capabilities``) cannot run, and
    for each argument given a non-default value that needs a capability it lacks."""
    for m in recipe.modifiers:
        declared = spec(m.type)
        if declared is None or not declared.runtime:
            continue
        missing = declared.needs - capabilities
        if missing:
            others = sorted(
                b for b, caps in backend_capabilities().items() if b != backend and declared.needs <= caps
            )
            hint = (f"Backends with it: {', '.join(others)}." if others else
                    "No installed backend runs it yet; remove it, or validate without --backend.")
            yield Finding(
                codes.B001,
                f"{m.type} is not available on the {backend} backend (it needs "
                f"{', '.join(sorted(missing))})",
                hint, m,
            )
            continue
        for arg in declared.args:
            if arg.needs and arg.name in m.args and m.args[arg.name] != arg.default and not arg.needs <= capabilities:
                yield Finding(
                    codes.B001,
                    f"{m.type} argument `{arg.name}` is not supported on the {backend} backend "
                    f"(it needs {', '.join(sorted(arg.needs - capabilities))})",
                    f"Remove `{arg.name}` or set it to its default ({arg.default!r}).",
                    m, (arg.name,), on_key=True,
                )


def modifier_findings(
    recipe: Recipe, backend: str | None, numbers_ok: Mapping[int, bool] | None = None,
    checked: set[int] | frozenset[int] = frozenset(),
) -> Iterator[Finding]:
    """``checked``: the modifiers whose arguments already passed :func:`_args_ok`."""
    known = known_names()
    dialect_reported = False
    for m in recipe.modifiers:
        if m.type in CORE_DIALECT_MODIFIERS:
            if not dialect_reported:
                dialect_reported = True
                yield Finding(
                    codes.S007,
                    f"{m.type} is a one-shot modifier of SparseML's stage/group (LLM) dialect, "
                    "not a training-time modifier",
                    "recipe-spec reads the training-time '!Modifier' dialect; run this file "
                    "with a tool of the stage/group dialect (recipe_spec.oneshot, llm-compressor), or remove the one-shot modifiers.",
                    m,
                )
            continue
        if m.type not in known:
            hint = did_you_mean(m.type, known) or "`recipe-spec schema` lists every modifier."
            yield Finding(codes.M001, f"unknown modifier '{m.type}'", hint, m)
            continue
        if id(m) in checked:
            yield from deprecated_findings(m)
            continue
        ok = numbers_ok.get(id(m)) if numbers_ok is not None else None
        numbers = [] if ok or (ok is None and plain_numbers_ok(m.args)) else number_findings(m)
        if numbers:
            # The schema and the rules compute with the numbers: only these are reported.
            yield from numbers
        elif not schema_ok(m):
            yield from schema_findings(m)
    if backend is not None:
        caps = backend_capabilities().get(backend)
        if caps is None:
            raise ValueError(f"unknown backend {backend!r}; available: {', '.join(available_backends())}")
        yield from backend_findings(recipe, backend, caps)


@functools.cache
def known_names() -> frozenset[str]:
    return frozenset(modifier_names())
