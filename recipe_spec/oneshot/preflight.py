"""Everything a one-shot run can check before the first module is touched: the arguments, the
calibration data and the recipe against the model.

``oneshot()``, ``ScheduledModifierManager.apply(model, calibration=...)`` and ``recipe-spec
oneshot`` all run :func:`~.api.apply_oneshot`, which calls these checks in order before it
attaches anything to the model; a refusal raises ``TypeError``/``ValueError`` (arguments,
data) or :class:`~recipe_spec.RecipeError` (the recipe against the model, located), and the
model is as it was.

- :func:`check_arguments`: the types and ranges of the keyword arguments
  (``num_calibration_samples="4"`` and ``batch_size=2.5`` are refused, not run).
- :func:`check_samples` (:mod:`.data_checks`): every calibration sample, as the command line checks its file: token
  ids of an integer type, none negative, each below the model's vocabulary size; no empty
  sample; an ``attention_mask`` of the ids' shape holding 0 and 1; no sequence longer than
  the model's positions; no key that is not an array (a ``text`` column left in).
- :func:`check_model`: an N:M structure that divides every target's width (P004), recipe
  ``sequential_targets`` and the keyword's naming a block of the model, every weight finite,
  no target already quantized.
- :func:`refuse_patterns`, :func:`refuse_recipe_patterns`: a ``re:`` pattern the linear-time
  matcher refuses (P005), in a keyword or in the recipe (even under ``# noqa``).
- :func:`check_mappings`: every SmoothQuant/AWQ mapping resolves, and none resolves to nothing
  (P006).

The host describes arrays (:meth:`describe`, :class:`ArrayFacts`) and the model
(``input_limits``, ``non_finite``, ``quantized_names``); the rules live here, once.

>>> check_arguments(num_calibration_samples=4, batch_size=1, seed=0, shuffle_calibration_samples=False)
>>> check_arguments(num_calibration_samples="4", batch_size=1)
Traceback (most recent call last):
...
TypeError: num_calibration_samples must be an int of at least 1, not str '4' (write num_calibration_samples=4)
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic, RecipeError
from ..recipe.model import Recipe
from ..text.targets import explain, refused_patterns
from .data_checks import ArrayFacts, check_batches, check_samples
from .host import ModuleInfo, outermost
from .modifiers import OneShotModifier, select_modules

__all__ = ["ArrayFacts", "check_arguments", "check_samples", "check_batches", "check_model", "check_mappings",
           "check_rotations", "refuse_patterns", "refuse_recipe_patterns", "LiveModel"]


def _count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        shown = f"{type(value).__name__} {value!r}"
        fix = (f" (write {name}={int(value)})" if isinstance(value, str) and value.strip().isdigit()
               else f" (write {name}={int(value)})" if isinstance(value, float) and value.is_integer() and value >= 1
               else "")
        raise TypeError(f"{name} must be an int of at least 1, not {shown}{fix}")


def _strings(name: str, value: Any) -> None:
    if value is None or isinstance(value, str):
        return
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return
    raise TypeError(f"{name} must be a name or a list of names (class names, module names or re: patterns), "
                    f"not {type(value).__name__} {value!r}")


#: The keyword arguments :func:`check_arguments` knows, by the kind of value each takes.
_COUNTS = ("num_calibration_samples", "batch_size")
_FLAGS = ("shuffle_calibration_samples", "overwrite_output_dir", "save_compressed", "preserve_masks",
          "restore_on_error", "offload", "moe_calibrate_all_experts")
_TEXTS = ("pipeline", "data_collator", "compat", "sequential_offload_device")


def check_arguments(**given: Any) -> None:
    """``TypeError`` for a keyword argument of the wrong type or range, naming it and the fix
    (``seed``: an int; ``output_dir``: a path or None; ``sequential_targets``: names;
    ``recipe_args``: a mapping or None; ``progress``: a callable, a bool or None; counts: ints
    of at least 1; flags: True or False; texts: a string or None)."""
    for name, value in given.items():
        if name in _COUNTS:
            _count(name, value)
        elif name in _FLAGS:
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, not {type(value).__name__} {value!r}")
        elif name in _TEXTS:
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string, not {type(value).__name__} {value!r}")
            if name == "sequential_offload_device" and value is not None and not value.startswith("cpu"):
                raise ValueError(f"sequential_offload_device={value!r}: recipe_spec keeps the cached block inputs "
                                 "where the model runs (None) or in host memory ('cpu'); it does not move them to "
                                 "another device: leave it out, or write 'cpu'")
        elif name == "seed":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"seed must be an int, not {type(value).__name__} {value!r}")
        elif name == "output_dir":
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise TypeError(f"output_dir must be a folder path, not {type(value).__name__} {value!r}")
        elif name == "sequential_targets":
            _strings(name, value)
            if value is not None and not value:
                raise ValueError("sequential_targets is empty, so it names no block to run one after another: leave "
                                 "it out (the model's decoder layers), or name the block class (e.g. "
                                 "['LlamaDecoderLayer'])")
        elif name == "recipe_args":
            if value is not None and not isinstance(value, Mapping):
                raise TypeError(f"recipe_args must be a mapping of variable names to values, not "
                                f"{type(value).__name__} {value!r}")
        elif name == "progress":
            if value is not None and not isinstance(value, bool) and not callable(value):
                raise TypeError(f"progress must be a function progress(what, done, total), True, False or None, "
                                f"not {type(value).__name__} {value!r}")
        elif name == "dataset":
            if value is not None and not (hasattr(value, "__iter__") or hasattr(value, "__getitem__")) \
                    or isinstance(value, (str, bytes)):
                raise TypeError(f"dataset must be tokenised samples (a list of {{'input_ids': [...]}} dicts, a "
                                f"datasets.Dataset or a DataLoader), not {type(value).__name__}")
        else:
            raise TypeError(f"check_arguments() knows no argument {name!r}")


@dataclass(frozen=True)
class LiveModel:
    """A model held by a host, as :func:`~.checkpoint.model_findings` reads a checkpoint."""

    modules: tuple[ModuleInfo, ...]
    decoder_class: str | None
    path: str = "the model"
    architecture: str = "model"
    classes: frozenset[str] = field(default_factory=frozenset)


def live_model(host: Any) -> LiveModel:
    modules = tuple(host.modules())
    blocks = host.repeated_blocks(None)
    by_name = {i.name: i for i in modules}
    decoder = by_name[blocks[0]].classes[0] if blocks and blocks[0] in by_name else None
    top = by_name.get("")
    arch = top.classes[0] if top is not None and top.classes else "model"
    return LiveModel(modules, decoder, "the model passed to oneshot", arch,
                     frozenset(c for i in modules for c in i.classes if c != "Module"))


def check_model(recipe: Recipe, mods: Sequence[OneShotModifier], host: Any,
                sequential_targets: Sequence[str] | None) -> None:
    """The recipe against the model (see the module docstring): a :class:`RecipeError` with
    every finding located at the modifier, or a ``ValueError`` for the keyword argument."""
    from .checkpoint import model_findings, sequential_targets_problem

    model = live_model(host)
    if sequential_targets:
        problem = sequential_targets_problem(model, list(sequential_targets))  # type: ignore[arg-type]
        if problem is not None:
            hint = (f" (write sequential_targets=[{model.decoder_class!r}])" if model.decoder_class
                    else " (name the class of its repeated block)")
            raise ValueError(problem + hint)
    found: list[Diagnostic] = list(model_findings(recipe, mods, model))  # type: ignore[arg-type]
    found += _untunable(recipe, mods, host, sequential_targets)
    quantized = set(getattr(host, "quantized_names", lambda: [])())
    # a quantized layer counts as the Linear it was (a host may no longer list it as prunable)
    as_linear = tuple(dataclasses.replace(i, prunable=True) if i.name in quantized else i for i in model.modules)
    for mod in mods:
        targets = select_modules(as_linear, mod) if mod.transform is None and quantized else []
        again = [n for n in targets if n in quantized]
        if again:
            found.append(codes.B001(
                f"{mod.type} targets {_few(again)}, already quantized in this model; compressing them "
                "again would work on their dequantized weights",
                "Start from the unquantized checkpoint (run every stage in one recipe), or leave those layers "
                "out with ignore:.", mod.entry.span).in_file(recipe.path))
    if found:
        raise RecipeError(found)
    bad = list(getattr(host, "non_finite", lambda: [])())
    if bad:
        raise ValueError(f"the model holds non-finite values (NaN or infinity) in {_few(bad)}; one-shot "
                         "compression would spread them through every later layer: load a healthy checkpoint")


def _few(names: Sequence[str]) -> str:
    shown = ", ".join(names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def refuse_patterns(keyword: str, values: Sequence[str]) -> None:
    """A ValueError, before anything runs, for a ``re:`` pattern in a keyword argument that the
    run's matcher refuses (as ``validate`` refuses it in a recipe: P005)."""
    refused = refused_patterns(values)
    if refused:
        message, hint = explain(refused[0])
        raise ValueError(f"{keyword}: {message}. {hint}")

