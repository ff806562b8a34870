"""The ``recipe-spec`` command line.

Exit codes (every subcommand): 0 clean, 1 findings at error severity, 2 the tool itself could
not run (bad flags, a path that does not exist, an internal error); 130 interrupted (Ctrl-C),
143 terminated (SIGTERM, where ``oneshot`` catches it to remove its temporary folder).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from typing import Any

from . import __version__
from .commands import (
    InputError,
    UsageError,
    create_command,
    params_command,
    positive_float,
    positive_int,
    schedule_command,
    schema_command,
    validate_command,
)
from .commands_fix import add_convert_parser, add_fix_parser
from .commands_oneshot import lint_command as oneshot_lint_command
from .commands_oneshot import oneshot_command

__all__ = ["main", "build_parser"]


def _add_report_options(parser: argparse.ArgumentParser) -> None:
    """The options validate and lint share: which files, output format, variables, code
    selection, exit."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--recipes-only", action="store_true",
        help="check only files whose text holds a recipe (a modifiers key, a !Modifier tag, a "
        "<name>_stage), also among the files named: the pre-commit hook's mode",
    )
    which.add_argument(
        "--all-files-are-recipes", action="store_true",
        help="check every .yaml .yml .json .md file found in a directory as a recipe (default: "
        "only those whose text holds one; a file named on the command line is always checked)",
    )
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
        "llmcompressor[==0.1..0.14] (no version: the newest); default: every release",
    )
    v.add_argument(
        "--jobs", type=positive_int, metavar="N",
        help="worker processes for many files (default: the number of CPUs; 1: none)",
    )
    _add_report_options(v)
    v.set_defaults(run=validate_command)
    add_fix_parser(sub)
    add_convert_parser(sub)
    sc = sub.add_parser(
        "schema",
        help="print the JSON Schema of a modifier, or the combined schema for editors",
        description="Without MODIFIER: the combined schema of a whole recipe of the chosen "
        "dialect (for yaml-language-server). 'list' lists the modifiers. --dialect modifier: "
        "SparseML's !Modifier lists (the default); --dialect stage (or core): the stage/group "
        "recipes of SparseML 1.6+ and llm-compressor. A MODIFIER that only the stage/group "
        "dialect has needs no --dialect.",
    )
    sc.add_argument("modifier", nargs="?", metavar="MODIFIER")
    sc.add_argument("--dialect", choices=["modifier", "stage", "core"], default=None,
                    help="modifier (!Modifier lists, default) or stage (stage/group; core, its former "
                    "name, is still read)")
    sc.set_defaults(run=schema_command)
    sd = sub.add_parser(
        "schedule",
        help="list what a recipe does at each optimizer step, optionally as a picture",
        description="Compile a recipe for a number of optimizer steps per epoch and list its "
        "events (starts, updates, ends) step by step. Exit 0 done, 1 the recipe has errors, "
        "2 the tool could not run.",
    )
    sd.add_argument("recipe", metavar="RECIPE", help="one recipe file (.yaml .yml .json .md)")
    sd.add_argument(
        "--steps-per-epoch", type=positive_int, required=True, metavar="N",
        help="optimizer steps in one epoch (batches per epoch)",
    )
    sd.add_argument(
        "--epochs", type=positive_float, metavar="E",
        help="only the first E epochs (default: up to the last event)",
    )
    sd.add_argument(
        "--initial-lr", type=positive_float, metavar="X",
        help="the optimizer's learning rate before the recipe changes it (for the picture)",
    )
    sd.add_argument(
        "--var", action="append", metavar="NAME=VALUE", help="override a recipe variable"
    )
    sd.add_argument("--format", choices=["table", "json", "csv"], default="table")
    sd.add_argument(
        "--plot", metavar="FILE", help="also draw the schedule to FILE.png or FILE.svg (needs matplotlib)"
    )
    sd.set_defaults(run=schedule_command)

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
        "llmcompressor[==0.1..0.14] does (default: both, newest releases)",
    )
    li.add_argument("--params", metavar="FILE", help="a parameter manifest written by `recipe-spec params`")
    li.add_argument(
        "--sequential-targets", nargs="+", metavar="NAME",
        help="with --model DIR: the block class (or module names, 're:' patterns) a one-shot run goes through",
    )
    li.add_argument("--num-samples", type=positive_int, default=512, metavar="N",
                    help="with --model DIR: calibration samples the one-shot estimate assumes (default 512)")
    li.add_argument("--seq-len", type=positive_int, metavar="N",
                    help="with --model DIR: tokens per sample the estimate assumes (default 2048, at "
                    "most max_position_embeddings)")
    li.add_argument(
        "--target", metavar="BACKEND",
        help="lint with the names the given backend would see (e.g. a PyTorch model's Keras twin)",
    )
    _add_report_options(li)
    li.set_defaults(run=oneshot_lint_command)

    pa = sub.add_parser(
        "params",
        help="print a model's parameter manifest (names, shapes, layer types, prunable flags)",
        description="Print a model's parameter manifest as JSON (or write it with -o), so that CI "
        "can lint recipes without a framework installed (lint --params FILE).",
    )
    pa.add_argument("--model", metavar="SPEC", required=True, help="as for lint --model")
    pa.add_argument("-o", "--output", metavar="FILE", default=None,
                    help="write the manifest to FILE (default: standard output)")
    pa.set_defaults(run=params_command, params=None)

    _add_oneshot(sub)

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
    cr.set_defaults(run=create_command)
    return parser


