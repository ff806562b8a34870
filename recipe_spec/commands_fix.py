"""``recipe-spec fix``: make the safe fixes of recipe files (:mod:`recipe_spec.fix`).

As ``ruff check --fix``: the fixes are written into the files; ``--diff`` prints them as a
unified diff and writes nothing; ``--unsafe-fixes`` also makes the fixes that may change what
a recipe means. Exit codes: with ``--diff``, 1 when some file would change, else 0; without,
1 when errors remain after fixing, else 0; 2 when the tool could not run.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import Any

from .commands import UsageError, _compat, collect_files
from .diagnostics.base import RecipeError, Severity

__all__ = ["fix_command", "add_fix_parser"]


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

    compat = _compat(args.compat)
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