def refuse_recipe_patterns(recipe: Recipe) -> None:
    """P005 for a module pattern the run's matcher refuses, even where a ``# noqa: P005``
    kept it from ``validate``'s verdict: the run could not match it, so it stops here,
    before the model is touched, not when a later modifier meets it."""
    from ..diagnostics import codes
    from ..stage_dialect.pattern_checks import arg_items

    found = []
    for m in recipe.modifiers:
        for keys, text, target, _ in arg_items(m.args):
            refused = refused_patterns([text]) if target else []
            if refused:
                message, hint = explain(refused[0])
                found.append(codes.P005(message, hint, m.value_span(*keys)).in_file(recipe.path))
    if found:
        raise RecipeError(found)

def check_mappings(recipe: Recipe, host: Any, mods: Sequence[Any]) -> None:
    """Resolve every smoothing modifier's mappings on the model before anything changes it: a
    mapping that cannot resolve stops the run here (ValueError naming the modifier), not after
    an earlier modifier ran, and a mapping entry that resolves to no layer at all is a located
    P006, as ``lint`` and ``recipe-spec oneshot`` report it (it would smooth nothing). Its skip
    messages are told once, when the modifier runs."""
    import logging

    from .quant_lint import mapping_findings
    from .shared.smoothing import resolve_mappings

    smoothing = [m for m in mods if m.transform is not None]
    if not smoothing:
        return
    log = logging.getLogger("recipe_spec.oneshot")
    was, log.disabled = log.disabled, True
    try:
        modules = list(host.modules())
        for m in smoothing:
            resolve_mappings(modules, m.transform, f"{m.type} ({m.where})")
    finally:
        log.disabled = was
    top = modules[0] if modules and modules[0].name == "" else None
    findings = mapping_findings(recipe, smoothing, modules, top.classes[0] if top and top.classes else "")
    if findings:
        raise RecipeError(findings)


