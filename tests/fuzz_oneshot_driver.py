"""The parent side of the one-shot fuzz campaign: persistent worker processes
(``fuzz_oneshot_worker.py``, one backend each) fed cases one at a time, with a watchdog that
kills a worker stuck past the case's limit (SIGALRM blocked, a wait in C code), records the
case as a ``hang`` and starts a new worker; a worker that dies mid-case is a ``raw-error``."""

from __future__ import annotations

import collections
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from fuzz_oneshot_worker import DEFECTS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
__all__ = ["Worker", "run_cases", "summary", "reproducer", "DEFECTS"]


class Worker:
    """One worker process of ``backend`` (``keras_backend`` picks Keras's own)."""

    def __init__(self, backend: str, limit: float, keras_backend: str = "tensorflow", log: Any = None,
                 grace: float = 30.0):
        self.backend, self.limit, self.keras_backend, self.log = backend, limit, keras_backend, log
        self.watchdog = 2 * limit + grace  # past the worker's own alarm: the worker is stuck
        self.proc: subprocess.Popen[bytes] | None = None
        self.read_fd = -1
        self.buffer = b""
        self.ended = False
        self.started = 0

    def start(self) -> None:
        read_fd, write_fd = os.pipe()
        env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3", TQDM_DISABLE="1",
                   KERAS_BACKEND=self.keras_backend, HF_HUB_OFFLINE="1", TF_NUM_INTRAOP_THREADS="1",
                   TF_NUM_INTEROP_THREADS="1", PYTHONPATH=os.pathsep.join(
                       [str(ROOT), str(ROOT / ".shim"), str(HERE), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "fuzz_oneshot_worker.py"), "--backend", self.backend,
             "--limit", str(self.limit), "--fd", str(write_fd)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self.log or subprocess.DEVNULL,
            pass_fds=(write_fd,), env=env, cwd=str(ROOT), start_new_session=True)
        os.close(write_fd)
        self.read_fd, self.buffer, self.ended = read_fd, b"", False
        self.started += 1
        ready = self._line(300.0)
        if ready is None or not json.loads(ready).get("ready"):
            self.stop()
            raise RuntimeError(f"the {self.backend} worker did not start (see its log)")

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, 9)
            self.proc.wait()
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc = None
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1

    def _line(self, timeout: float) -> str | None:
        """The worker's next answer, or None when it does not come within ``timeout`` or the
        worker ended."""
        end = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = end - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.read_fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.read_fd, 65536)
            if not chunk:  # the worker ended
                self.ended = True
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        """Run one case (``case["limit"]``, when given, is its own time limit); the worker is
        (re)started as needed."""
        if self.proc is None or self.proc.poll() is not None:
            self.stop()
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        began = time.monotonic()
        try:
            self.proc.stdin.write((json.dumps(case) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        watchdog = self.watchdog + 2 * (case.get("limit", self.limit) - self.limit)
        line = self._line(watchdog)
        if line is not None:
            return json.loads(line)
        ended = self.ended
        self.stop()
        if not ended:
            return {"outcome": "hang", "flags": ["hang"], "seconds": round(time.monotonic() - began, 1),
                    "detail": f"no answer in {watchdog:g} s (past the worker's own alarm): killed"}
        return {"outcome": "raw-error", "flags": ["raw-error"], "seconds": round(time.monotonic() - began, 1),
                "detail": "the worker process died during the case"}


def run_cases(cases: Iterable[dict[str, Any]], limit: float = 20.0, keras_backend: str = "tensorflow",
              log: Any = None, told: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
              grace: float = 30.0) -> Iterator[dict[str, Any]]:
    """Each case's result (the case's identity and its outcome), one worker per backend."""
    workers: dict[str, Worker] = {}
    try:
        for case in cases:
            worker = workers.get(case["backend"])
            if worker is None:
                worker = workers[case["backend"]] = Worker(case["backend"], limit, keras_backend, log, grace)
            result = worker.run(case)
            out = {k: case[k] for k in ("id", "backend", "surface", "family", "mutation", "expect")}
            out["limit"] = case.get("limit", limit)
            out.update(result)
            if told is not None:
                told(case, out)
            yield out
    finally:
        for worker in workers.values():
            worker.stop()


def reproducer(result: dict[str, Any]) -> str:
    """The one-line command that reruns a case."""
    surface = "" if result["surface"] in ("api", "manager", "cli") else f" --surface {result['surface']}"
    return f"python benchmarks/fuzz_oneshot.py --backend {result['backend']} --case {result['id']}{surface}"


def summary(results: list[dict[str, Any]]) -> str:
    """Counts per outcome: per backend and surface, per generator family."""
    outcomes = ["refused", "ran", *DEFECTS, "harness-error"]
    lines = []
    for key, title in (("surface", "surface"), ("family", "family")):
        table: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for r in results:
            table[(r["backend"], r[key])][r["outcome"]] += 1
        used = [o for o in outcomes if any(c[o] for c in table.values())]
        head = f"{'backend':8} {title:8} {'cases':>6} " + " ".join(f"{o:>12}" for o in used)
        lines += [head, "-" * len(head)]
        for (backend, value), c in sorted(table.items()):
            lines.append(f"{backend:8} {value:8} {sum(c.values()):>6} " + " ".join(f"{c[o]:>12}" for o in used))
        lines.append("")
    return "\n".join(lines)
