"""A recipe entry's arguments as :func:`recipe_spec.oneshot` reads them, from the one
declaration of each argument: the stage/group catalogue (:mod:`recipe_spec.stage_dialect`).

The catalogue says, per argument, its type, range, releases, its ``default`` (in its schema)
and what a one-shot run does with it (:attr:`~recipe_spec.modifiers.spec.Arg.oneshot`:
``runs``, ``inert``, ``default``; nothing: refused). Nothing here lists arguments or defaults a
second time: :func:`declared` reads the newest llm-compressor release's declaration (the
release whose reading a run follows), :func:`value` gives a written value or its default,
:func:`refuse_unrun` refuses what the run does not honour.

>>> sorted(declared("WandaPruningModifier"))[:4]
['end', 'group', 'ignore', 'index']
>>> declared("GPTQModifier")["block_size"].default, declared("GPTQModifier")["kv_cache_scheme"].oneshot
(128, 'default')
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic
from ..modifiers.spec import Arg
from ..recipe.model import Modifier, Recipe
from ..stage_dialect.catalogue import variant_in
from ..stage_dialect.spec import BASE_ARGS
from ..stage_dialect.versions import newest

__all__ = ["declared", "value", "refuse_unrun", "defaults_only", "strings", "b001", "release_of"]


@functools.cache
def declared(name: str) -> Mapping[str, Arg]:
    """The arguments a one-shot run of modifier ``name`` reads, refuses unless at their default,
    or accepts without effect, by name: the newest llm-compressor release's declaration, and
    the base class's arguments (an argument the catalogue gives no ``oneshot`` use is left out:
    the run refuses it)."""
    release = ("llmcompressor", newest("llmcompressor"))
    spec = variant_in(name, release)
    args = {a.name: a for a in BASE_ARGS}
    if spec is not None:
        args.update(spec.args_in(release))
    return {k: a for k, a in args.items() if a.oneshot}


def value(m: Modifier | Mapping[str, Any], key: str, name: str | None = None) -> Any:
    """The value of argument ``key`` of entry ``m`` (or of an argument mapping of modifier
    ``name``): as written, or its declared default when absent or null."""
    args = m.args if isinstance(m, Modifier) else m
    found = args.get(key)
    if found is not None:
        return found
    arg = declared(name or m.type).get(key)  # type: ignore[union-attr]
    return arg.default if arg is not None else None


def defaults_only(name: str) -> dict[str, Any]:
    """The arguments of ``name`` a run honours only at their default, with that default."""
    return {k: a.default for k, a in declared(name).items() if a.oneshot == "default"}


def b001(recipe: Recipe, m: Modifier, message: str, hint: str, key: str | None = None) -> Diagnostic:
    """A located B001 about entry ``m`` (at argument ``key`` when given)."""
    span = m.key_span(key) if key is not None else m.span
    return codes.B001(message, hint, span).in_file(recipe.path)


def refuse_unrun(recipe: Recipe, m: Modifier, errors: list[Diagnostic], name: str | None = None,
                 args: Mapping[str, Any] | None = None, skip: Collection[str] = ()) -> None:
    """A located B001 in ``errors`` for each argument of ``m`` (or ``args``, read as modifier
    ``name``'s) that the run does not honour: one the catalogue gives no one-shot use, and one
    it honours only at its default, written with another value. ``skip``: arguments another
    reading accounts for (an older release's form)."""
    name = name or m.type
    given = m.args if args is None else args
    uses = declared(name)
    for key in sorted(k for k in given if isinstance(k, str) and k not in skip and k not in uses):
        errors.append(b001(recipe, m, f"{m.type} argument `{key}` is not run by recipe_spec.oneshot",
                           f"Remove `{key}`, or run this recipe with llm-compressor.", key))
    for key, default in defaults_only(name).items():
        if key in skip or key not in given:
            continue
        written = given[key]
        if written != default and not (default is None and written in ({}, [])):
            errors.append(b001(recipe, m, f"{m.type} `{key}: {written!r}` is not run by recipe_spec.oneshot",
                               f"Leave `{key}` out, or run this recipe with llm-compressor.", key))


def strings(value: Any, default: tuple[str, ...] = ()) -> tuple[str, ...]:
    """A string or list of strings as a tuple (``default`` for None)."""
    if value is None:
        return default
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def release_of(compat: Any) -> tuple[int, ...] | None:
    """The llm-compressor release a ``compat`` choice (``"llmcompressor==0.10"``) names, whose
    reading a run follows (None: the newest); a ValueError for a choice a run cannot follow."""
    if compat is None:
        return None
    from ..stage_dialect import Compat

    parsed = compat if isinstance(compat, Compat) else Compat.parse(str(compat))
    if parsed.tool != "llmcompressor" or tuple(parsed.version) < (0, 5):
        raise ValueError(f"compat {str(compat)!r}: recipe_spec.oneshot reads recipes as an llm-compressor "
                         "release from 0.5 to 0.14 (llmcompressor==0.5 ... llmcompressor==0.14; before 0.5 its "
                         "modifiers took other arguments, e.g. no ignore); `recipe-spec validate --compat` "
                         "checks a recipe against older ones")
    return tuple(parsed.version)
