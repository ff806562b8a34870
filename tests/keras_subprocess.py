"""A Keras script run in a process of its own on one backend and device (Keras picks its backend
once per process), for the ``cuda`` tests: the script writes its arrays to the ``.npz`` path
it is given and prints a JSON report as its last line."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = {"jax": "jax", "torch": "torch"}  # backend: the module it needs


def run_script(script: str, backend: str, device: str, tmp: Path,
               extra_env: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``script`` on ``backend``, on the CPU (JAX and CUDA told so) or the GPU, with
    ``extra_env`` in its environment: its report and its arrays. Skips where Keras or the
    backend's framework is not installed."""
    if importlib.util.find_spec("keras") is None or importlib.util.find_spec(BACKENDS[backend]) is None:
        pytest.skip(f"keras or {BACKENDS[backend]} is not installed")
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONHASHSEED="0", JAX_DEFAULT_MATMUL_PRECISION="highest")
    env.pop("RECIPE_SPEC_KERAS_SOLVES", None)  # where the host solves: the device's default, or extra_env's
    env.update(extra_env or {})
    if device == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("JAX_PLATFORMS", None)
    tag = "-".join([backend, device, *(f"{k}={v}" for k, v in sorted((extra_env or {}).items()))])
    path = tmp / f"script-{tag}.py"
    path.write_text(script)
    out = tmp / f"{tag}.npz"
    done = subprocess.run([sys.executable, str(path), str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    with np.load(out) as saved:
        return report, {k: saved[k] for k in saved.files}