def check_chain(host: Any, sequential_targets: Sequence[str] | None, batch: Any) -> None:
    """The blocks run one after another (``sequential_targets``, or the repeated blocks the
    host finds) must each take the one before's output, as the sequential pipeline feeds them:
    a ValueError naming the first two that do not (``sequential_targets=['Linear']``: q_proj's
    output is not k_proj's input), from one forward pass of ``batch``, before anything changes.
    A host without ``chain_break`` checks its blocks itself."""
    probe = getattr(host, "chain_break", None)
    blocks = outermost(host.repeated_blocks(list(sequential_targets) if sequential_targets else None))
    if probe is None or len(blocks) < 2:
        return
    broken = probe(blocks, batch)
    if broken is not None:
        named = f"sequential_targets={list(sequential_targets)!r}" if sequential_targets else "the model's repeated blocks"
        raise ValueError(f"{named}: {broken[1]} is not fed the output of {broken[0]}, so they cannot run one after "
                         "another; name the decoder-layer class (the blocks the model chains), or leave "
                         "sequential_targets out")


def _untunable(recipe: Recipe, mods: Sequence[OneShotModifier], host: Any,
               sequential_targets: Sequence[str] | None) -> list[Diagnostic]:
    """B001 for a block-tuning modifier (AutoRound) that targets a layer outside every decoder
    block (llm-compressor attaches its scheme and never tunes it) or runs over several
    processes."""
    from .distributed import collective_of
    from .host import inside, outermost

    found: list[Diagnostic] = []
    tuned = [m for m in mods if m.tuning is not None]
    if not tuned:
        return found
    blocks = outermost(host.repeated_blocks(sequential_targets))
    modules = list(host.modules())
    for mod in tuned:
        outside = [n for n in select_modules(modules, mod) if not any(inside(n, b) for b in blocks)]
        if outside:
            found.append(codes.B001(
                f"{mod.type} tunes decoder blocks one at a time; {_few(outside)} "
                f"{'is' if len(outside) == 1 else 'are'} outside every block",
                f"Add {'it' if len(outside) == 1 else 'them'} to ignore (lm_head, usually).",
                mod.entry.span).in_file(recipe.path))
        if collective_of(host) is not None:
            found.append(codes.B001(f"{mod.type} is not run over several processes",
                                    "Run this recipe in one process.", mod.entry.span).in_file(recipe.path))
    return found


def check_rotations(recipe: Recipe, host: Any, mods: Sequence[OneShotModifier]) -> None:
    """A rotation the host cannot apply (a ValueError naming the layer), experts it cannot prune
    as asked (:func:`~.reap.run.layers_pruned`), or a block tuning it cannot run (AutoRound
    without auto-round), as a located :class:`RecipeError`, before any weight changes."""
    from .reap.run import layers_pruned, report_problem

    for m in mods:
        try:
            if m.rotation is not None:
                host.check_rotations(m.rotation)
            if m.experts is not None:
                layers_pruned(host, m)
            if m.tuning is not None:
                host.check_tuning()
        except ValueError as exc:
            what, hint = (("rotate", "Change the modifier's targets, transform_type or transform_block_size.")
                          if m.rotation is not None else
                          ("tune", "Install auto-round, or quantize with GPTQModifier.") if m.tuning is not None else
                          ("prune the experts of", "Change the modifier's sparsity or ignore, or pass a "
                           "mixture-of-experts model."))
            key = next((k for k in ("ignore", "sparsity") if m.experts is not None and str(exc).startswith(k)
                        and k in m.entry.args), None)
            span = m.entry.key_span(key) if key is not None else m.entry.span
            raise RecipeError([codes.B001(f"{m.type} cannot {what} this model: {exc}", hint,
                                          span).in_file(recipe.path)]) from None
        problem = report_problem(m.experts.report_path) if m.experts is not None else None
        if problem is not None:
            raise RecipeError([codes.B001(f"{m.type}: {problem}", "Give a .json file in a folder you may write in.",
                                          m.entry.key_span("report_path")).in_file(recipe.path)])
