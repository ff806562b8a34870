"""The commands that rewrite recipes: ``recipe-spec fix`` and ``recipe-spec convert``.

``fix`` makes the safe fixes of recipe files (:mod:`recipe_spec.fix`), as ``ruff check
--fix``: the fixes are written into the files; ``--diff`` prints them as a unified diff and
writes nothing; ``--unsafe-fixes`` also makes the fixes that may change what a recipe means.
Exit codes: with ``--diff``, 1 when some file would change, else 0; without, 1 when errors
remain after fixing, else 0; 2 when the tool could not run.

``convert`` writes a recipe in the other dialect or for another tool release
(:mod:`recipe_spec.convert`): to standard output, or to ``-o FILE``; notes (what to carry over
by hand) and refusals (what has no exact equivalent, ``file:line:col``) go to standard error.
Exit codes: 0 converted, 1 refused (nothing written), 2 the tool could not run.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import Any

from .commands import UsageError, collect_files, parse_compat, parse_var
from .diagnostics.base import RecipeError, Severity

__all__ = ["fix_command", "add_fix_parser", "convert_command", "add_convert_parser"]


def add_fix_parser(sub: Any) -> None:
    """``recipe-spec fix`` on the subcommand parsers ``sub``."""
    fx = sub.add_parser(
        "fix",
        help="rewrite what the findings say to write, where the rewrite is exact (in place)",
        description="Make the safe fixes of recipe files, in place: a misspelt name with "
        "exactly one candidate, an exact rewrite of a deprecated form, a rename the target "
        "release requires. Comments, key order and layout are kept. --diff prints the changes "
        "instead. Exit 0 done (or nothing to change with --diff), 1 errors remain (or, with "
        "--diff, a file would change), 2 the tool could not run. See docs/fix.md.",
    )
    fx.add_argument("paths", nargs="+", metavar="PATH", help="recipe files or directories")
    fx.add_argument("--diff", action="store_true",
                    help="print the fixes as a unified diff and write nothing")
    fx.add_argument("--compat", metavar="TOOL[==VERSION]",
                    help="stage/group recipes: fix for sparseml[==1.6..1.9] or "
                    "llmcompressor[==0.1..0.14] (no version: the newest); default: what every "
                    "release rejects")
    fx.add_argument("--unsafe-fixes", action="store_true",
                    help="also make the fixes that may change what a recipe means (the closest "
                    "of several names, a setting that moved elsewhere)")
    fx.set_defaults(run=fix_command)


def _write(path: str, text: str) -> None:
    """Replace ``path``'s contents with ``text`` atomically, keeping its permissions."""
    import tempfile

    mode = os.stat(path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def fix_command(args: argparse.Namespace) -> int:
    from .fix import fix_file

    compat = parse_compat(args.compat)
    files = collect_files(args.paths)
    if not files:
        raise UsageError("no recipe files (.yaml .yml .json .md) found in " + " ".join(args.paths))
    fixed = changed = remaining = unsafe = withheld = 0
    errors_left = False
    for path in files:
        try:
            result = fix_file(path, compat, args.unsafe_fixes)
        except (OSError, UnicodeDecodeError, RecipeError) as exc:
            print(f"{path}: not fixed: {exc}", file=sys.stderr)
            errors_left = True
            continue
        unsafe += len(result.unsafe)
        withheld += len(result.withheld)
        remaining += len(result.after)
        errors_left |= any(d.severity is Severity.ERROR for d in result.after)
        if not result.changed:
            continue
        changed += 1
        fixed += len(result.applied)
        if args.diff:
            sys.stdout.writelines(difflib.unified_diff(
                result.original.splitlines(keepends=True), result.fixed.splitlines(keepends=True),
                f"a/{path}", f"b/{path}"))
        else:
            try:
                _write(path, result.file_text())
            except OSError as exc:
                raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
        for f in result.applied:
            print(f"{path}:{f.line}:{f.column}: {f.code} {f.title}", file=sys.stderr)
    verb = "Would make" if args.diff else "Made"
    summary = (f"{verb} {fixed} fix(es) in {changed} of {len(files)} file(s); "
               f"{remaining} finding(s) {'would remain' if args.diff else 'remain'}")
    if unsafe:
        summary += f"; {unsafe} more fix(es) with --unsafe-fixes"
    if withheld:
        summary += f"; {withheld} fix(es) not made because they would bring a new finding"
    print(summary + ".", file=sys.stderr)
    if args.diff:
        return 1 if changed else 0
    return 1 if errors_left else 0


# -- recipe-spec convert -----------------------------------------------------------------------

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
        result = convert_file(args.recipe, target, source=parse_compat(args.source),
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
