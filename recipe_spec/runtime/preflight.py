"""The checks before training, at ``modify()`` and ``apply()``: a recipe the backend cannot run
as written, or whose patterns do not fit the model, is refused with located errors before the
model is touched. The runtime (:class:`~.base.RecipeRuntime`) calls them; they read validation,
lint and the stage/group dialect, which the runtime itself never imports.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

from ..checks.support import backend_findings, modifier_findings
from ..diagnostics.base import Diagnostic, RecipeError, Severity
from ..lint import lint_recipe
from ..modifiers import emits_of
from ..params.records import ParamRecord
from ..recipe.findings import positioned
from ..recipe.model import Recipe
from ..registry import get_backend, installed_backends
from ..stage_dialect.to_modifiers import runnable, twin_recipe
from ..stage_dialect.validate import refuse_to_run
from ..validation import apply_noqa, validate_recipe

__all__ = [
    "BLOCKING_CODES", "refuse_invalid", "caller_stacklevel", "check_before_training",
    "check_recipe_fits", "check_backend_runs", "runnable_recipe",
]

#: Lint codes that stop ``modify()``: the recipe cannot run on this model as written.
BLOCKING_CODES = ("P001", "P004", "P005", "P006", "P011", "P013")


#: Recipes :func:`refuse_invalid` passed, and under which ``compat`` (a Recipe is immutable and
#: hashed by identity).
_VALID: weakref.WeakKeyDictionary[Recipe, set[str | None]] = weakref.WeakKeyDictionary()
#: (file, code, line, column, message) of each warning already given in this process.
_WARNED: set[tuple[Any, ...]] = set()
_LOG = logging.getLogger("recipe_spec")


def refuse_invalid(recipe: Recipe, compat: str | None = None, quiet: frozenset[str] = frozenset()) -> None:
    """``recipe-spec validate``'s verdict on a loaded recipe, before anything runs it: raise
    :class:`RecipeError` with every error ``validate`` reports (file:line:col, code, hint; a
    ``# noqa`` comment silences one here too), and give each warning once per process
    (``UserWarning``; infos go to the ``recipe_spec`` logger). Both dialects
    (:func:`recipe_spec.validation.validate_recipe`). The manager calls it when it is built
    and every backend runtime when it is compiled, so nothing ``validate`` refuses reaches a
    model or an optimizer. ``compat``: the tool release whose rules a stage/group recipe is
    run by (``"llmcompressor"`` for one-shot runs: the other releases' differences are not this
    run's concern); None checks every release, as ``validate`` does. ``quiet``: codes of
    warnings not told (a one-shot run leaves out C005-C007, which say what llm-compressor would
    do otherwise than this run does)."""
    if compat in _VALID.get(recipe, ()):
        return
    found = list(recipe.warnings) + validate_recipe(recipe, compat=compat if recipe.dialect == "stage" else None)
    text = recipe.source.text if recipe.source is not None else ""
    diagnostics = apply_noqa(found, text) if text else found
    errors = [d for d in diagnostics if d.severity is Severity.ERROR]
    if errors:
        raise RecipeError(errors)
    for d in diagnostics:
        if d.code not in quiet:
            _tell_once(d)
    _VALID.setdefault(recipe, set()).add(compat)


def _tell_once(d: Diagnostic) -> None:
    key = (d.file, d.code, d.line, d.column, d.message)
    if key in _WARNED:
        return
    _WARNED.add(key)
    if d.severity is Severity.WARNING:
        warnings.warn(d.format(), UserWarning, stacklevel=caller_stacklevel())
    else:
        _LOG.info("%s", d.format())


def check_recipe_fits(recipe: Recipe, records: Sequence[ParamRecord], framework: str) -> None:
    """Raise :class:`RecipeError` (pattern, line, closest names) when the recipe's patterns,
    mask shapes or QAT layers do not fit the model: at ``modify()``, not at run time."""
    problems = [
        d for d in lint_recipe(recipe, records, framework)
        if d.severity is Severity.ERROR and d.code in BLOCKING_CODES
    ]
    if problems:
        raise RecipeError(problems)


def check_backend_runs(recipe: Recipe, backend: str, capabilities: frozenset[str], runtime: Any) -> None:
    """Refuse, before training, a recipe the backend cannot run as written: an unknown modifier
    (M001) or a one-shot one of the stage/group dialect (S007), a modifier (or an argument) that
    needs a capability the backend lacks (B001), each a located error; a stage/group recipe
    that reaches here could not be written as its ``!Modifier`` twins (B001 per modifier
    refused, :mod:`recipe_spec.stage_dialect.to_modifiers`); an event
    target with no handler on ``runtime`` (``_on_<target>``) is a backend defect, never
    dropped silently."""
    if recipe.dialect == "stage":  # RecipeRuntime runs a runnable one as its twins already
        refused = refuse_to_run(recipe, backend)
        if refused:
            raise RecipeError(refused)
        recipe = twin_recipe(recipe)
    problems = [positioned(f, recipe) for f in modifier_findings(recipe, None) if f.code.id in ("M001", "S007")]
    problems += [positioned(f, recipe) for f in backend_findings(recipe, backend, capabilities)]
    if problems:
        raise RecipeError(problems)
    for m in recipe.modifiers:
        for target in sorted(emits_of(m.type)):
            if not callable(getattr(runtime, f"_on_{target}", None)):
                raise NotImplementedError(
                    f"the {backend} backend declares what {m.type} (line {m.span.line}) needs "
                    f"but has no handler for its '{target}' events (_on_{target}); this is a "
                    "backend defect: report it"
                )


def runnable_recipe(recipe: Recipe, framework: str) -> Recipe:
    """The recipe a runtime runs: a stage/group recipe's ``!Modifier`` twins where it has them
    (:func:`recipe_spec.stage_dialect.to_modifiers.runnable`), else ``recipe`` itself."""
    return runnable(recipe, framework)


def check_before_training(recipe: Recipe, framework: str, records: Sequence[ParamRecord], runtime: Any) -> None:
    """Every check of :func:`check_backend_runs` and :func:`check_recipe_fits`, in that order."""
    check_backend_runs(recipe, framework, get_backend(framework).capabilities, runtime)
    check_recipe_fits(recipe, records, framework)


def caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside recipe-spec and its backends, counted
    from the function that calls this one: a warning points at the user's line."""
    import os
    import sys

    packages = {"recipe_spec"} | {type(b).__module__.split(".")[0] for b in installed_backends()}
    roots = tuple(os.path.dirname(os.path.abspath(mod.__file__)) + os.sep
                  for name, mod in list(sys.modules.items())
                  if name in packages and getattr(mod, "__file__", None))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(roots):
        frame, level = frame.f_back, level + 1
    return level