def _add_oneshot(sub: Any) -> None:
    """``recipe-spec oneshot`` (:mod:`recipe_spec.commands_oneshot`)."""
    on = sub.add_parser(
        "oneshot",
        help="compress a Hugging Face checkpoint in one shot with calibration data (pruning, smoothing, "
        "quantization)",
        description="Run a stage/group one-shot recipe (llm-compressor's) on a checkpoint folder with a "
        "calibration file and write the compressed folder. Everything is checked before the model is "
        "loaded. Exit 0 done, 1 an error in an input, 2 the command line is wrong. See docs/oneshot.md.",
    )
    on.add_argument("recipe", metavar="RECIPE", help="one stage/group recipe file")
    on.add_argument("--model", required=True, metavar="DIR",
                    help="a Hugging Face checkpoint folder (config.json + *.safetensors)")
    on.add_argument("--precision", default="auto", choices=["auto", "bfloat16", "float16", "half", "float32", "full"],
                    help="dtype the checkpoint is loaded in: auto (its own, default, as llm-compressor), "
                    "bfloat16, float16, float32")
    on.add_argument("--calibration", required=True, metavar="FILE",
                    help="token ids: a JSON list of lists, {\"samples\": [...]}, or JSON lines of {\"input_ids\": [...]}")
    on.add_argument("--num-samples", type=positive_int, default=512, metavar="N",
                    help="calibration samples fed (default 512, as llm-compressor)")
    on.add_argument("--shuffle", action="store_true",
                    help="feed the samples in a seeded shuffled order (default: longest first)")
    on.add_argument("--batch-size", type=positive_int, default=1, metavar="B", help="samples per batch (default 1)")
    on.add_argument("--pipeline", choices=["independent", "sequential", "datafree"], default="independent")
    on.add_argument("--sequential-targets", nargs="+", metavar="NAME",
                    help="the block class (or module names, 're:' patterns) run one after another "
                    "(default: the decoder layer)")
    on.add_argument("--output", "-o", metavar="DIR", help="write the compressed checkpoint folder here")
    on.add_argument("--force", action="store_true", help="replace a non-empty --output folder as a whole (no file of it is kept)")
    on.add_argument("--var", action="append", metavar="NAME=VALUE", help="override a recipe variable")
    on.add_argument("--compat", metavar="llmcompressor[==VERSION]",
                    help="read the recipe as that llm-compressor release (default: the newest); 0.9 and 0.10 "
                    "run AWQModifier's combined form as they did")
    on.set_defaults(run=oneshot_command)


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
    except KeyboardInterrupt as exc:  # Ctrl-C 130; SIGTERM during a one-shot write 143 (atomic.Terminated)
        return int(getattr(exc, "exit_code", 130))
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
