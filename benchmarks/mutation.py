"""Mutation testing of the core's boundaries: the rules, the schedule curves and clock, the
mask selection. Reproduces the campaign behind docs/mutation.md.

Tool: mutmut 2 (``pip install --target DIR "mutmut<3"``; not a project dependency). Each
module is mutated in a private copy of the repository (the checkout is never touched), and
each mutant runs only the fast test files that exercise that module, plus the module's own
doctests, stopping at the first failure::

    python benchmarks/mutation.py --mutlib /path/to/DIR                  # every module
    python benchmarks/mutation.py --mutlib DIR --module schedule.curves  # one

It prints, per module: mutants generated, killed (a test failed or the run timed out),
survived, judged equivalent (:data:`EQUIVALENT`, with why) and the kill rate of the
non-equivalent ones; then each survivor that is not a known equivalent, as a diff. Runs take
minutes per module on two cores (the rules and the curves are the longest).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: module -> (the file mutated, the test files run against each mutant).
CAMPAIGN: dict[str, tuple[str, tuple[str, ...]]] = {
    "checks.rules": ("recipe_spec/checks/rules.py",
                     ("tests/test_validation_rules.py", "tests/test_loading.py", "tests/test_rule_boundaries.py")),
    "modifiers.rules": ("recipe_spec/modifiers/rules.py",
                        ("tests/test_validation_rules.py", "tests/test_loading.py", "tests/test_rule_boundaries.py")),
    "schedule.curves": ("recipe_spec/schedule/curves.py",
                        ("tests/test_schedule_tables.py", "tests/test_schedule_conformance.py",
                         "tests/test_schedule_properties.py", "tests/test_curve_boundaries.py")),
    "schedule.clock": ("recipe_spec/schedule/clock.py",
                       ("tests/test_schedule_tables.py", "tests/test_schedule_conformance.py",
                        "tests/test_schedule_properties.py", "tests/test_curve_boundaries.py")),
    "masks.selection": ("recipe_spec/masks/selection.py",
                        ("tests/test_mask_core.py", "tests/test_selection_boundaries.py")),
}

#: Mutants judged equivalent (no input tells them apart), as (module, the original line, the
#: mutated line), stripped; the reasons are in docs/mutation.md. Keyed by text, not by mutmut's
#: numbers, so that the list survives edits elsewhere in the file.
_CR = "checks.rules"
_SC = "schedule.curves"
_SK = "schedule.clock"
EQUIVALENT: dict[tuple[str, str, str], str] = {
    (_CR, 'facts = getattr(recipe, "_facts", None)', 'facts = getattr(recipe, "XX_factsXX", None)'):
        "the facts are computed again from the same modifiers: the same facts, at a cost",
    (_CR, 'facts = getattr(recipe, "_facts", None)', "facts = None"):
        "the facts are computed again from the same modifiers: the same facts, at a cost",
    (_CR, "s = 0.0 if start < 0 else start", "s = 0.0 if start <= 0 else start"):
        "a start of 0 gives 0.0 either way",
    (_CR, "clash = wa[0] == wb[0]", "clash = wa[1] == wb[0]"): "both windows are points here",
    (_CR, "clash = wa[0] == wb[0]", "clash = wa[0] == wb[1]"): "both windows are points here",
    (_CR, "clash = wb[0] < wa[0] < wb[1]", "clash = wb[0] < wa[1] < wb[1]"): "wa is a point here",
    (_CR, "clash = wa[0] < wb[0] < wa[1]", "clash = wa[0] < wb[1] < wa[1]"): "wb is a point here",
    (_CR, "args: Mapping[Any, Any] = m.args._data if m.args.__class__ is FrozenDict else m.args",
     "args: Mapping[Any, Any] = m.args._data if m.args.__class__ is not FrozenDict else m.args"):
        "Modifier.args is always a FrozenDict",
    (_CR, "mapping = final.__class__ is FrozenDict or (final.__class__ not in _SCALARS and isinstance(final, Mapping))",
     "mapping = final.__class__ is FrozenDict or (final.__class__  in _SCALARS and isinstance(final, Mapping))"):
        "a mapping argument is always a FrozenDict (the first test decides)",
    (_CR, "mapping = final.__class__ is FrozenDict or (final.__class__ not in _SCALARS and isinstance(final, Mapping))",
     "mapping = final.__class__ is FrozenDict or (final.__class__ not in _SCALARS or isinstance(final, Mapping))"):
        "arguments are FrozenDicts, tuples or scalars: nothing else is outside _SCALARS",
    (_CR, "mapping = final.__class__ is FrozenDict or (final.__class__ not in _SCALARS and isinstance(final, Mapping))",
     "mapping = final.__class__ is FrozenDict and (final.__class__ not in _SCALARS and isinstance(final, Mapping))"):
        "a FrozenDict is a Mapping outside _SCALARS: the same test",
    (_CR, 'groups += [(("final_sparsity", k), v) for k, v in final.items()]',
     'groups = [(("final_sparsity", k), v) for k, v in final.items()]'):
        "with a sparsity mapping, params is [] (the schema refuses more: M008): nothing is dropped",
    (_SC, "Curve = Callable[[float], float]", "Curve = None"): "a type alias, only read by annotations",
    (_SC, "if epoch <= start:", "if epoch < start:"):
        "at epoch == start < end, p = 0 and every y(0) is 0: init either way",
    (_SC, "origin = max(start, 0.0) if start != -1 else 0.0", "origin = max(start, 0.0) if start != -2 else 0.0"):
        "max(-1, 0.0) is 0.0 too",
    (_SC, "if t_mult == 1 and t_cur / t_i > CHAINED_DECAYS:", "if t_mult != 1 and t_cur / t_i > CHAINED_DECAYS:"):
        "one cycle length: subtracting cycle by cycle gives the same (exact) remainder, slower",
    (_SC, "if t_mult == 1 and t_cur / t_i > CHAINED_DECAYS:", "if t_mult == 1 and t_cur * t_i > CHAINED_DECAYS:"):
        "one cycle length: the remainder at once or cycle by cycle is the same",
    (_SC, "if t_mult == 1 and t_cur / t_i > CHAINED_DECAYS:", "if t_mult == 1 and t_cur / t_i >= CHAINED_DECAYS:"):
        "one cycle length: the remainder at once or cycle by cycle is the same",
    (_CR, "if not mapping and (params is None or _plain_names(params)):",
     "if not mapping and (params is None and _plain_names(params)):"):
        "plain names are then looked at one by one, and none is a re: pattern: no finding, at a cost",
    (_CR, 'if (v := _num(m.args.get(k))) is not None and v != -1),',
     'if (v := _num(m.args.get(k))) is not None and v != -2),'):
        "a -1 counted in the max is never above the default of -1.0",
    (_CR, "default=-1.0))", "default=-2.0))"):
        "only the order among modifiers without epochs changes, and max() keeps the first of equals",
    (_CR, "if begin is not None and stop is not None and stop != -1 and stop < begin:",
     "if begin is not None and stop is not None and stop != -2 and stop < begin:"):
        "an end of -1 is skipped on the next line anyway",
    (_CR, "self._recipe = recipe", "self._recipe = None"):
        "the rules read only modifiers and _facts, which the view holds itself",
    (_CR, "self._facts = [(m, _fact(m, declaration)) for m in self.modifiers]", "self._facts = None"):
        "without them each rule computes the same facts itself, at a cost",
    ("masks.selection", "for f, size in zip(flats, sizes, strict=True):",
     "for f, size in zip(flats, sizes, strict=False):"): "sizes is made from flats: always the same length",
    ("masks.selection", "for f, flags in zip(flats, inside, strict=True)])",
     "for f, flags in zip(flats, inside, strict=False)])"): "inside is made from flats: always the same length",
    (_SK, "@lru_cache(maxsize=4096)", "@lru_cache(maxsize=4097)"): "a cache's size: the same values",
    (_SK, "@lru_cache(maxsize=4096)", ""): "exact() is pure: without its cache, the same values",
    (_SK, "if epoch == -1 or epoch <= 0:", "if epoch == -2 or epoch <= 0:"): "-1 <= 0 too",
    (_SK, "if epoch == -1 or epoch <= 0:", "if epoch == -1 or epoch < 0:"): "ceil(0 * S) is step 0 too",
    (_SK, "origin = exact(max(start, 0) if start != -1 else 0)",
     "origin = exact(max(start, 0) if start != -2 else 0)"): "max(-1, 0) is 0 too",
    (_SC, "if final_lr < init_lr:", "if final_lr <= init_lr:"):
        "equal learning rates: y_range is 0 and both branches give init_lr",
    ("modifiers.rules", 'start, end = number(m.args.get("start_epoch")), number(m.args.get("end_epoch", -1))',
     'start, end = number(m.args.get("start_epoch")), number(m.args.get("end_epoch", -2))'):
        "an absent end of -2, like -1, is negative: no bound either way",
    ("modifiers.rules", 'mask_type = m.args.get("mask_type", "unstructured")',
     'mask_type = m.args.get("mask_type", "XXunstructuredXX")'):
        "an absent mask type: a text that is no mask type is accepted here (the schema's business), "
        "as unstructured is",
}
#: ``continue`` -> ``break`` mutants judged equivalent, by the line above them (stripped).
_BREAKS: dict[tuple[str, str], str] = {
    (_CR, "if a.stage != b.stage:"):
        "a stage's modifiers are listed together: after the first of another stage, all are",
}


#: What the test server imports once (the project is imported afresh for every mutant).
_WARM = ("pytest", "numpy", "yaml", "jsonschema", "hypothesis", "frontmatter", "fractions")
#: The longest one test run may take in the server: a mutant that loops is killed (exit
#: status 1, the only one mutmut 2 reads as "a test failed", as its own timeout would).
_LIMIT_S = 60


def serve(address: str, work: str) -> None:
    """A test server for mutmut's runner: it imports pytest and the third-party libraries once,
    then runs each request's pytest in a fork of itself with every project module dropped, so
    each mutant is imported fresh from disk. Saves the interpreter and library start-up (most
    of a targeted test run's time) per mutant; the tests and their verdicts are pytest's."""
    sys.dont_write_bytecode = True  # mutmut rewrites the file in place: never a stale .pyc
    for name in _WARM:
        __import__(name)
    os.chdir(work)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(1)
    while True:
        conn, _ = server.accept()
        with conn:
            args = json.loads(conn.makefile().readline())
            pid = os.fork()
            if pid == 0:
                for name in list(sys.modules):
                    if name.split(".")[0] in ("recipe_spec", "recipe_spec_torch", "recipe_spec_keras",
                                              "conftest") or name.startswith("test"):
                        del sys.modules[name]
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.dup2(null, 2)
                import pytest
                os._exit(int(pytest.main(args)))  # 1: a test failed; 2-5: errors, read as survived
            deadline, code = time.monotonic() + _LIMIT_S, None
            while code is None:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    code = os.waitstatus_to_exitcode(status)
                elif time.monotonic() > deadline:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    code = 1
                else:
                    time.sleep(0.005)
            try:
                conn.sendall(f"{code}\n".encode())
            except OSError:
                pass  # mutmut gave up on this one (its own timeout)


def client(address: str, args: list[str]) -> None:
    """mutmut's runner: one pytest run in the server; exits with pytest's status."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(address)
        conn.sendall((json.dumps(args) + "\n").encode())
        code = int(conn.makefile().readline())
    except (OSError, ValueError):
        code = 2  # no answer: never counted as a kill (mutmut 2 reads only 1 as one)
    sys.exit(code)


def _copy(dest: Path) -> None:
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".mutmut-cache", ".hypothesis",
                                    "build", "dist", "*.egg-info")
    shutil.copytree(ROOT, dest, ignore=ignore, dirs_exist_ok=True)
    shared, link = ROOT.parent / "shared", dest.parent / "shared"  # the conformance data
    if shared.is_dir() and not link.exists():
        link.symlink_to(shared)


