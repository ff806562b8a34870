"""Hostile input to `recipe-spec validate`: a clear diagnostic and exit 1 or 2 within seconds,
never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from timing import cpu_time

CASES = {
    "binary.yaml": bytes(range(256)) * 64,
    "random.yaml": bytes((i * 7919 + 13) % 256 for i in range(200_000)),
    "big.yaml": b"modifiers:\n" + b"  - !EpochRangeModifier {start_epoch: 0, end_epoch: 1}\n" * 1_000_000,
    "deep_flow.yaml": b"a: " + b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "deep_block.yaml": b"".join(b" " * i + b"k:\n" for i in range(2000)),
    "bomb.yaml": b"a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + b"".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" .encode() + b", ".join([f"*{chr(97 + i)}".encode()] * 10) + b"]\n"
        for i in range(9)
    ),
    "latin1.yaml": "modifiers:\n  - !EpochRangeModifier\n    note: caf\u00e9\n".encode("latin-1"),
    "nul.md": b"---\nmodifiers: []\n---\n\x00\x00",
    "empty.yaml": b"",
    "recursive.yaml": b"a: &a [*a]\nmodifiers: []\n",
}
EXPECTED_CODE = {
    "binary.yaml": "Y007", "random.yaml": "Y007", "big.yaml": "Y007", "deep_flow.yaml": "Y004",
    "deep_block.yaml": "Y004", "bomb.yaml": "Y004", "latin1.yaml": "Y007", "nul.md": "Y007",
    "empty.yaml": "S001", "recursive.yaml": "Y004",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(CASES[name])
    started = cpu_time()
    out = subprocess.run(
        [sys.executable, "-m", "recipe_spec", "validate", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = cpu_time() - started
    assert out.returncode in (1, 2), out.stdout + out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    assert elapsed < 5.0, f"{name} took {elapsed:.1f} s"
    import json

    (diag,) = json.loads(out.stdout)["files"][0]["diagnostics"]
    assert diag["code"] == EXPECTED_CODE[name], diag
    assert diag["line"] >= 1 and diag["message"]
