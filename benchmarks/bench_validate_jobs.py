"""`recipe-spec validate DIR` on 10,000 recipe files (the corpus repeated into a temporary
directory): `--jobs 1` (one process) against `--jobs 2`, each as one command, wall time.

    python benchmarks/bench_validate_jobs.py [--files 10000] [--jobs 2]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_validate import corpus_files


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    files = corpus_files()
    exe = Path(sys.executable).with_name("recipe-spec")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.files):
            src = files[i % len(files)]
            folder = Path(tmp) / f"d{i // 500:03d}"
            folder.mkdir(exist_ok=True)
            shutil.copy(src, folder / f"{i:05d}{src.suffix}")
        outputs, walls = {}, {}
        for jobs in (1, args.jobs):
            t0 = time.perf_counter()
            done = subprocess.run(
                [str(exe), "validate", tmp, "--jobs", str(jobs)], capture_output=True, text=True
            )
            walls[jobs] = time.perf_counter() - t0
            outputs[jobs] = (done.returncode, done.stdout)
    print(f"files: {args.files} (corpus of {len(files)} repeated)")
    for jobs, wall in walls.items():
        print(f"--jobs {jobs}: {wall:.2f} s ({args.files / wall:.0f} files/s)")
    print(f"speed-up: {walls[1] / walls[args.jobs]:.2f}x; same output: {outputs[1] == outputs[args.jobs]}")


if __name__ == "__main__":
    main()
