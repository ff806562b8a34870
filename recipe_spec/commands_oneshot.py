"""``recipe-spec oneshot``: one-shot compression of a Hugging Face checkpoint folder from the
command line, and the one-shot part of ``recipe-spec lint RECIPE --model DIR`` (the checks
from the checkpoint's headers and the cost estimate).

Everything that can be checked without the weights is checked first, so a wrong recipe, flag,
checkpoint or calibration file stops the command in a second with a located, one-line error:
the recipe (``validate``'s rules for llm-compressor's newest release, and what
``recipe_spec.oneshot`` runs), the checkpoint's headers (N:M structures, sequential targets),
then the calibration file. Only then are torch and transformers imported and the model
loaded. ``--output`` follows ``oneshot(output_dir=...)``'s rule and is written by its writer
(:mod:`recipe_spec.atomic`): new or empty unless ``--force``, which replaces the whole
folder; written atomically; SIGTERM, as Ctrl-C, leaves no temporary folder (exit 143).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .commands import InputError, UsageError, check_files, known_backend, parse_compat, parse_var
from .commands import lint_command as _lint_command
from .diagnostics.base import Diagnostic, RecipeError, Severity
from .oneshot.summary import summary as _summary

__all__ = ["oneshot_command", "lint_command", "read_calibration", "checkpoint_lint", "print_estimates",
           "DEFAULT_SEQ_LEN", "header_findings"]

#: The sequence length ``lint`` estimates with when none is given (capped by the model's
#: ``max_position_embeddings``).
DEFAULT_SEQ_LEN = 2048
#: How messages about ``--output`` name it and the way to replace it.
_OUTPUT_NAMES = ("--output", "add --force")
#: Codes about what llm-compressor would do otherwise than recipe-spec runs the recipe.
_OTHER_TOOL = frozenset({"C005", "C006", "C007"})


# --------------------------------------------------------------------------- calibration


def _ids(path: str, where: str, value: Any, vocab: int | None) -> list[int]:
    if isinstance(value, dict):
        value = value.get("input_ids")
        if value is None:
            raise InputError(f"{path}: {where}: an object without 'input_ids'")
    if not isinstance(value, list) or not value:
        raise InputError(f"{path}: {where}: expected a non-empty list of token ids, "
                         f"got {type(value).__name__ if value != [] else 'an empty list'}")
    for i, t in enumerate(value):
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise InputError(f"{path}: {where}, token {i}: {t!r} is not a token id (a whole number >= 0)")
        if vocab is not None and t >= vocab:
            raise InputError(f"{path}: {where}, token {i}: id {t} is outside the model's vocabulary "
                             f"(vocab_size {vocab})")
    return list(value)


def read_calibration(path: str, vocab_size: int | None = None) -> list[list[int]]:
    """The token-id lists of a calibration file: a JSON list of token-id lists (or of
    ``{"input_ids": [...]}`` objects), an object with such a list under ``"samples"``, or JSON
    lines of ``{"input_ids": [...]}``. Raises :class:`InputError` naming the file and the
    sample (or line) that is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(f"{path}: cannot be read ({reason})") from None
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as whole:
        lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        try:
            first = json.loads(lines[0][1]) if lines else None
        except json.JSONDecodeError:
            first = None
        if not isinstance(first, dict):
            raise InputError(f"{path}:{whole.lineno}:{whole.colno}: not valid JSON ({whole.msg})") from None
        samples = []
        for n, line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{n}:{exc.colno}: not valid JSON ({exc.msg})") from None
            samples.append(_ids(path, f"line {n}", row, vocab_size))
        return samples
    if isinstance(data, dict):
        if "samples" not in data:
            raise InputError(f"{path}: a JSON object without 'samples' (write a list of token-id "
                             "lists, or {\"samples\": [...]})")
        data = data["samples"]
    if not isinstance(data, list) or not data:
        raise InputError(f"{path}: expected a non-empty list of samples (token-id lists)")
    return [_ids(path, f"sample {i}", row, vocab_size) for i, row in enumerate(data)]


# --------------------------------------------------------------------------- lint


def _seq_len(config: dict[str, Any], given: int | None) -> int:
    if given is not None:
        return given
    limit = config.get("max_position_embeddings")
    return min(DEFAULT_SEQ_LEN, limit) if isinstance(limit, int) and limit > 0 else DEFAULT_SEQ_LEN


