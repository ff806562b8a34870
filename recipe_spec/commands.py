"""What each ``recipe-spec`` command does (``validate``, ``lint``, ``params``, ``schema``,
``schedule``, ``create``): each takes the parsed arguments and returns the exit code.
:mod:`recipe_spec.cli` builds the parser and runs them."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .diagnostics.base import Diagnostic, Severity
from .diagnostics.formats import FORMATS
from .text.source import RECIPE_SUFFIXES
from .validation import validate

__all__ = [
    "UsageError", "InputError", "collect_files", "parse_var", "positive_int", "positive_float",
    "validate_command", "lint_command", "params_command", "schema_command", "schedule_command",
    "create_command",
]


class UsageError(Exception):
    """The command line is wrong (exit 2)."""


class InputError(Exception):
    """An input other than a recipe (a parameter manifest) is malformed: the message locates
    it, ``path:line:column: what is wrong`` (exit 1, as for errors found in a recipe)."""


def parse_var(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise UsageError(f"--var expects NAME=VALUE, got {text!r}")
    name, _, raw = text.partition("=")
    name = name.strip()
    if not name:
        raise UsageError(f"--var expects NAME=VALUE, got {text!r}")
    from .diagnostics.base import RecipeError
    from .text.reader import read_yaml

    try:
        value = read_yaml(raw).value if raw.strip() else ""
    except RecipeError:
        value = raw
    return name, value


def collect_files(paths: Sequence[str], recipes_only: bool = False, all_files: bool = False) -> list[str]:
    """The recipe files under ``paths``, in order (directories are searched recursively).

    In a directory, a file with a recipe suffix counts when its text holds a recipe
    (:func:`recipe_spec.text.recognise.is_recipe_file`), or always with ``all_files``. A file
    named in ``paths`` always counts, unless ``recipes_only`` (the pre-commit hook, which is
    given every staged file) applies the content test to it too."""
    return _collect(paths, recipes_only, all_files)[0]


def _collect(paths: Sequence[str], recipes_only: bool, all_files: bool) -> tuple[list[str], list[str]]:
    """(the recipe files under ``paths``, the files passed over as not recipes)."""
    from .text.recognise import is_recipe_file

    found: list[str] = []
    passed_over: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for f in sorted(files):
                    if f.lower().endswith(RECIPE_SUFFIXES):
                        path = os.path.join(root, f)
                        (found if all_files or is_recipe_file(path) else passed_over).append(path)
        elif os.path.exists(p):
            (passed_over if recipes_only and not is_recipe_file(p) else found).append(p)
        else:
            raise UsageError(f"no such file or directory: {p}")
    return found, passed_over


def _codes(text: str | None, option: str = "--select") -> list[str]:
    """The codes or code prefixes of ``--select``/``--ignore``; one that names no code is a
    usage error (a typo would switch the check off without a word)."""
    from .diagnostics.codes import CODES
    from .diagnostics.links import page_url

    found = [c.strip().upper() for c in text.split(",") if c.strip()] if text else []
    for prefix in found:
        if not any(known.startswith(prefix) for known in CODES):
            close = difflib.get_close_matches(prefix, list(CODES), n=1, cutoff=0.5)
            raise UsageError(f"{option} {prefix}: no diagnostic code is or starts with {prefix}"
                             + (f"; did you mean {close[0]}?" if close else "")
                             + f" (the codes are listed at {page_url('rules/index.md')})")
    return found


def _selected(d: Diagnostic, select: list[str], ignore: list[str]) -> bool:
    def hit(prefixes: list[str]) -> bool:
        return any(d.code.startswith(p) for p in prefixes)

    if select and not hit(select):
        return False
    return not hit(ignore)


def check_files(
    args: argparse.Namespace, paths: list[str], check_one: Any, check_all: Any = None
) -> int:
    """Run ``check_one(path, variables)`` over the recipe files under ``paths`` (or
    ``check_all(files, variables)`` over all of them at once), print the diagnostics in
    ``args.format`` and return the exit code (shared by validate and lint)."""
    variables = dict(parse_var(v) for v in args.var or [])
    select, ignore = _codes(args.select, "--select"), _codes(args.ignore, "--ignore")
    recipes_only = getattr(args, "recipes_only", False)
    files, passed_over = _collect(paths, recipes_only, getattr(args, "all_files_are_recipes", False))
    if not files and not recipes_only:
        why = (f" ({len(passed_over)} file(s) with those suffixes hold no recipe: no modifiers key, "
               "!Modifier tag or <name>_stage; --all-files-are-recipes checks them anyway)"
               if passed_over else "")
        raise UsageError("no recipe files (.yaml .yml .json .md) found in " + " ".join(paths) + why)
    if check_all is not None:
        found = check_all(files, variables or None)
    else:
        found = [check_one(Path(path), variables or None) for path in files]
    results: list[tuple[str, list[Diagnostic]]] = [
        (path, _kept(diags, select, ignore)) for path, diags in zip(files, found, strict=True)
    ]
    FORMATS[args.format](results, sys.stdout, __version__)
    failed = any(d.severity is Severity.ERROR for _, ds in results for d in ds)
    return 0 if not failed or args.exit_zero else 1


def _kept(diags: list[Diagnostic], select: Any, ignore: Any) -> list[Diagnostic]:
    """The diagnostics ``--select``/``--ignore`` keep, with the releases they were checked
    against (:class:`~recipe_spec.validation.Findings`)."""
    from .validation import Findings

    kept = Findings(d for d in diags if _selected(d, select, ignore))
    kept.checked_against = getattr(diags, "checked_against", "")
    return kept


def known_backend(name: str | None, option: str) -> str | None:
    """``name`` when a backend of that name is installed (entry points), else a usage error."""
    if name is None:
        return None
    from .registry import available_backends

    names = available_backends()
    if name not in names:
        raise UsageError(f"{option} {name!r}: unknown backend; choose from {', '.join(names)}")
    return name


def validate_command(args: argparse.Namespace) -> int:
    from .parallel import validate_files

    known_backend(args.backend, "--backend")
    compat = parse_compat(args.compat)
    return check_files(
        args,
        args.paths,
        lambda p, v: validate(p, v, backend=args.backend, compat=compat),
        lambda files, v: validate_files(files, v, backend=args.backend, jobs=args.jobs, compat=compat),
    )


def parse_compat(text: str | None) -> Any:
    """The ``--compat`` choice (None: every release), or a usage error listing the choices."""
    if text is None:
        return None
    from .stage_dialect import Compat

    try:
        return Compat.parse(text)
    except ValueError as exc:
        raise UsageError(f"--compat: {exc}") from None


def _model_records(args: argparse.Namespace, folders: bool = False) -> tuple[str, list[Any]]:
    """The parameter records of ``--model`` or ``--params``. ``folders``: the command also takes
    a Hugging Face checkpoint folder (``lint``), which a message about a spec that is nothing
    then names, with how to get a hub id's folder."""
    if bool(getattr(args, "model", None)) == bool(getattr(args, "params", None)):
        raise UsageError("give exactly one of --model SPEC or --params params.json")
    if args.params:
        from .params.manifest import read_manifest

        if not os.path.isfile(args.params):
            raise UsageError(f"--params: no such file: {args.params}")
        try:
            return read_manifest(args.params)
        except ValueError as exc:
            raise InputError(str(exc)) from None
    from .params.headers import ModelSpecError
    from .params.model_spec import load_param_records

    try:
        return load_param_records(args.model)
    except ModelSpecError as exc:
        if folders and not os.path.exists(args.model):
            from .params.folders import hub_hint

            raise UsageError(f"{exc}; or a Hugging Face checkpoint folder (config.json beside *.safetensors)"
                             f"{hub_hint(args.model)}") from None
        raise UsageError(str(exc)) from None


