"""A long fuzzing run: hostile recipes (``tests/fuzz_inputs.py``: mutated corpus recipes,
generated modifiers, random text) through load / validate / plan / lint and the CLI, for as
long as asked. Every input must end in a located diagnostic or a clean result within its time
limit; anything else is a failure, printed with the seed that rebuilds it.

Prints the inputs tried, the outcomes, the failures (none expected), the slowest input and the
process's peak memory; the slowest time is compared with the median (a ratio, so that it reads
the same on a fast or slow machine). Exit 1 if anything failed.

    python benchmarks/fuzz_recipes.py [--minutes 10 | --inputs 20000] [--seed 0] [--limit 2.0] [--jobs 1]
        [--train [--train-limit 5.0]] [--save DIR] [--update-docs]

``--train`` adds the training path (``tests/fuzz_training.py``): each input also goes through
``ScheduledModifierManager.from_yaml`` and, where it loads, ``modify`` / at most 40 optimizer
steps on a tiny PyTorch model / ``finalize``, where the only outcomes allowed are success, a
located ``RecipeError`` and a located ``PlanError`` at ``modify()`` (a diverged loss and an
M-FAC/OBS gradient budget end a run early, counted apart); any error during the steps or
``finalize`` is a failure ("a raw error mid-training"), and so is a run over ``--train-limit``
seconds. Its inputs are drawn by ``make_training_input`` (half of them built to reach training).
``--inputs N`` runs exactly N inputs (seeds ``seed .. seed + N - 1``) instead of a duration;
``--jobs N`` splits them over N processes (each takes every N-th seed).

Time limits count the process's CPU time (a machine busy with other work is no hang).
``--save DIR`` writes each failing input there. An input that hangs inside C code or waits
(where the per-input limit cannot interrupt it) ends the process through ``faulthandler``
after ``10 x`` the limit in wall-clock seconds, with the stack and the seed.
"""

from __future__ import annotations

import argparse
import collections
import faulthandler
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz_inputs import FuzzFailure, Hang, corpus_texts, exercise, make_input  # noqa: E402

