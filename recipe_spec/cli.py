"""The ``recipe-spec`` command line.

Exit codes (every subcommand): 0 clean, 1 findings at error severity, 2 the tool itself could
not run (bad flags, a path that does not exist, an internal error).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .diagnostics.base import Diagnostic, Severity
from .text.source import RECIPE_SUFFIXES
from .validation import validate

__all__ = ["main"]

JSON_FORMAT_VERSION = 1


class UsageError(Exception):
    """The command line is wrong (exit 2)."""


class InputError(Exception):
    """An input other than a recipe (a parameter manifest) is malformed: the message locates
    it, ``path:line:column: what is wrong`` (exit 1, as for errors found in a recipe)."""


def _parse_var(text: str) -> tuple[str, Any]:
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


def collect_files(paths: Sequence[str]) -> list[str]:
    """The recipe files under ``paths`` (directories are searched recursively), sorted."""
    found: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for f in sorted(files):
                    if f.lower().endswith(RECIPE_SUFFIXES):
                        found.append(os.path.join(root, f))
        elif os.path.exists(p):
            found.append(p)
        else:
            raise UsageError(f"no such file or directory: {p}")
    return found


def _emit_text(results: list[tuple[str, list[Diagnostic]]], out: Any) -> None:
    count = {s: 0 for s in Severity}
    for path, diags in results:
        for d in diags:
            count[d.severity] += 1
            print(d.in_file(path).format(), file=out)
    files = len(results)
    bad = sum(1 for _, ds in results if any(d.severity is Severity.ERROR for d in ds))
    print(
        f"{files} file(s) checked: {bad} with errors; {count[Severity.ERROR]} error(s), "
        f"{count[Severity.WARNING]} warning(s), {count[Severity.INFO]} info",
        file=out,
    )


def _emit_json(results: list[tuple[str, list[Diagnostic]]], out: Any) -> None:
    summary = {s.value: 0 for s in Severity}
    files = []
    for path, diags in results:
        for d in diags:
            summary[d.severity.value] += 1
        files.append({"path": path, "diagnostics": [d.to_json() for d in diags]})
    doc = {
        "version": JSON_FORMAT_VERSION,
        "tool": {"name": "recipe-spec", "version": __version__},
        "files": files,
        "summary": {
            "files": len(results),
            "files_with_errors": sum(
                1 for _, ds in results if any(d.severity is Severity.ERROR for d in ds)
            ),
            "errors": summary["error"],
            "warnings": summary["warning"],
            "infos": summary["info"],
        },
    }
    json.dump(doc, out, indent=2)
    out.write("\n")


def _gh_escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def _emit_github(results: list[tuple[str, list[Diagnostic]]], out: Any) -> None:
    level = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}
    for path, diags in results:
        for d in diags:
            props = (
                f"file={_gh_escape(path, True)},line={d.line},col={d.column},"
                f"endLine={d.end_line or d.line},endColumn={d.end_column or d.column},"
                f"title={_gh_escape(d.code, True)}"
            )
            message = d.message + (f"\n{d.hint}" if d.hint else "")
            print(f"::{level[d.severity]} {props}::{_gh_escape(message)}", file=out)


def _codes(text: str | None) -> list[str]:
    return [c.strip().upper() for c in text.split(",") if c.strip()] if text else []


def _selected(d: Diagnostic, select: list[str], ignore: list[str]) -> bool:
    def hit(prefixes: list[str]) -> bool:
        return any(d.code.startswith(p) for p in prefixes)

    if select and not hit(select):
        return False
    return not hit(ignore)


def _check_files(
    args: argparse.Namespace, paths: list[str], check_one: Any, check_all: Any = None
) -> int:
    """Run ``check_one(path, variables)`` over the recipe files under ``paths`` (or
    ``check_all(files, variables)`` over all of them at once), print the diagnostics in
    ``args.format`` and return the exit code (shared by validate and lint)."""
    variables = dict(_parse_var(v) for v in args.var or [])
    select, ignore = _codes(args.select), _codes(args.ignore)
    files = collect_files(paths)
    if not files:
        raise UsageError("no recipe files (.yaml .yml .json .md) found in " + " ".join(paths))
    if check_all is not None:
        found = check_all(files, variables or None)
    else:
        found = [check_one(Path(path), variables or None) for path in files]
    results: list[tuple[str, list[Diagnostic]]] = [
        (path, [d for d in diags if _selected(d, select, ignore)])
        for path, diags in zip(files, found, strict=True)
    ]
    emit = {"text": _emit_text, "json": _emit_json, "github": _emit_github, "sarif": _emit_sarif}[
        args.format
    ]
    emit(results, sys.stdout)
    failed = any(d.severity is Severity.ERROR for _, ds in results for d in ds)
    return 0 if not failed or args.exit_zero else 1


def _known_backend(name: str | None, option: str) -> str | None:
    """``name`` when a backend of that name is installed (entry points), else a usage error."""
    if name is None:
        return None
    from .registry import available_backends

    names = available_backends()
    if name not in names:
        raise UsageError(f"{option} {name!r}: unknown backend; choose from {', '.join(names)}")
    return name


def _validate(args: argparse.Namespace) -> int:
    from .parallel import validate_files

    _known_backend(args.backend, "--backend")
    compat = _compat(args.compat)
    return _check_files(
        args,
        args.paths,
        lambda p, v: validate(p, v, backend=args.backend, compat=compat),
        lambda files, v: validate_files(files, v, backend=args.backend, jobs=args.jobs, compat=compat),
    )


def _compat(text: str | None) -> Any:
    """The ``--compat`` choice (None: every release), or a usage error listing the choices."""
    if text is None:
        return None
    from .core_dialect import Compat

    try:
        return Compat.parse(text)
    except ValueError as exc:
        raise UsageError(f"--compat: {exc}") from None


def _model_records(args: argparse.Namespace) -> tuple[str, list[Any]]:
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
    from .params.model_spec import ModelSpecError, load_param_records

    try:
        return load_param_records(args.model)
    except ModelSpecError as exc:
        raise UsageError(str(exc)) from None


def _lint(args: argparse.Namespace) -> int:
    from .lint import lint

    _known_backend(args.target, "--target")
    compat = _compat(args.compat)
    if args.model and os.path.isdir(args.model) and not args.params:
        from .core_dialect.lint_model import lint_against_checkpoint
        from .params.checkpoint import CheckpointError, read_checkpoint

        try:
            names = read_checkpoint(args.model)
        except CheckpointError as exc:
            raise InputError(str(exc)) from None
        return _check_files(args, args.paths, lambda p, v: lint_against_checkpoint(p, names, compat, v))
    framework, records = _model_records(args)
    return _check_files(
        args, args.paths, lambda p, v: lint(p, records, framework, v, target=args.target)
    )


def _params(args: argparse.Namespace) -> int:
    from .params.manifest import write_manifest

    framework, records = _model_records(args)
    try:
        write_manifest(args.output, records, framework, source=args.model)
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    prunable = sum(1 for r in records if r.prunable)
    print(f"wrote {args.output}: {len(records)} parameters of a {framework} model ({prunable} prunable)")
    return 0


def _emit_sarif(results: list[tuple[str, list[Diagnostic]]], out: Any) -> None:
    from .diagnostics.codes import CODES

    used = sorted({d.code for _, ds in results for d in ds})
    level = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
    rules = [
        {
            "id": c,
            "name": CODES[c].title.replace(" ", "-") if c in CODES else c,
            "shortDescription": {"text": CODES[c].title if c in CODES else c},
            "fullDescription": {"text": CODES[c].why if c in CODES else c},
            "helpUri": f"docs/rules/{c}.md",
            "defaultConfiguration": {"level": level[CODES[c].severity] if c in CODES else "error"},
        }
        for c in used
    ]
    index = {c: i for i, c in enumerate(used)}
    sarif_results = []
    for path, diags in results:
        for d in diags:
            sarif_results.append(
                {
                    "ruleId": d.code,
                    "ruleIndex": index[d.code],
                    "level": level[d.severity],
                    "message": {"text": d.message + (f" ({d.hint})" if d.hint else "")},
                    "locations": [
                        {
                            "physicalLocation": {
                                "artifactLocation": {"uri": Path(path).as_posix()},
                                "region": {
                                    "startLine": d.line,
                                    "startColumn": d.column,
                                    "endLine": d.end_line or d.line,
                                    "endColumn": d.end_column or d.column,
                                },
                            }
                        }
                    ],
                }
            )
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "recipe-spec",
                        "version": __version__,
                        "informationUri": "https://pypi.org/project/recipe-spec/",
                        "rules": rules,
                    }
                },
                "results": sarif_results,
            }
        ],
    }
    json.dump(doc, out, indent=2)
    out.write("\n")


def _schema(args: argparse.Namespace) -> int:
    from .checks.schemas import combined_schema, modifier_names, modifier_schema

    if args.modifier is None:
        doc: Any = combined_schema()
    elif args.modifier == "list":
        print("\n".join(modifier_names()))
        return 0
    else:
        try:
            doc = modifier_schema(args.modifier)
        except KeyError:
            from .text.variables import did_you_mean

            hint = did_you_mean(args.modifier, modifier_names())
            raise UsageError(
                f"unknown modifier {args.modifier!r}. {hint} `recipe-spec schema list` lists them."
            ) from None
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _schedule(args: argparse.Namespace) -> int:
    from .loader import load
    from .schedule import compile_plan, report
    from .schedule.events import MAX_EVENTS, PlanError

    variables = dict(_parse_var(v) for v in args.var or [])
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
            raise UsageError(
                "--plot needs matplotlib, which is not installed: pip install 'recipe-spec[plot]'"
            ) from None
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
    try:
        plan = compile_plan(recipe, args.steps_per_epoch)
    except PlanError as exc:
        text = _plan_error_text(recipe, args.steps_per_epoch, exc)
        print(f"{path}:{_plan_error_position(recipe, text)}: error: {text}", file=sys.stderr)
        return 1
    stop = None if args.epochs is None else report.horizon(plan, args.epochs)
    if plan.events_bound(stop) > MAX_EVENTS:
        print(
            f"{path}:1:1: error: the preview would list up to {plan.events_bound(stop):.3g} events "
            f"(the limit is {MAX_EVENTS:,}); pass --epochs N to preview the first N epochs",
            file=sys.stderr,
        )
        return 1
    rows = report.schedule_rows(plan, args.epochs)
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


def _plan_error_position(recipe: Any, text: str) -> str:
    """``line:column`` of the modifier a PlanError message names (``TYPE (line N)``)."""
    import re

    match = re.search(r"\(line (\d+)\)", text)
    if match is None:
        return "1:1"
    line = int(match.group(1))
    for m in recipe.modifiers:
        if m.span.line == line:
            return f"{line}:{m.span.column}"
    return f"{line}:1"


def _plan_error_text(recipe: Any, steps_per_epoch: int, exc: Exception) -> str:
    """The PlanError message, naming the modifier and its line when it does not already."""
    text = str(exc)
    if "(line " in text:
        return text
    from .recipe.model import Group, Recipe, Stage
    from .schedule import compile_plan
    from .schedule.events import PlanError

    for m in recipe.modifiers:
        alone = Recipe(stages=(Stage(None, (Group("modifiers", (m,)),)),))
        try:
            compile_plan(alone, steps_per_epoch)
        except PlanError:
            return f"{m.type} (line {m.span.line}): {text}"
    return text


def _add_report_options(parser: argparse.ArgumentParser) -> None:
    """The options validate and lint share: output format, variables, code selection, exit."""
    parser.add_argument("--format", choices=["text", "json", "github", "sarif"], default="text")
    parser.add_argument("--var", action="append", metavar="NAME=VALUE", help="override a recipe variable")
    parser.add_argument("--select", metavar="CODES", help="report only these codes or prefixes (E,M001)")
    parser.add_argument("--ignore", metavar="CODES", help="do not report these codes or prefixes")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when errors are found")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recipe-spec",
        description="Load, validate and inspect model-compression recipes.",
    )
    parser.add_argument("--version", action="version", version=f"recipe-spec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    v = sub.add_parser(
        "validate",
        help="check recipe files and report problems with file:line:col",
        description="Check recipes. Exit 0 clean, 1 errors found, 2 the tool could not run.",
    )
    v.add_argument("paths", nargs="+", metavar="PATH", help="recipe files or directories")
    v.add_argument(
        "--backend", metavar="NAME", help="also check that the named backend (torch, keras, ...) runs every modifier"
    )
    v.add_argument(
        "--compat", metavar="TOOL[==VERSION]",
        help="stage/group recipes: apply the rules of sparseml[==1.6..1.9] or "
        "llmcompressor[==0.1..0.13] (no version: the newest); default: every release",
    )
    v.add_argument(
        "--jobs", type=_positive_int, metavar="N",
        help="worker processes for many files (default: the number of CPUs; 1: none)",
    )
    _add_report_options(v)
    v.set_defaults(run=_validate)
    sc = sub.add_parser(
        "schema",
        help="print the JSON Schema of a modifier, or the combined schema for editors",
        description="Without MODIFIER: the combined schema of a whole recipe (for "
        "yaml-language-server). 'list' lists the modifiers.",
    )
    sc.add_argument("modifier", nargs="?", metavar="MODIFIER")
    sc.set_defaults(run=_schema)
    sd = sub.add_parser(
        "schedule",
        help="list what a recipe does at each optimizer step, optionally as a picture",
        description="Compile a recipe for a number of optimizer steps per epoch and list its "
        "events (starts, updates, ends) step by step. Exit 0 done, 1 the recipe has errors, "
        "2 the tool could not run.",
    )
    sd.add_argument("recipe", metavar="RECIPE", help="one recipe file (.yaml .yml .json .md)")
    sd.add_argument(
        "--steps-per-epoch", type=_positive_int, required=True, metavar="N",
        help="optimizer steps in one epoch (batches per epoch)",
    )
    sd.add_argument(
        "--epochs", type=_positive_float, metavar="E",
        help="only the first E epochs (default: up to the last event)",
    )
    sd.add_argument(
        "--initial-lr", type=_positive_float, metavar="X",
        help="the optimizer's learning rate before the recipe changes it (for the picture)",
    )
    sd.add_argument(
        "--var", action="append", metavar="NAME=VALUE", help="override a recipe variable"
    )
    sd.add_argument("--format", choices=["table", "json", "csv"], default="table")
    sd.add_argument(
        "--plot", metavar="FILE", help="also draw the schedule to FILE.png or FILE.svg (needs matplotlib)"
    )
    sd.set_defaults(run=_schedule)

    li = sub.add_parser(
        "lint",
        help="check a recipe's parameter patterns against a model (and every validation rule)",
        description="Lint recipes against a model's parameters: a live model (--model) or a "
        "saved manifest (--params, no framework needed). Exit 0 clean, 1 errors, 2 the tool "
        "could not run.",
    )
    li.add_argument("paths", nargs="+", metavar="RECIPE", help="recipe files or directories")
    li.add_argument(
        "--model", metavar="SPEC",
        help="package.module:callable returning a model, a .keras file, a .pt/.pth/.safetensors "
        "state_dict, or a Hugging Face checkpoint directory (config.json + *.safetensors; "
        "stage/group recipes; no weight is read)",
    )
    li.add_argument(
        "--compat", metavar="TOOL[==VERSION]",
        help="stage/group recipes: match and validate as sparseml[==1.6..1.9] or "
        "llmcompressor[==0.1..0.13] does (default: both, newest releases)",
    )
    li.add_argument("--params", metavar="FILE", help="a parameter manifest written by `recipe-spec params`")
    li.add_argument(
        "--target", metavar="BACKEND",
        help="lint with the names the given backend would see (e.g. a PyTorch model's Keras twin)",
    )
    _add_report_options(li)
    li.set_defaults(run=_lint)

    pa = sub.add_parser(
        "params",
        help="write a model's parameter manifest (names, shapes, layer types, prunable flags)",
        description="Write params.json so that CI can lint recipes without a framework installed.",
    )
    pa.add_argument("--model", metavar="SPEC", required=True, help="as for lint --model")
    pa.add_argument("-o", "--output", metavar="FILE", default="params.json")
    pa.set_defaults(run=_params, params=None)

    cr = sub.add_parser(
        "create",
        help="write an automatic recipe (Sparsify Create / SparseML recipe_template)",
        description="Write the recipe recipe_spec.create.initialize would run, without a model "
        "and without training (params: __ALL_PRUNABLE__). See docs/create.md.",
    )
    cr.add_argument("--pruning", default="true", metavar="X",
                    help="true, false, none, gmp, acdc, mfac, obs, movement, constant, transfer, sparse-transfer")
    cr.add_argument("--quantization", action=argparse.BooleanOptionalAction, default=True,
                    help="quantization-aware training after pruning (default: on)")
    cr.add_argument("--lr", default="linear", metavar="F", help="linear, cosine, cyclic_linear, step, multistep or exponential")
    cr.add_argument("--distillation", action="store_true", help="add a DistillationModifier")
    cr.add_argument("--var", action="append", metavar="NAME=VALUE", help="set a recipe variable (docs/create.md)")
    cr.add_argument("-o", "--output", metavar="FILE", default="-", help="where to write (default: stdout)")
    cr.set_defaults(run=_create)
    return parser


def _create(args: argparse.Namespace) -> int:
    """``recipe-spec create``: the generated recipe to a file or stdout."""
    from .create import recipe_text

    pruning: Any = {"true": True, "false": False, "none": None}.get(args.pruning.lower(), args.pruning)
    variables = dict(_parse_var(v) for v in args.var or [])
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




def main(argv: Iterable[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args))
    except UsageError as exc:
        print(f"recipe-spec: error: {exc}", file=sys.stderr)
        return 2
    except InputError as exc:
        print(f"recipe-spec: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `recipe-spec validate ... | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:  # an internal error: say so plainly, exit 2
        print(
            f"recipe-spec: internal error: {type(exc).__name__}: {exc}\n"
            "Please report this with the recipe that caused it.",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
