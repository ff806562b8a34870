"""Validation throughput: full `recipe-spec validate` work on 1,000 recipe files (the corpus
repeated) in one process, against a bare libyaml parse (`yaml.compose` with
`yaml.CSafeLoader`, a user's own baseline) of the same texts in the same run.

Target: full validation within 2x of the bare parse. Also prints the time per file of each
dialect's corpus files (stage/group recipes no slower per file than ``!Modifier`` ones). Also times one `recipe-spec validate FILE`
process (target: under 0.3 s wall; it must not import a framework).

    python benchmarks/bench_validate.py [--files 1000] [--update-docs]

``--update-docs`` writes the figures into docs/validate.md.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from recipe_spec.validation import validate

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


def corpus_rows() -> list[dict[str, str]]:
    with (SHARED / "corpus" / "INDEX.tsv").open(newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def corpus_files(dialect: str | None = None) -> list[Path]:
    """The corpus files; ``dialect``: only the stage/group ones (``"stage"``) or only the
    ``!Modifier`` ones (``"modifier"``)."""
    return [SHARED / r["stored_at"].split("/", 1)[1] for r in corpus_rows()
            if dialect is None or r["format"].startswith("core") == (dialect == "stage")]


def front_matter_text(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        parts = text.split("\n---", 2)
        return parts[1] if len(parts) > 2 else text
    return text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--update-docs", action="store_true", help="write the figures into docs/validate.md")
    args = parser.parse_args()
    lines: list[str] = []

    def say(line: str) -> None:
        print(line)
        lines.append(line)

    files = corpus_files()
    batch = [files[i % len(files)] for i in range(args.files)]
    texts = [front_matter_text(p) for p in batch]

    def bare() -> None:
        for t in texts:
            try:
                yaml.compose(t, Loader=yaml.CSafeLoader)
            except yaml.YAMLError:
                pass

    def full() -> None:
        for p in batch:
            validate(p)

    timings: dict[str, list[float]] = {"compose": [], "validate": []}
    for _ in range(args.repeats):
        for name, fn in (("compose", bare), ("validate", full)):
            t0 = time.perf_counter()
            fn()
            timings[name].append(time.perf_counter() - t0)
    compose_s = min(timings["compose"])
    validate_s = min(timings["validate"])
    ratio = validate_s / compose_s
    say(f"- {args.files:,} files (the corpus of {len(files)} repeated), best of {args.repeats} passes:")
    say(f"  - `yaml.compose` with `CSafeLoader`: {args.files / compose_s:,.0f} files/s ({compose_s:.3f} s)")
    say(f"  - full validation: {args.files / validate_s:,.0f} files/s ({validate_s:.3f} s)")
    say(f"  - **validate/compose: {ratio:.2f}x** (target <= 2x: {'met' if ratio <= 2 else 'not met'}); "
        f"first pass (one-time set-up, empty caches): {timings['validate'][0] / timings['compose'][0]:.2f}x")

    # per dialect: each file of a dialect validated in turn, best of the repeats, per file
    per_file: dict[str, float] = {}
    for dialect in ("modifier", "stage"):
        group = corpus_files(dialect)
        best = float("inf")
        for _ in range(args.repeats + 2):
            t0 = time.perf_counter()
            for p in group:
                validate(p)
            best = min(best, time.perf_counter() - t0)
        per_file[dialect] = best / len(group)
    say(f"- per file: `!Modifier` recipes {per_file['modifier'] * 1e6:,.0f} µs ({len(corpus_files('modifier'))} "
        f"corpus files), stage/group recipes {per_file['stage'] * 1e6:,.0f} µs ({len(corpus_files('stage'))}); "
        f"ratio {per_file['stage'] / per_file['modifier']:.2f} (target <= 1)")

    one = SHARED / "corpus" / "real" / (
        "sparseml__integrations__huggingface-transformers__recipes__90sparsity10epochs.yaml"
    )
    exe = Path(sys.executable).with_name("recipe-spec")
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([str(exe), "validate", str(one)], capture_output=True, check=False)
        walls.append(time.perf_counter() - t0)
    bare_py = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare_py.append(time.perf_counter() - t0)
    say(
        f"- one `recipe-spec validate FILE` process: median {statistics.median(walls):.3f} s wall "
        f"(target < 0.3 s); bare `python -c pass`: {statistics.median(bare_py):.3f} s"
    )
    if args.update_docs:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from docfigures import replace_block

        replace_block("validate.md", "bench_validate", lines)


if __name__ == "__main__":
    main()