from recipe_spec.atomic import write_text  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _run(args: argparse.Namespace, job: int, jobs: int) -> dict[str, Any]:
    """Inputs ``seed + job``, ``seed + job + jobs``, ...: the figures of one process."""
    texts = corpus_texts()
    make, train_once = make_input, None
    if args.train:
        from fuzz_training import make_training_input
        from fuzz_training import train_once as train_once

        make = make_training_input
    workdir = Path(tempfile.mkdtemp(prefix="fuzz-recipes-"))
    outcomes: collections.Counter[str] = collections.Counter()
    failures: list[tuple[int, str]] = []
    times: list[float] = []
    slowest, slowest_train, trained_ok = (0.0, -1), (0.0, -1), 0
    deadline = time.monotonic() + args.minutes * 60
    seed = args.seed + job
    next_report = time.monotonic() + 60
    while (seed - args.seed < args.inputs) if args.inputs else (time.monotonic() < deadline):
        text = make(random.Random(seed), texts)
        faulthandler.dump_traceback_later(10 * max(args.limit, args.train_limit if args.train else 0), exit=True)
        started = time.perf_counter()
        try:
            outcomes[exercise(text, workdir, args.limit)] += 1
            if train_once is not None:  # from_yaml refuses what does not load, located
                train_started = time.perf_counter()
                trained = train_once(text, seed, args.train_limit)
                slowest_train = max(slowest_train, (time.perf_counter() - train_started, seed))
                outcomes[trained] += 1
                trained_ok += trained == "train-ok"
        except (FuzzFailure, Hang) as exc:
            outcomes["FAILED"] += 1
            failures.append((seed, f"{type(exc).__name__}: {exc}"[:500]))
            print(f"  seed {seed}: {failures[-1][1]}", flush=True)
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                write_text(args.save / f"seed-{seed}.yaml", text)
        finally:
            faulthandler.cancel_dump_traceback_later()
        elapsed = time.perf_counter() - started
        times.append(elapsed)
        slowest = max(slowest, (elapsed, seed))
        seed += jobs
        if time.monotonic() > next_report:
            print(f"  ... process {job}: {len(times):,} inputs, {len(failures)} failures", flush=True)
            next_report += 60
    return {
        "outcomes": outcomes, "failures": failures, "times": times, "slowest": slowest,
        "slowest_train": slowest_train, "trained_ok": trained_ok, "last_seed": seed - jobs,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _job(packed: tuple[argparse.Namespace, int, int]) -> dict[str, Any]:
    return _run(*packed)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0, help="the first seed (input n uses seed + n)")
    ap.add_argument("--limit", type=float, default=2.0, help="seconds one call may take")
    ap.add_argument("--inputs", type=int, help="run exactly this many inputs (instead of --minutes)")
    ap.add_argument("--jobs", type=int, default=1, help="processes, each taking every jobs-th seed")
    ap.add_argument("--train", action="store_true", help="also run each input through the training path")
    ap.add_argument("--train-limit", type=float, default=5.0, help="seconds the training path may take")
    ap.add_argument("--save", type=Path, help="write failing inputs here")
    ap.add_argument("--update-docs", action="store_true", help="write the figures into docs/validate.md")
    args = ap.parse_args()

    span = f"{args.inputs:,} inputs" if args.inputs else f"{args.minutes:g} min"
    print(f"fuzzing {span} from seed {args.seed} in {args.jobs} process(es), {args.limit:g} s per call"
          + (f", training path {args.train_limit:g} s" if args.train else ""), flush=True)
    began = time.monotonic()
    if args.jobs == 1:
        parts = [_run(args, 0, 1)]
    else:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            parts = pool.map(_job, [(args, j, args.jobs) for j in range(args.jobs)])
    wall = time.monotonic() - began
    outcomes: collections.Counter[str] = sum((p["outcomes"] for p in parts), collections.Counter())
    failures = sorted(f for p in parts for f in p["failures"])
    times = sorted(t for p in parts for t in p["times"])
    slowest = max(p["slowest"] for p in parts)
    slowest_train = max(p["slowest_train"] for p in parts)
    trained_ok = sum(p["trained_ok"] for p in parts)
    peak_mb = max(p["peak_mb"] for p in parts)
    last = max(p["last_seed"] for p in parts)
    median, p99 = statistics.median(times), times[int(0.99 * (len(times) - 1))]
    print(f"inputs tried:   {len(times):,} (seeds {args.seed}..{last}) in {wall / 60:.1f} min, {args.jobs} process(es)")
    print("paths:          every input through check() and the CLI's validate, lint and schedule; those that "
          f"load through validate and lint, the {outcomes['clean']:,} clean ones through the plan and its queries"
          + (f"; every input through from_yaml and, where it loads, modify(): {trained_ok:,} trained "
             "and finalized" if args.train else ""))
    print(f"outcomes:       {dict(sorted(outcomes.items()))}")
    print(f"failures:       {len(failures)} (uncaught exceptions, internal errors, exits other than 0/1, "
          f"unlocated errors, calls over {args.limit:g} s" + (", raw errors mid-training, training over "
                                                           f"{args.train_limit:g} s" if args.train else "") + ")")
    for seed, what in failures[:20]:
        print(f"  seed {seed}: {what}")
    print(f"time per input: median {median * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
          f"slowest {slowest[0] * 1000:.0f} ms (seed {slowest[1]}): {slowest[0] / median:.0f}x the median")
    if args.train:
        print(f"training path:  slowest {slowest_train[0] * 1000:.0f} ms (seed {slowest_train[1]})")
    print(f"peak memory:    {peak_mb:.0f} MB (the largest process)")
    if args.update_docs:
        from docfigures import replace_block

        replace_block("validate.md", "fuzz_recipes", [
            f"{len(times):,} inputs in {wall / 60:.0f} minutes (seeds {args.seed}..{last}"
            + (", `--train`" if args.train else "") + f", {args.jobs} process(es)): "
            + ", ".join(f"{n:,} {k}" for k, n in sorted(outcomes.items()))
            + (f"; every input also through from_yaml/modify, {trained_ok:,} trained and finalized" if args.train else "")
            + f"; **{len(failures)} failures**. Time per input (every path above): median "
            f"{median * 1000:.0f} ms, 99th percentile {p99 * 1000:.0f} ms, slowest {slowest[0] * 1000:.0f} ms"
            + (f" (the training path alone: slowest {slowest_train[0] * 1000:.0f} ms)" if args.train else "")
            + f"; peak memory {peak_mb:.0f} MB.",
        ])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