def lint_command(args: argparse.Namespace) -> int:
    """``recipe-spec lint`` against a model spec or a parameter manifest (a checkpoint folder
    is :func:`recipe_spec.commands_oneshot.lint_command`'s, which calls this one otherwise)."""
    from .lint import lint

    known_backend(args.target, "--target")
    if getattr(args, "sequential_targets", None):
        raise UsageError("--sequential-targets needs --model DIR (a Hugging Face checkpoint folder)")
    framework, records = _model_records(args, folders=True)
    return check_files(
        args, args.paths, lambda p, v: lint(p, records, framework, v, target=args.target)
    )


def params_command(args: argparse.Namespace) -> int:
    """The manifest on standard output, or in ``-o FILE`` (then one summary line)."""
    from .params.manifest import manifest_text, write_manifest

    framework, records = _model_records(args)
    prunable = sum(1 for r in records if r.prunable)
    summary = f"{len(records)} parameters of a {framework} model ({prunable} prunable)"
    if args.output in (None, "-"):
        sys.stdout.write(manifest_text(records, framework, source=args.model))
        return 0
    try:
        write_manifest(args.output, records, framework, source=args.model)
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"wrote {args.output}: {summary}")
    return 0


def schema_command(args: argparse.Namespace) -> int:
    """``recipe-spec schema [MODIFIER|list] [--dialect modifier|stage]``."""
    from .checks.schemas import combined_schema, modifier_names, modifier_schema
    from .stage_dialect.schema import stage_modifier_schema, stage_names, stage_recipe_schema

    dialect = {"core": "stage"}.get(args.dialect or "", args.dialect)
    if args.modifier is None:
        doc: Any = stage_recipe_schema() if dialect == "stage" else combined_schema()
    elif args.modifier == "list":
        print("\n".join(stage_names() if dialect == "stage" else modifier_names()))
        return 0
    elif dialect == "stage" or (dialect is None and args.modifier not in modifier_names()
                                and args.modifier in stage_names()):
        try:
            doc = stage_modifier_schema(args.modifier)
        except KeyError:
            raise UsageError(_unknown_modifier(args.modifier, stage_names(), "--dialect stage")) from None
    else:
        if dialect is None and args.modifier in stage_names():
            print(f"recipe-spec: {args.modifier} of the !Modifier dialect; the stage/group "
                  "dialect's: --dialect stage", file=sys.stderr)
        try:
            doc = modifier_schema(args.modifier)
        except KeyError:
            every = sorted({*modifier_names(), *stage_names()})
            raise UsageError(_unknown_modifier(args.modifier, every, "")) from None
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _unknown_modifier(name: str, names: list[str], option: str) -> str:
    from .text.variables import did_you_mean

    hint = did_you_mean(name, names)
    listing = f"`recipe-spec schema list{' ' + option if option else ''}`"
    return f"unknown modifier {name!r}. {hint} {listing} lists them.".replace(".  ", ". ")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def schedule_command(args: argparse.Namespace) -> int:
    from .loader import load
    from .schedule import compile_plan, preview, report
    from .schedule.events import PlanError

    variables = dict(parse_var(v) for v in args.var or [])
    path = args.recipe
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory; `schedule` takes one recipe file")
    if not os.path.exists(path):
        raise UsageError(f"no such file: {path}")
    if args.plot is not None:
        if Path(args.plot).suffix.lower() not in report.PLOT_SUFFIXES:
            raise UsageError(f"--plot {args.plot}: the picture must end in .png or .svg")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            from .diagnostics.packages import MissingPackageError

            raise UsageError(str(MissingPackageError("matplotlib", "--plot"))) from None
    diags = validate(Path(path), variables or None)
    for d in diags:
        print(d.in_file(path).format(), file=sys.stderr)
    errors = [d for d in diags if d.severity is Severity.ERROR]
    if errors:
        print(
            f"{path}: {len(errors)} error(s); fix them to preview the schedule "
            "(`recipe-spec validate` explains each code)",
            file=sys.stderr,
        )
        return 1
    recipe = load(path, variables or None)
    if recipe.dialect == "stage":
        # the steps a backend runs: a stage/group recipe runs as its ``!Modifier`` twins
        from .stage_dialect import stage_spec
        from .stage_dialect.to_modifiers import refusals, training_twins

        refused = refusals(recipe, None)
        for m, message, hint in refused:
            declared = stage_spec(m.type)
            oneshot = declared is not None and not declared.training
            print(f"{path}:{m.span.line}:{m.span.column}: {'note' if oneshot else 'error'}: "
                  f"{message}" + (" (a one-shot modifier has no training schedule)" if oneshot
                                  else f"; {hint}"), file=sys.stderr)
        if any(getattr(stage_spec(m.type), "training", True) for m, _, _ in refused):
            return 1
        recipe = training_twins(recipe)
    try:
        plan = compile_plan(recipe, args.steps_per_epoch)
    except PlanError as exc:
        text = report.plan_error_text(recipe, args.steps_per_epoch, exc)
        print(f"{path}:{report.plan_error_position(recipe, text)}: error: {text}", file=sys.stderr)
        return 1
    too_many = preview.refusal(plan, args.epochs)
    rows = report.schedule_rows(plan, args.epochs, preview.PREVIEW_LIMIT) if too_many is None else []
    if too_many is None and len(rows) > preview.PREVIEW_LIMIT:  # more events than the bound said
        too_many = preview.refusal(plan, args.epochs, events=float(len(rows)))
    if too_many is not None:
        m = too_many.modifier
        print(f"{path}:{m.span.line}:{m.span.column}: error: {too_many.message(plan.steps_per_epoch)}",
              file=sys.stderr)
        return 1
    if args.format == "json":
        meta = {
            "recipe": path,
            "steps_per_epoch": plan.steps_per_epoch,
            "epochs": args.epochs,
            "max_epochs": plan.max_epochs,
            "min_epochs": plan.min_epochs,
        }
        sys.stdout.write(report.render_json(rows, meta))
    elif args.format == "csv":
        sys.stdout.write(report.render_csv(rows))
    else:
        sys.stdout.write(report.render_table(rows))
        span = (
            f"the first {args.epochs:g} epoch(s)" if args.epochs is not None
            else f"max_epochs {plan.max_epochs}"
        )
        print(
            f"\n{len(rows)} event(s) from {len({r['line'] for r in rows})} modifier(s); "
            f"{plan.steps_per_epoch} steps per epoch, {span}",
        )
    if args.plot is not None:
        try:
            from .schedule.plot import plot

            plot(plan, args.plot, args.epochs, args.initial_lr)
        except OSError as exc:
            raise UsageError(f"cannot write {args.plot}: {exc.strerror or exc}") from None
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def create_command(args: argparse.Namespace) -> int:
    """``recipe-spec create``: the generated recipe to a file or stdout."""
    from .create import recipe_text

    pruning: Any = {"true": True, "false": False, "none": None}.get(args.pruning.lower(), args.pruning)
    variables = dict(parse_var(v) for v in args.var or [])
    try:
        text = recipe_text(pruning, args.quantization, args.lr, args.distillation, variables)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if args.output == "-":
        sys.stdout.write(text)
    else:
        from .atomic import write_text

        try:
            write_text(args.output, text)
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    return 0
