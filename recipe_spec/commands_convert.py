"""``recipe-spec convert``: a recipe in the other dialect or for another tool release
(:mod:`recipe_spec.convert`).

The converted recipe goes to standard output, or to ``-o FILE``; notes (what to carry over
by hand) and refusals (what has no exact equivalent, ``file:line:col``) go to standard error.
Exit codes: 0 converted, 1 refused (nothing written), 2 the tool could not run.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .commands import UsageError, _compat, parse_var

__all__ = ["convert_command", "add_convert_parser"]


def add_convert_parser(sub: Any) -> None:
    """``recipe-spec convert`` on the subcommand parsers ``sub``."""
    cv = sub.add_parser(
        "convert",
        help="write a recipe in the other dialect, or for another tool release, where that is exact",
        description="Convert a !Modifier training recipe to the stage/group dialect where every "
        "modifier has an exact twin (and back), or a stage/group recipe from one tool release "
        "to another. What has no exact equivalent is refused with its file:line:col. The "
        "result is validated for the target before it is written. Exit 0 converted, 1 "
        "refused, 2 the tool could not run. See docs/convert.md.",
    )
    cv.add_argument("recipe", metavar="RECIPE", help="one recipe file (.yaml .yml .json .md)")
    cv.add_argument("--to", metavar="TARGET",
                    help="modifier, stage (or core), or a release: sparseml[==1.6..1.9], "
                    "llmcompressor[==0.1..0.14]; default: the other dialect")
    cv.add_argument("--from", dest="source", metavar="TOOL[==VERSION]",
                    help="the release a stage/group recipe was written for, where its defaults "
                    "differ (llm-compressor 0.5+ keeps no mask after a pruning modifier ends); "
                    "default: as recipe-spec's backends read it")
    cv.add_argument("-o", "--output", metavar="FILE", help="write the result here (default: "
                    "standard output)")
    cv.add_argument("--drop-epoch-range", action="store_true",
                    help="leave EpochRangeModifier out (the stage/group dialect has no training "
                    "length; the number of epochs is printed for the trainer)")
    cv.add_argument("--var", action="append", metavar="NAME=VALUE",
                    help="override a recipe variable (the result is then written evaluated)")
    cv.set_defaults(run=convert_command)


def _target(args: argparse.Namespace, dialect: str) -> Any:
    from .convert import Target

    if args.to is None:
        return Target("stage" if dialect == "modifier" else "modifier")
    try:
        return Target.parse(args.to)
    except ValueError as exc:
        raise UsageError(f"--to: {exc}") from None


def _dialect_of(path: str) -> str:
    from .loader import check

    recipe, _ = check(path)
    return recipe.dialect if recipe is not None else "modifier"


def convert_command(args: argparse.Namespace) -> int:
    from .atomic import write_text
    from .convert import convert_file

    if not os.path.isfile(args.recipe):
        raise UsageError(f"no such file: {args.recipe}")
    target = _target(args, _dialect_of(args.recipe) if args.to is None else "")
    variables = dict(parse_var(v) for v in args.var or [])
    try:
        result = convert_file(args.recipe, target, source=_compat(args.source),
                              drop_epoch_range=args.drop_epoch_range, variables=variables or None)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {args.recipe}: {exc}") from None
    for note in result.notes:
        print(note.format(args.recipe), file=sys.stderr)
    if not result.ok:
        for r in result.refusals:
            print(r.format(args.recipe), file=sys.stderr)
        print(f"Not converted to {target.label}: {len(result.refusals)} thing(s) without an "
              "exact equivalent.", file=sys.stderr)
        return 1
    assert result.text is not None
    if args.output:
        try:
            write_text(args.output, result.text)
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(result.text)
    for d in result.findings:
        print(d.in_file(args.output or "<stdout>").format(), file=sys.stderr)
    how = " (values evaluated)" if result.evaluated else ""
    print(f"Converted {args.recipe} to {target.label}{how}; validate: "
          f"{len(result.findings)} finding(s), no error.", file=sys.stderr)
    return 0
