"""One process of the one-shot fuzz campaign (``benchmarks/fuzz_oneshot.py``): it imports the
backend once, then reads cases (``fuzz_oneshot_inputs.make_case``'s JSON dicts) one a line on
stdin, runs each through its surface (``recipe_spec.oneshot``, ``ScheduledModifierManager.apply``
or ``recipe-spec oneshot`` through ``recipe_spec.cli.main``) under ``SIGALRM``, and answers one
JSON line per case on the file descriptor it was given (library output goes to stderr).

The outcome of a case (:func:`classify`):

- ``refused``: a clear refusal (:func:`unclear` finds nothing wrong with the exception), the
  model as it was (:func:`fingerprint`: every parameter and buffer bit for bit, module types,
  hooks, config, one forward) and the output folder's surroundings as they were;
- ``ran``: the run completed, the output folder complete and loadable if one was asked for,
  nothing else beside it, and finite logits from a model that computed finite ones before;
- defects: ``hang`` (over the time limit), ``raw-error`` (any other exception, or the command
  line's "internal error"), ``half-changed`` (a refusal that changed the model), ``half-written``
  (a refusal that changed the folders, or a run whose folder is incomplete or left files
  behind), ``silent`` (a run of a case a correct tool refuses), ``bad-run`` (non-finite logits
  after a run).

    python tests/fuzz_oneshot_worker.py --backend torch|keras --limit 20 --fd N
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import linecache
import os
import signal
import stat
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from fuzz_oneshot_surfaces import call, call_cli, fake

ROOT = Path(__file__).resolve().parent.parent
#: recipe-spec's code: the package and its backends (``recipe_spec_torch``/``recipe_spec_keras``,
#: ``backends/`` here, reached through ``.shim`` links or installed as packages)
_OURS = (str(ROOT / "recipe_spec") + os.sep, str(ROOT / "backends") + os.sep, str(ROOT / ".shim") + os.sep,
         *(os.sep + name + os.sep for name in ("recipe_spec", "recipe_spec_torch", "recipe_spec_keras")))
_BINDING = ("unexpected keyword argument", "required positional argument", "positional argument")
DEFECTS = ("hang", "raw-error", "half-changed", "half-written", "silent", "bad-run")


class CaseTimeout(BaseException):
    """The case ran past its time limit (raised by SIGALRM; no ``except Exception`` stops it)."""


def unclear(exc: BaseException, keywords: tuple[str, ...] = ()) -> str | None:
    """None when ``exc`` is a clear refusal: a ValueError / TypeError / RecipeError /
    OutputDirError (or another exception class of recipe-spec's) raised by a ``raise`` statement of recipe-spec's own code (or Python's own
    TypeError for a keyword of ``keywords``, the caller's, that the called function does not
    take), with a message that is not an internal error. Otherwise what is wrong with it."""
    from recipe_spec.atomic import OutputDirError

    if not isinstance(exc, (ValueError, TypeError, OutputDirError)) and not _ours(type(exc)):
        return f"{type(exc).__name__} is not a refusal"
    message = str(exc)
    if not message.strip() or "internal error" in message.lower() or "please report" in message.lower():
        return f"message {message[:80]!r}"
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    last = frames[-1]
    harness = (__file__, call.__code__.co_filename)
    if last.filename in harness and last.name.startswith("_fake_"):
        pass  # the fake surfaces of the harness's own tests stand for recipe-spec's code
    elif isinstance(exc, TypeError) and any(b in message for b in _BINDING) and (
            last.filename in harness or any(f"'{k}'" in message for k in keywords)):
        return None
    elif not (last.filename.startswith(_OURS[:3] + _package_dirs())
              or any(part in last.filename for part in _OURS[3:])):
        return f"raised in {_where(last)}"
    line = (linecache.getline(last.filename, last.lineno) or last.line or "").strip()
    if not line.startswith("raise"):
        return f"Python's own {type(exc).__name__} at {_where(last)}: {line[:80]}"
    return None


def _package_dirs() -> tuple[str, ...]:
    """The folders the imported recipe-spec packages were loaded from (an installed copy of
    ``backends/`` elsewhere than this checkout, e.g. an editable install of another clone)."""
    out = []
    for name in ("recipe_spec", "recipe_spec_torch", "recipe_spec_keras"):
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None)
        if where:
            out += [os.path.dirname(where) + os.sep, os.path.dirname(os.path.realpath(where)) + os.sep]
    return tuple(out)


def _ours(cls: type) -> bool:
    """An exception class recipe-spec defines (SolverError, PlanError, ...)."""
    return cls.__module__.split(".")[0] in ("recipe_spec", "recipe_spec_torch", "recipe_spec_keras")


def _where(frame: Any) -> str:
    name = frame.filename
    for base in (str(ROOT) + os.sep, *[p + os.sep for p in sys.path if p and name.startswith(p + os.sep)]):
        if name.startswith(base):
            name = name[len(base):]
            break
    return f"{name}:{frame.lineno} ({frame.name})"


# -- folders ---------------------------------------------------------------------------------------------

def tree(folder: Path) -> dict[str, tuple[str, str]]:
    """Every path under ``folder``: its kind and content hash (files) or mode (folders)."""
    out: dict[str, tuple[str, str]] = {}
    if not folder.exists():
        return out
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_symlink() or not path.is_dir():
            out[rel] = ("file", hashlib.sha1(path.read_bytes()).hexdigest() if path.is_file() else "?")
        else:
            out[rel] = ("dir", oct(stat.S_IMODE(path.stat().st_mode)))
    return out


def make_output(kind: str, base: Path) -> str | None:
    """The ``output_dir`` of a case in ``base`` (made and filled as ``kind`` says)."""
    base.mkdir(parents=True, exist_ok=True)
    target = base / "model"
    if kind == "none":
        return None
    if kind == "empty-string":
        return ""
    if kind in ("empty", "readonly", "nonempty", "nonempty-force", "sharded", "sharded-force"):
        target.mkdir()
    if kind == "file":
        target.write_text("not a folder\n")
    elif kind == "readonly":
        target.chmod(0o555)
    elif kind.startswith("nonempty"):
        (target / "notes.txt").write_text("kept?\n")
        (target / "sub").mkdir()
        (target / "sub" / "a.bin").write_bytes(b"\0" * 16)
    elif kind.startswith("sharded"):
        (target / "config.json").write_text('{"model_type": "llama"}\n')
        shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        for s in shards:
            (target / s).write_bytes(b"\x08\0\0\0\0\0\0\0{}      ")
        (target / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": shards[0], "b": shards[1]}}))
    elif kind == "missing-parent":
        return str(base / "a" / "b" / "model")
    elif kind == "parent-is-file":
        (base / "f").write_text("x\n")
        return str(base / "f" / "model")
    return str(target)


# -- one case ---------------------------------------------------------------------------------------------

def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


def run_case(case: dict[str, Any], side: Any, limit: float, work: Path) -> dict[str, Any]:
    """Run ``case`` and classify it: ``{"outcome", "detail", "flags", "seconds"}``."""
    folder = work / f"case-{case['backend']}-{case['id']}"
    folder.mkdir(parents=True)
    outdir = folder / "out"
    output = make_output(case["output"]["kind"], outdir)
    cli = case["surface"] == "cli"
    checkpoint = None
    if cli:
        checkpoint = side.checkpoint(case["model"], work)
        before_model = tree(checkpoint)
        finite_before = case["model"]["variant"] not in ("nan-weight", "inf-weight")
    else:
        case["_model"] = side.build(case["model"])
        before_model = side.fingerprint(case["_model"])
        finite_before = side.finite_forward(case["_model"])
    before_out = tree(outdir)
    exc: BaseException | None = None
    code, err, seen = 0, "", None
    started = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        if case["surface"].startswith("fake-"):
            fake(case, side, output)
        elif cli:
            code, err, seen = call_cli(case, checkpoint, folder, output)
        else:
            call(case, side, folder, output)
    except CaseTimeout as e:
        exc = e
    except Exception as e:  # noqa: BLE001 - classified below
        exc = e
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    seconds = time.perf_counter() - started
    if isinstance(exc, CaseTimeout):
        result = {"outcome": "hang", "detail": f"over {limit:g} s", "flags": ["hang"]}
        if not cli:
            side.drop(case["_model"])
    else:
        after_model = tree(checkpoint) if cli else side.fingerprint(case["_model"])
        result = classify(case, exc, code, err, seen, before_model != after_model, before_out, tree(outdir),
                          output, outdir, side, finite_before)
        if not cli and before_model != after_model:
            side.drop(case["_model"])
    case.pop("_model", None)
    result["seconds"] = round(seconds, 3)
    if output:
        with contextlib.suppress(OSError):
            Path(output).chmod(0o755)
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    return result


def classify(case: dict[str, Any], exc: BaseException | None, code: int, err: str, seen: Any, model_changed: bool,
             before_out: dict[str, Any], after_out: dict[str, Any], output: str | None, outdir: Path, side: Any,
             finite_before: bool) -> dict[str, Any]:
    """The outcome of a case that ended within its time limit (see the module docstring)."""
    flags, notes = [], []
    cli = case["surface"] == "cli"
    if cli:
        refused = code != 0
        if code not in (0, 1, 2) or "internal error" in err.lower() or "Traceback" in err:
            flags.append("raw-error")
            notes.append(f"exit {code}: {err.strip()[-300:]}")
        elif refused and seen is not None and unclear(seen):
            flags.append("raw-error")
            notes.append(f"{unclear(seen)}: {type(seen).__name__}: {str(seen)[:200]}")
        elif refused:
            notes.append(f"exit {code}: {err.strip()[:200]}")
    else:
        refused = exc is not None
        if refused:
            why = unclear(exc, tuple(case["args"]))  # type: ignore[arg-type]
            notes.append(f"{type(exc).__name__}: {str(exc)[:240]}")
            if why:
                flags.append("raw-error")
                notes.insert(0, why)
    target = Path(output).resolve() if output else None
    inside = str(target.relative_to(outdir.resolve())) if target and target.is_relative_to(outdir.resolve()) else None
    if refused or cli:
        if model_changed:
            flags.append("half-changed")
            notes.append("the model (or the checkpoint folder) changed")
    if refused:
        if before_out != after_out:
            flags.append("half-written")
            changed = sorted(set(before_out.items()) ^ set(after_out.items()))
            notes.append(f"the output folders changed: {[p for p, _ in changed][:5]}")
    else:
        notes.extend(_check_run(case, before_out, after_out, output, inside, side, finite_before, flags))
        if case["expect"] == "refuse":
            flags.append("silent")
            notes.insert(0, f"ran, but {case['family']}/{case['mutation']} is refused by a correct tool")
    outcome = next((d for d in DEFECTS if d in flags), "refused" if refused else "ran")
    return {"outcome": outcome, "detail": "; ".join(notes)[:800], "flags": flags}


def _check_run(case: dict[str, Any], before_out: dict[str, Any], after_out: dict[str, Any], output: str | None,
               inside: str | None, side: Any, finite_before: bool, flags: list[str]) -> list[str]:
    notes = []
    prefix = None if inside is None else inside + os.sep
    outside = {p: v for p, v in after_out.items() if prefix is None or (p != inside and not p.startswith(prefix))}
    kept = {p: v for p, v in before_out.items() if prefix is None or (p != inside and not p.startswith(prefix))}
    if output is not None and inside is not None:
        kept = {p: v for p, v in kept.items() if not (inside.startswith(p + os.sep))}
        outside = {p: v for p, v in outside.items() if not (inside.startswith(p + os.sep))}
    if outside != kept:
        flags.append("half-written")
        notes.append(f"files beside the output: {sorted(set(outside) ^ set(kept))[:5]}")
    if output:
        problem = side.check_saved(output, finite_before) if os.path.isdir(output) else "no output folder"
        stale = [p for p, v in before_out.items() if prefix and p.startswith(prefix) and v[0] == "file"
                 and after_out.get(p) == v and os.path.basename(p) not in ("config.json", "recipe.yaml")]
        if problem or stale:
            flags.append("half-written")
            notes.append(problem or f"files of the old folder kept: {stale[:4]}")
    if case["surface"] != "cli" and finite_before and not side.finite_forward(case["_model"]):
        flags.append("bad-run")
        notes.append("non-finite logits after the run")
    kept = getattr(side, "tied_kept", None)
    if case["surface"] != "cli" and kept is not None and not kept(case["_model"]):
        flags.append("bad-run")
        notes.append("compressing the tied head changed the input embedding")
    return notes


# -- the process ------------------------------------------------------------------------------------------

def serve(backend: str, limit: float, fd: int) -> None:
    """Answer cases from stdin on ``fd`` until stdin closes."""
    import tempfile

    answer = os.fdopen(fd, "w", buffering=1)
    side = _side(backend)
    work = Path(tempfile.mkdtemp(prefix=f"fuzz-oneshot-{backend}-"))
    answer.write(json.dumps({"ready": True}) + "\n")
    try:
        for line in sys.stdin:
            case = json.loads(line)
            try:
                result = run_case(case, side, case.get("limit", limit), work)
            except Exception as exc:  # noqa: BLE001 - the harness's own trouble, reported as such
                result = {"outcome": "harness-error", "detail": f"{type(exc).__name__}: {exc}"[:800], "flags": []}
            answer.write(json.dumps(result) + "\n")
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def _side(backend: str) -> Any:
    import warnings

    warnings.simplefilter("ignore")
    os.environ.setdefault("TQDM_DISABLE", "1")
    import logging

    logging.disable(logging.WARNING)
    if backend == "keras":
        import fuzz_oneshot_keras as side
    else:
        import fuzz_oneshot_torch as side
    import transformers

    transformers.logging.set_verbosity_error()
    side.warm()
    return side


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--limit", type=float, default=20.0)
    ap.add_argument("--fd", type=int, required=True)
    args = ap.parse_args()
    sys.stdout = sys.stderr  # library prints must not mix with the answers
    serve(args.backend, args.limit, args.fd)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
