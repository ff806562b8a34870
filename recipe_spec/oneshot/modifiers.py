"""Which one-shot modifiers a stage/group recipe holds, with their arguments resolved, and which
modules of a model each one compresses.

``oneshot()`` runs SparseGPTModifier, WandaPruningModifier and the one-shot reading of
MagnitudePruningModifier (prune each target to ``final_sparsity`` by ``|w|`` now) and
ConstantPruningModifier (keep the zeros there are: nothing to do in one pass), and
QuantizationModifier / GPTQModifier (read by :mod:`.rtn` and :mod:`.gptq`). SparseGPT and
Wanda also take a ``sparsity`` list and the OWL profile (:mod:`.owl.profile`). Every other
modifier, an argument this pipeline does not honour, a backend without the modifier's
``oneshot_needs`` and a ``!Modifier`` recipe are refused with located errors (B001) before
any weight changes.

Targets and ignore follow compressed-tensors: a string is a module name, a class name (of the
module's type or a base), or ``re:<pattern>`` matched with ``re.match`` (a prefix match) on the
module name; every prunable layer inside a matched module is a target. Unlike llm-compressor
0.14, a plain name in ``ignore`` (``lm_head``) does exclude that module.

>>> from recipe_spec import load
>>> r = load("s_stage:\\n  s_modifiers:\\n    SparseGPTModifier:\\n      sparsity: 0.5\\n"
...          "      mask_structure: '2:4'\\n      ignore: [lm_head]\\n")
>>> m = resolve(r, frozenset({"oneshot", "scores:sparsegpt"}), "torch")[0]
>>> m.kind, m.sparsity, (m.prune_n, m.prune_m), m.targets, m.ignore, m.pipeline
('sparsegpt', 0.5, (2, 4), ('Linear',), ('lm_head',), 'sequential')
"""

from __future__ import annotations

from collections.abc import Sequence

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic, RecipeError
from ..recipe.model import Recipe
from ..stage_dialect import stage_spec
from .algorithm import OneShotModifier
from .algorithms import BY_MODIFIER, algorithm_of
from .host import ModuleInfo
from .matching import matches, regex_match
from .settings import b001

__all__ = ["OneShotModifier", "resolve", "runnable", "select_modules", "matches"]

_TOKENS = {"__ALL__", "__ALL_PRUNABLE__"}


def resolve(recipe: Recipe, capabilities: frozenset[str], backend: str,
            version: tuple[int, ...] | None = None) -> list[OneShotModifier]:
    """The one-shot modifiers of ``recipe`` in recipe order (every stage's, concatenated, as
    llm-compressor does). Raises :class:`RecipeError` with a located B001 for each modifier or
    argument ``oneshot()`` does not run on ``backend`` (with ``capabilities``). ``version``:
    the llm-compressor release whose reading the run follows (None: the newest); under 0.9 and
    0.10 an AWQModifier in the combined form becomes AWQ and a QuantizationModifier
    (:mod:`.awq`). Each modifier is read by its algorithm (:data:`.algorithms.BY_MODIFIER`)."""
    if recipe.dialect != "stage":
        first = recipe.modifiers[0] if recipe.modifiers else None
        span = first.span if first is not None else recipe.stages[0].span
        raise RecipeError([codes.B001(
            "recipe_spec.oneshot runs stage/group recipes (llm-compressor's); this is a `!Modifier` "
            "training recipe", "Write '<name>_stage:' / '<name>_modifiers:' / 'SparseGPTModifier: {...}', "
            "or run this recipe with ScheduledModifierManager.modify().", span).in_file(recipe.path)])
    errors: list[Diagnostic] = []
    out: list[OneShotModifier] = []
    for m in recipe.modifiers:
        declared = stage_spec(m.type)
        algorithm = BY_MODIFIER.get(m.type)
        needs = declared.oneshot_needs if declared is not None else frozenset()
        if algorithm is None or not needs:
            errors.append(b001(recipe, m, f"{m.type} is not run by recipe_spec.oneshot yet",
                               "Run this recipe with llm-compressor, or remove the modifier."))
            continue
        if not needs <= capabilities:
            errors.append(b001(recipe, m, f"{m.type} is not available in oneshot() on the {backend} "
                               f"backend (it needs {', '.join(sorted(needs - capabilities))})",
                               "Run it on a backend that has it (schemas/backends.json lists them)."))
            continue
        read = algorithm.read(recipe, m, errors, version)
        for mod in read:
            for capability, argument, what, instead in algorithm.argument_needs(mod):
                if capability not in capabilities:
                    errors.append(b001(recipe, m, f"{m.type}: {what}, which oneshot() does not do on the {backend} "
                                       f"backend (it needs {capability})", instead, argument))
        out += read
    if errors:
        raise RecipeError(sorted(errors, key=lambda d: (d.line, d.column)))
    return out


def runnable(recipe: Recipe) -> list[OneShotModifier]:
    """The modifiers of ``recipe`` that ``oneshot()`` runs, as it would run them, for checks
    against a model (:mod:`.checkpoint`): a modifier it does not run, or whose sparsity it
    cannot read, is left out; an argument it would refuse is not held against the rest (the
    recipe's own checks report both)."""
    out: list[OneShotModifier] = []
    if recipe.dialect != "stage":
        return out
    for m in recipe.modifiers:
        algorithm = BY_MODIFIER.get(m.type)
        if algorithm is not None:
            out += algorithm.read(recipe, m, [], None)[:1]
    return out


def _param_match(target: str, name: str) -> bool:
    """A parameter selector (``re:.*weight``, ``x.weight``) that names ``name``'s weight."""
    weight = f"{name}.weight"
    if target.startswith("re:"):
        return regex_match(target, weight)
    return target == weight


def select_modules(modules: Sequence[ModuleInfo], mod: OneShotModifier) -> list[str]:
    """The prunable modules ``mod`` compresses, in ``named_modules`` order: every prunable
    layer inside a module its targets match (magnitude and constant also take parameter
    selectors and ``__ALL_PRUNABLE__``), none that an ``ignore`` entry matches (itself or a
    module containing it); a quantization modifier's: :meth:`~.quant_modifiers.QuantPlan.select`."""
    if mod.quant is not None:
        return mod.quant.select(modules)
    matched = [i.name for i in modules if any(matches(t, i.name, i.classes) for t in mod.targets)]
    tokens = algorithm_of(mod).takes_tokens
    ignored = [i.name for i in modules if any(matches(t, i.name, i.classes) for t in mod.ignore)]

    def inside(name: str, roots: Sequence[str]) -> bool:
        return any(r == "" or name == r or name.startswith(r + ".") for r in roots)

    out = []
    for info in modules:
        if not info.prunable or inside(info.name, ignored):
            continue
        hit = inside(info.name, matched)
        if not hit and tokens:
            hit = any(t.upper() in _TOKENS or _param_match(t, info.name) for t in mod.targets)
        if hit:
            out.append(info.name)
    return out
