"""The Keras test files that must pass on every Keras 3 backend, run again on JAX and torch.

Keras picks its backend once per process (``KERAS_BACKEND``, read at ``import keras``), so the
rest of the suite runs on TensorFlow and this module runs the chosen files in one pytest
subprocess per other backend, both started at once: when the suite's collection selects a test
of this module (``tests/conftest.py``, which also puts these tests last), so that they run
beside the rest of the suite, which mostly keeps one core of a two-core machine busy. Each file
then gets one test per backend here, which fails with that file's failures and their messages,
and also when the file ran no test at all.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the files that must pass on every backend (test_keras_jax.py: JAX's own checks)
FILES = ("test_keras_conformance.py", "test_keras_parity.py", "test_keras_masks.py",
         "test_keras_qat.py", "test_keras_resume.py", "test_keras_modifiers.py", "test_acdc.py",
         "test_keras_jax.py", "test_oneshot_keras.py", "test_keras_quantized.py",
         "test_smoothing_keras.py", "test_oneshot_quant_keras.py", "test_oneshot_preflight_keras.py",
         "test_oneshot_inputs_keras.py", "test_oneshot_keras_compiled.py")
BACKENDS = {"jax": "jax", "torch": "torch"}  # backend: the module it needs
TIMEOUT_S = 1200

pytestmark = pytest.mark.slow

_RUNS: dict[str, subprocess.Popen[str]] = {}
_RESULTS: dict[str, tuple[int, str, dict[str, dict[str, list[str] | int]]]] = {}


def _start(backend: str, tmp: Path) -> None:
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONHASHSEED="0")
    if backend == "jax":
        # two CPU devices for keras.distribution.DataParallel (test_keras_jax.py)
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
        env.setdefault("JAX_PLATFORMS", "cpu")
    report = tmp / f"{backend}.xml"
    # a basetemp of its own: a child pytest using the shared one would rotate it, deleting the
    # oldest sessions' folders (this one's, or another run's) while they are in use
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
               f"--basetemp={tmp / (backend + '-tmp')}", *(str(ROOT / "tests" / f) for f in FILES)]
    with (tmp / f"{backend}.log").open("w") as log:  # a file: nobody reads a pipe until the tests run
        _RUNS[backend] = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def _collect(backend: str, tmp: Path) -> tuple[int, str, dict[str, dict[str, list[str] | int]]]:
    if backend not in _RESULTS:
        process = _RUNS[backend]
        note = ""
        try:
            process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            note = f"\n(killed after {TIMEOUT_S} s more)"
        output = (tmp / f"{backend}.log").read_text(errors="replace") + note
        by_file: dict[str, dict[str, list[str] | int]] = {f: {"ran": 0, "failed": []} for f in FILES}
        report = tmp / f"{backend}.xml"
        if report.exists():
            for case in ET.parse(report).getroot().iter("testcase"):
                name = case.get("classname", "").rsplit(".", 1)[-1] + ".py"
                entry = by_file.get(name)
                if entry is None:
                    continue
                if case.find("skipped") is not None:
                    continue
                entry["ran"] = int(entry["ran"]) + 1  # type: ignore[arg-type]
                for bad in (*case.findall("failure"), *case.findall("error")):
                    entry["failed"].append(f"{case.get('name')}: {bad.get('message', '')}\n{(bad.text or '')[-3000:]}")  # type: ignore[union-attr]
        if not report.exists():
            output += f"\n(no report: {report} was not written)"
        _RESULTS[backend] = (process.returncode, output, by_file)
    return _RESULTS[backend]


_TMP: list[Path] = []  # where the runs write (one folder, made by start_runs)


def start_runs() -> Path:
    """Start one pytest per installed backend (once; ``tests/conftest.py`` calls this when the
    suite's collection selects a test of this module, the fixture otherwise); their folder."""
    if not _TMP:
        # outside pytest's basetemp root, which concurrent pytest sessions rotate
        _TMP.append(Path(tempfile.mkdtemp(prefix="recipe-spec-keras-backends-")))
        for backend, module in BACKENDS.items():
            if importlib.util.find_spec(module) is not None:
                _start(backend, _TMP[0])
    return _TMP[0]


def stop_runs() -> None:
    """Kill the runs still going and remove their folder."""
    for process in _RUNS.values():
        if process.poll() is None:
            process.kill()
            process.wait()
    for tmp in _TMP:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def runs() -> Iterator[Path]:
    try:
        yield start_runs()
    finally:
        stop_runs()


@pytest.mark.parametrize("test_file", FILES)
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_keras_file_passes_on_backend(backend: str, test_file: str, runs: Path) -> None:
    if backend not in _RUNS:
        pytest.skip(f"{BACKENDS[backend]} is not installed (pip install 'jax[cpu]>=0.4.30' for JAX)")
    code, output, by_file = _collect(backend, runs)
    entry = by_file[test_file]
    failed = entry["failed"]
    assert not failed, f"KERAS_BACKEND={backend} {test_file}: {len(failed)} failed\n" + "\n\n".join(failed)  # type: ignore[arg-type]
    if test_file == "test_keras_jax.py" and backend != "jax":
        return  # JAX's own checks skip themselves elsewhere
    assert int(entry["ran"]) > 0, f"KERAS_BACKEND={backend} {test_file} ran no test:\n{output[-4000:]}"  # type: ignore[arg-type]
    assert code in (0, 1), f"KERAS_BACKEND={backend}: pytest exited with {code}:\n{output[-4000:]}"