def checkpoint_lint(path: str, model: Any, variables: Any, samples: int, seq_len: int | None,
                    estimates: list[Any]) -> list[Diagnostic]:
    """The one-shot findings of the recipe at ``path`` against a checkpoint (``model``: a
    :class:`~recipe_spec.oneshot.checkpoint.CheckpointModel`), quantization group sizes
    included (:mod:`recipe_spec.oneshot.quant_lint`); its cost estimate, when it holds a
    one-shot modifier or a GPTQModifier, is appended to ``estimates``."""
    from .loader import check
    from .oneshot.estimate import estimate
    from .oneshot.modifiers import runnable
    from .oneshot.quant_lint import gptq_modifiers
    from .text.patterns import PatternError

    recipe, _ = check(Path(path), variables)
    if recipe is None:
        return []
    try:
        mods = runnable(recipe)
        mods += gptq_modifiers(recipe, mods)
        found = header_findings(recipe, mods, model)
        cost = estimate(mods, model, samples, _seq_len(model.config, seq_len)) if mods else None
    except PatternError:  # a pattern no run matches: validation's P005 says where and why
        return []
    if cost is not None:
        estimates.append(cost)
    return found


def lint_command(args: argparse.Namespace) -> int:
    """``recipe-spec lint``: against a checkpoint folder (``--model DIR``), every finding of
    :func:`recipe_spec.lint.lint_against_checkpoint` plus the one-shot ones
    (:func:`checkpoint_lint`), then the cost estimate; anything else as
    :func:`recipe_spec.commands.lint_command` lints it."""
    if not (args.model and os.path.isdir(args.model) and not args.params):
        return _lint_command(args)
    from .lint import lint_against_checkpoint

    known_backend(args.target, "--target")
    compat = parse_compat(args.compat)
    names, model = read_checkpoint_model(args.model)
    flag_targets_problem(model, args.sequential_targets)
    estimates: list[Any] = []

    def one(path: Path, variables: Any) -> list[Diagnostic]:
        found = lint_against_checkpoint(path, names, compat, variables)
        if any(d.severity is Severity.ERROR and d.code[0] in "YS" for d in found):
            return found  # a recipe that does not read is not checked against the model
        extra = checkpoint_lint(str(path), model, variables, args.num_samples, args.seq_len, estimates)
        return sorted(found + extra, key=lambda d: (d.line, d.column, d.code))

    code = check_files(args, args.paths, one)
    print_estimates(estimates, args.format == "text")
    return code


def print_estimates(estimates: Sequence[Any], text_format: bool) -> None:
    """Each estimate's lines: to stdout after the findings in text format, else to stderr (so
    a machine-read format stays clean)."""
    out = sys.stdout if text_format else sys.stderr
    for e in estimates:
        print("\n".join(e.lines()), file=out)


def flag_targets_problem(model: Any, targets: Sequence[str] | None) -> None:
    """A usage error when ``--sequential-targets`` names no class or module of ``model``, or
    holds a ``re:`` pattern the run's matcher refuses."""
    if not targets:
        return
    from .oneshot.checkpoint import sequential_targets_problem
    from .text.targets import explain, refused_patterns

    refused = refused_patterns(targets)
    if refused:
        message, hint = explain(refused[0])
        raise UsageError(f"--sequential-targets {message}. {hint}")

    problem = sequential_targets_problem(model, targets)
    if problem is not None:
        raise UsageError(f"--{problem.replace('_', '-', 1)}"
                         + (f" (write --sequential-targets {model.decoder_class})" if model.decoder_class else ""))


def read_checkpoint_model(directory: str, classes: bool = True) -> tuple[Any, Any]:
    """``(names, model)`` of a checkpoint folder, or an :class:`InputError` naming the file.
    ``classes``: also learn every module's classes by building the architecture on the meta
    device when transformers is installed (``lint``); the command itself reads headers only."""
    from .oneshot.checkpoint import read_model
    from .params.checkpoint import CheckpointError, read_checkpoint
    from .params.headers import ModelSpecError

    try:
        names = read_checkpoint(directory, classes=classes)
        return names, read_model(directory, names)
    except (CheckpointError, ModelSpecError) as exc:
        raise InputError(str(exc)) from None


# --------------------------------------------------------------------------- the command


def _print(diagnostics: Sequence[Diagnostic], path: str) -> bool:
    """Print ``diagnostics`` to stderr; whether one is an error."""
    for d in diagnostics:
        print((d if d.file else d.in_file(path)).format(), file=sys.stderr)
    return any(d.severity is Severity.ERROR for d in diagnostics)


