"""A fuzz campaign of the one-shot surfaces: ``recipe_spec.oneshot``,
``ScheduledModifierManager.apply(model, calibration=...)`` and ``recipe-spec oneshot``, on
PyTorch (a tiny random transformers Llama) and Keras (a tiny random keras-hub ``LlamaCausalLM``).

Each case (``tests/fuzz_oneshot_inputs.py``, rebuilt from its id) is a valid run with one
mutation of its recipe, calibration data, arguments, model or output folder; it runs in a
persistent worker process (``tests/fuzz_oneshot_worker.py``) under a time limit (SIGALRM in the
worker, and a watchdog here that kills a stuck worker, records a ``hang`` and starts another).
The outcome is ``refused`` (a clear refusal, the model and the folders untouched), ``ran`` (a
complete run: a complete, loadable output folder if asked for, finite logits) or a defect:
``hang``, ``raw-error``, ``half-changed``, ``half-written``, ``silent`` (a run of a case a
correct tool refuses), ``bad-run`` (non-finite logits after a run). Prints counts per backend,
surface and generator family; ``--out`` writes every defect with the command that reruns it.
Exit 1 if any defect was found.

    python benchmarks/fuzz_oneshot.py [--count 1000] [--seed 0] [--backend torch|keras|all]
        [--surface api|manager|cli] [--jobs 1] [--limit S] [--keras-backend tensorflow|jax]
        [--out report.json] [--case ID] [--progress 100]

``--seed S`` starts at case id S (cases ``S .. S + count - 1``); ``--case ID`` reruns one case
and prints it in full; ``--jobs N`` runs N worker processes per backend side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz_oneshot_driver import DEFECTS, reproducer, run_cases, summary  # noqa: E402
from fuzz_oneshot_inputs import make_case  # noqa: E402

LIMITS = {"torch": 20.0, "keras": 60.0}


def _cases(args: argparse.Namespace, backend: str, job: int) -> list[dict[str, Any]]:
    surface = None if args.surface == "all" else args.surface
    return [dict(make_case(i, backend, surface), limit=args.limit or LIMITS[backend])
            for i in range(args.seed + job, args.seed + args.count, args.jobs)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1000, help="cases per backend")
    ap.add_argument("--seed", type=int, default=0, help="the first case id")
    ap.add_argument("--backend", choices=["torch", "keras", "all"], default="torch")
    ap.add_argument("--surface", choices=["api", "manager", "cli", "all"], default="all")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes per backend")
    ap.add_argument("--limit", type=float, help="seconds one case may take (default: 20 on PyTorch, 60 on Keras, "
                    "whose first run of a layer shape traces its functions)")
    ap.add_argument("--keras-backend", default="tensorflow")
    ap.add_argument("--out", type=Path, help="write the results (every defect with its reproducer) here")
    ap.add_argument("--case", type=int, help="rerun this one case id and print it")
    ap.add_argument("--progress", type=int, default=200, help="print a line every N cases")
    ap.add_argument("--log", type=Path, help="the workers' stderr (default: discarded)")
    ap.add_argument("--regressions", type=Path, help="add one case of each new defect kind to this file "
                    "(tests/fixtures/oneshot_fuzz_regressions.json, replayed by tests/test_oneshot_fuzz_regressions.py)")
    args = ap.parse_args()
    backends = ["torch", "keras"] if args.backend == "all" else [args.backend]
    log = args.log.open("ab") if args.log else None

    if args.case is not None:
        case = dict(make_case(args.case, backends[0], None if args.surface == "all" else args.surface),
                    limit=args.limit or LIMITS[backends[0]])
        print(json.dumps(case, indent=1))
        (result,) = run_cases([case], case["limit"], args.keras_backend, log)
        print(json.dumps(result, indent=1))
        return int(result["outcome"] in DEFECTS)

    began = time.monotonic()
    done: list[dict[str, Any]] = []

    def told(case: dict[str, Any], result: dict[str, Any]) -> None:
        done.append(result)
        if result["outcome"] in DEFECTS or result["outcome"] == "harness-error":
            print(f"  {result['outcome']:12} {reproducer(result)}  [{result['family']}/{result['mutation']}] "
                  f"{result['detail'][:160]}", flush=True)
        if len(done) % args.progress == 0:
            print(f"  ... {len(done):,} cases in {(time.monotonic() - began) / 60:.1f} min", flush=True)

    jobs = [(b, j) for b in backends for j in range(args.jobs)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        list(pool.map(lambda bj: list(run_cases(_cases(args, *bj), 20.0, args.keras_backend, log, told)), jobs))
    wall = time.monotonic() - began
    print(f"\n{len(done):,} cases ({', '.join(backends)}; Keras on {args.keras_backend}) in {wall / 60:.1f} min, "
          f"{args.jobs} worker(s) per backend, "
          + ", ".join(f"{args.limit or LIMITS[b]:g} s per {b} case" for b in backends) + "\n")
    print(summary(done))
    defects = [r for r in done if r["outcome"] in DEFECTS or r["outcome"] == "harness-error"]
    kinds: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for r in defects:
        kinds.setdefault((r["backend"], r["outcome"], r["family"], r["mutation"]), dict(r, count=0))["count"] += 1
    print(f"defects: {len(defects)} in {len(kinds)} kinds (backend, outcome, family/mutation)")
    for (backend, outcome, family, mutation), r in sorted(kinds.items()):
        print(f"  {backend:6} {outcome:12} {family}/{mutation} x{r['count']}: {reproducer(r)}\n      {r['detail'][:200]}")
    over = [r for r in done if r["outcome"] == "refused" and r["expect"] == "run"]
    print(f"refused although a correct tool runs them (not counted as defects; check): {len(over)}")
    seen_kinds: set[tuple[str, str, str]] = set()
    for r in over:
        if (r["backend"], r["family"], r["mutation"]) not in seen_kinds:
            seen_kinds.add((r["backend"], r["family"], r["mutation"]))
            print(f"  {r['backend']:6} {r['family']}/{r['mutation']}: {reproducer(r)}\n      {r['detail'][:200]}")
    if args.out:
        args.out.write_text(json.dumps({
            "cases": len(done), "minutes": round(wall / 60, 2), "backends": backends,
            "keras_backend": args.keras_backend, "limit_s": {b: args.limit or LIMITS[b] for b in backends},
            "outcomes": {o: sum(r["outcome"] == o for r in done) for o in sorted({r["outcome"] for r in done})},
            "defects": [dict(r, reproducer=reproducer(r)) for r in defects],
            "kinds": [dict(r, reproducer=reproducer(r)) for r in kinds.values()],
            "refused_valid": [dict(r, reproducer=reproducer(r)) for r in over],
            "results": done,
        }, indent=1) + "\n")
    if args.regressions:
        _save_regressions(args.regressions, kinds, args)
    return int(bool(defects))


def _save_regressions(path: Path, kinds: dict[tuple[str, str, str, str], dict[str, Any]],
                      args: argparse.Namespace) -> None:
    """One case of each defect kind not in ``path`` yet, in full (the replay does not depend on
    the generator), marked as failing now."""
    held = json.loads(path.read_text()) if path.exists() else {"cases": []}
    known = {(e["case"]["backend"], e["found"], e["case"]["family"], e["case"]["mutation"]) for e in held["cases"]}
    added = 0
    for key, r in sorted(kinds.items()):
        if key in known:
            continue
        case = make_case(r["id"], r["backend"], None if args.surface == "all" else args.surface)
        held["cases"].append({"key": f"{r['backend']}-{r['id']}-{r['family']}-{r['mutation']}", "found": r["outcome"],
                              "fails_now": True, "detail": r["detail"][:400], "case": case})
        added += 1
    path.write_text(json.dumps(held, indent=1) + "\n")
    print(f"{added} new case(s) in {path} ({len(held['cases'])} in all)")


if __name__ == "__main__":
    sys.exit(main())