def _statuses(work: Path) -> dict[int, str]:
    with sqlite3.connect(work / ".mutmut-cache") as db:
        return dict(db.execute("select id, status from Mutant"))


def _diff(work: Path, env: dict[str, str], mutant: int) -> tuple[str, str, str, str]:
    """The mutated line(s) before and after, the line above them, and the whole diff."""
    out = subprocess.run([sys.executable, "-m", "mutmut", "show", str(mutant)], cwd=work, env=env,
                         capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    old = [ln[1:].strip() for ln in lines if ln.startswith("-") and not ln.startswith("---")]
    new = [ln[1:].strip() for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
    first = next((i for i, ln in enumerate(lines) if ln.startswith("-") and not ln.startswith("---")), 0)
    above = lines[first - 1][1:].strip() if first and lines[first - 1].startswith(" ") else ""
    return " ".join(old).strip(), " ".join(new).strip(), above, out


def run(module: str, mutlib: str, keep: Path | None, baseline: bool = False) -> dict[str, float]:
    path, tests = CAMPAIGN[module]
    tests = tuple(t for t in tests if (ROOT / t).exists() and not (baseline and t.endswith("_boundaries.py")))
    work = Path(keep) / module if keep else Path(tempfile.mkdtemp(prefix=f"mut-{module}-"))
    cache = work / ".mutmut-cache"
    saved = cache.read_bytes() if cache.exists() else None
    shutil.rmtree(work, ignore_errors=True)  # a fresh copy: mutmut mutates it in place
    _copy(work)
    if saved is not None:  # resume: killed mutants stay killed, the others run again
        cache.write_bytes(saved)
    py = sys.executable
    code_path = f"{work}{os.pathsep}{work / '.shim'}"
    address = str(work / ".pytest-server")
    server = subprocess.Popen([py, __file__, "serve", address, str(work)], cwd=work,
                              env=dict(os.environ, PYTHONPATH=code_path, PYTHONDONTWRITEBYTECODE="1"))
    while not os.path.exists(address):
        time.sleep(0.1)
    pytest_args = ["-x", "-q", "-p", "no:cacheprovider", "--doctest-modules", path, *tests]
    runner = f"{py} {__file__} client {address} {' '.join(pytest_args)}"
    env = dict(os.environ, PYTHONPATH=f"{mutlib}{os.pathsep}{code_path}")
    try:
        subprocess.run([py, "-m", "mutmut", "run", "--paths-to-mutate", path, "--tests-dir", "tests",
                        "--runner", runner, "--no-progress"], cwd=work, env=env, check=False,
                       stdout=subprocess.DEVNULL)
    finally:
        server.kill()
        server.wait()
    statuses = _statuses(work)
    # mutmut's "suspicious": a test failed, but slower than the baseline; killed all the same
    killed = sum(s in ("ok_killed", "bad_timeout", "ok_suspicious") for s in statuses.values())
    survived = [m for m, s in statuses.items() if s == "bad_survived"]
    untested = sum(s in ("untested", "skipped") for s in statuses.values())
    equivalent, alive = 0, []
    for m in sorted(survived):
        old, new, above, text = _diff(work, env, m)
        if (module, old, new) in EQUIVALENT or (old, new) == ("continue", "break") and (module, above) in _BREAKS:
            equivalent += 1
        else:
            alive.append((m, text))
    total = len(statuses)
    real = total - equivalent - untested
    rate = killed / real if real else 1.0
    print(f"{module}: {total} mutants, {killed} killed, {len(survived)} survived, {equivalent} equivalent, "
          f"{untested} not run; kill rate of the non-equivalent: {rate:.1%}")
    for m, text in alive:
        print(f"--- survivor {m}\n{text}")
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return {"total": total, "killed": killed, "survived": len(survived), "equivalent": equivalent, "rate": rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutlib", required=True, help="the folder mutmut<3 was installed into (--target)")
    parser.add_argument("--module", action="append", choices=sorted(CAMPAIGN), help="default: all")
    parser.add_argument("--keep", type=Path, help="run in KEEP/<module> and keep it (for `mutmut show`); "
                        "a run there before is resumed (killed mutants stay killed)")
    parser.add_argument("--baseline", action="store_true",
                        help="without the tests/test_*_boundaries.py files (the figures before them)")
    if sys.argv[1:2] == ["serve"]:
        return serve(sys.argv[2], sys.argv[3])
    if sys.argv[1:2] == ["client"]:
        return client(sys.argv[2], sys.argv[3:])
    args = parser.parse_args()
    for module in args.module or CAMPAIGN:
        run(module, args.mutlib, args.keep, args.baseline)


if __name__ == "__main__":
    main()