def _check_paths(args: argparse.Namespace) -> None:
    if not os.path.isfile(args.recipe):
        raise UsageError(f"no such recipe file: {args.recipe}")
    if not os.path.isdir(args.model):
        from .params.folders import not_a_checkpoint_folder

        raise UsageError(f"--model {args.model}: {not_a_checkpoint_folder(args.model)}")
    if not os.path.isfile(args.calibration):
        raise UsageError(f"--calibration {args.calibration}: "
                         f"{'a folder, not a file' if os.path.isdir(args.calibration) else 'no such file'}")
    if args.output is not None:  # the rule oneshot(output_dir=...) follows, with the flags' names
        from .atomic import OutputDirError, check_output_dir

        try:
            check_output_dir(args.output, args.force, _OUTPUT_NAMES, source=args.model)
        except OutputDirError as exc:
            raise UsageError(str(exc)) from None


def _required_packages(mods: Sequence[Any]) -> None:
    """A usage error, before any framework is imported, naming the first package the run needs
    that is not installed (the checkpoint backend's ``checkpoint_requirements``: for PyTorch,
    torch, transformers and, when a modifier quantizes, compressed-tensors) and the command
    that installs it."""
    from .diagnostics.packages import MissingPackageError, require

    backend = _checkpoint_backend()
    quantizing = any(getattr(m, "quant", None) is not None for m in mods)
    needs: list[tuple[str, str]] = getattr(backend, "checkpoint_requirements", lambda quantizing: [])(quantizing)
    try:
        for module, why in needs:
            require(module, why)
    except MissingPackageError as exc:
        raise UsageError(str(exc)) from None


def _recipe(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    """The loaded recipe and what ``oneshot`` runs of it, or printed errors and exit 1."""
    from .loader import check
    from .oneshot.modifiers import resolve
    from .validation import apply_noqa, validate_recipe

    variables = dict(parse_var(v) for v in args.var or []) or None
    recipe, found = check(Path(args.recipe), variables)
    if recipe is not None:
        found = found + validate_recipe(recipe, compat=args.compat or "llmcompressor")
        if recipe.source is not None:
            found = apply_noqa(found, recipe.source.text)
    if _print([d for d in found if d.code not in _OTHER_TOOL], args.recipe) or recipe is None:
        raise _Failed
    backend = _checkpoint_backend()
    from .oneshot.preflight import refuse_recipe_patterns
    from .oneshot.settings import release_of

    try:
        refuse_recipe_patterns(recipe)  # a silenced P005 still cannot run
        mods = resolve(recipe, frozenset(backend.capabilities), backend.name, release_of(args.compat))
    except RecipeError as exc:
        _print(exc.diagnostics, args.recipe)
        raise _Failed from None
    return recipe, mods


def _checkpoint_backend() -> Any:
    """The backend that loads Hugging Face checkpoint folders (a usage error when none is
    installed)."""
    from .registry import BackendError, backend_with

    try:
        return backend_with("checkpoint:huggingface")
    except BackendError as exc:
        raise UsageError(str(exc)) from None


def _rates(model: Any) -> Any:
    """This machine's rates with the arrays of the backend that will run (True: NumPy's)."""
    rates = getattr(_checkpoint_backend(), "rates", None)
    if rates is None:
        return True
    from .oneshot.estimate import rate_sizes

    return rates(*rate_sizes(model))


class _Failed(Exception):
    """The errors are printed; the command exits 1."""


def oneshot_command(args: argparse.Namespace) -> int:
    """``recipe-spec oneshot``: see the module docstring; 0 done, 1 a located error in an
    input, 2 the command line is wrong."""
    _check_paths(args)
    if args.compat is not None:
        from .oneshot.settings import release_of

        try:
            release_of(args.compat)
        except ValueError as exc:
            raise UsageError(f"--compat {args.compat}: {exc}") from None
    try:
        recipe, mods = _recipe(args)
        _, model = read_checkpoint_model(args.model, classes=False)
        flag_targets_problem(model, args.sequential_targets)
        if _print(header_findings(recipe, mods, model), args.recipe):
            return 1
    except _Failed:
        return 1
    vocab = model.config.get("vocab_size")
    samples = read_calibration(args.calibration, vocab if isinstance(vocab, int) else None)
    _required_packages(mods)
    chosen = samples[: args.num_samples]
    from .oneshot.estimate import estimate

    print("\n".join(estimate(mods, model, len(chosen), max(len(s) for s in chosen),
                             sum(len(s) for s in chosen), rates=_rates(model)).lines()))
    try:
        loaded = _checkpoint_backend().load_checkpoint(args.model, quiet=not sys.stderr.isatty(),
                                                         precision=args.precision,  # experts pruned: whole
                                                         stream=not any(m.experts is not None for m in mods))
    except ImportError as exc:  # installed, yet it does not import (a broken install)
        raise UsageError(f"recipe-spec oneshot could not import what loading the checkpoint needs ({exc}); "
                         "reinstall torch and transformers") from None
    except ValueError as exc:
        raise InputError(f"{args.model}: {exc}") from None
    return _run_and_save(args, recipe, loaded, samples)


def header_findings(recipe: Any, mods: Sequence[Any], model: Any) -> list[Diagnostic]:
    """What the checkpoint's headers alone tell against ``recipe`` (``mods``: its one-shot
    modifiers): an N:M structure or a ``sequential_targets`` the model cannot take
    (:func:`recipe_spec.oneshot.checkpoint.model_findings`: P004, P006), a quantization
    ``group_size`` that does not divide a target's ``in_features`` (P012), a smoothing mapping
    that resolves to no layer (P006), a rotation that does not fit a layer (P014), expert pruning
    the model cannot take (P015). ``lint --model DIR`` and ``oneshot`` both report them;
    ``oneshot`` before torch is imported."""
    from .oneshot.checkpoint import model_findings
    from .oneshot.quant_lint import mapping_findings, quant_findings, rotation_findings
    from .oneshot.reap.layers import expert_findings

    return (model_findings(recipe, mods, model) + quant_findings(recipe, model.modules)
            + mapping_findings(recipe, mods, model.modules, model.architecture)
            + rotation_findings(recipe, mods, model.modules)
            + expert_findings(recipe, mods, model.config, model.modules))


class _Tokenizer:
    """The tokenizer files of the checkpoint folder, copied into ``--output`` with the model."""

    FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
             "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "chat_template.jinja",
             "chat_template.json", "preprocessor_config.json", "processor_config.json")

    def __init__(self, model: str):
        self.model = model

    def save_pretrained(self, folder: str) -> None:
        import shutil

        for name in self.FILES:
            source = os.path.join(self.model, name)
            if os.path.isfile(source) and not os.path.exists(os.path.join(folder, name)):
                shutil.copyfile(source, os.path.join(folder, name))


def _run_and_save(args: argparse.Namespace, recipe: Any, model: Any, samples: list[list[int]]) -> int:
    """Run the recipe on the loaded model with a progress bar, write ``--output`` atomically
    (SIGTERM unwinds as Ctrl-C does), print the per-layer summary."""
    from .atomic import sigterm_interrupts
    from .oneshot.api import apply_oneshot
    from .oneshot.progress import OneShotProgress

    progress = OneShotProgress(log=False)  # a bar per pass on a terminal, plain lines otherwise
    dataset = [{"input_ids": s} for s in samples]
    options = dict(num_calibration_samples=args.num_samples, shuffle_calibration_samples=args.shuffle,
                   batch_size=args.batch_size, pipeline=args.pipeline,
                   sequential_targets=args.sequential_targets, progress=progress, compat=args.compat,
                   output_dir=args.output, overwrite_output_dir=args.force, processor=_Tokenizer(args.model))
    with warnings.catch_warnings(record=True) as told, sigterm_interrupts():
        warnings.simplefilter("always")
        try:
            report = apply_oneshot(model, recipe, dataset, **options)  # type: ignore[arg-type]
        except RecipeError as exc:
            progress.close()
            _print(exc.diagnostics, args.recipe)
            return 1
        except ImportError as exc:  # an optional package missing (named, with its command); nothing written
            progress.close()
            print(f"recipe-spec: error: {exc}", file=sys.stderr)
            return 2
        except (ValueError, RuntimeError, OSError) as exc:
            progress.close()
            print(f"recipe-spec: error: {exc}", file=sys.stderr)
            return 1
        finally:
            progress.close()
    for w in told:  # the solver's notes; the recipe's own warnings were printed above
        text = str(w.message)
        if issubclass(w.category, UserWarning) and "recipe_spec" in (w.filename or "") \
                and not text.startswith(args.recipe):
            print(f"recipe-spec: warning: {text}", file=sys.stderr)
    print(_summary(report, args.output))
    return 0
