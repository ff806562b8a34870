"""The surfaces a case of the one-shot fuzz campaign runs through (``fuzz_oneshot_worker.py``):
``recipe_spec.oneshot``, ``ScheduledModifierManager.from_yaml(...).apply(model, calibration=...)``,
``recipe-spec oneshot`` through ``recipe_spec.cli.main`` (its calibration file in one of the three
formats it reads), and the fake surfaces the harness's own tests use (a refusal after a weight
changed, after a file was written, a hang, a worker stuck with SIGALRM blocked, a crash, a raw
error, a silent run)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

__all__ = ["call", "call_cli", "fake"]


# -- the real surfaces -----------------------------------------------------------------------------------------

def _recipe(case: dict[str, Any], folder: Path) -> Any:
    how = case["recipe_as"]
    if how in ("int", "dict"):
        return 5 if how == "int" else {"a": 1}
    if how == "path":
        path = folder / "recipe.yaml"
        path.write_text(case["recipe"])
        return path if case["id"] % 2 else str(path)
    return case["recipe"]


def call(case: dict[str, Any], side: Any, folder: Path, output: str | None) -> None:
    import recipe_spec

    model, data = case["_model"], side.dataset(case)
    kwargs = dict(case["args"])
    if output is not None:
        kwargs["output_dir"] = output
    recipe = _recipe(case, folder)
    if case["surface"] == "api":
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=data, **kwargs)
    else:
        manager = recipe_spec.ScheduledModifierManager.from_yaml(recipe)
        manager.apply(model, calibration=data, **kwargs)


def _calibration_file(case: dict[str, Any], folder: Path) -> Path:
    kind, samples = case["data"]["kind"], case["data"]["samples"]
    fmt = ("list", "samples", "jsonl")[case["id"] % 3]
    ids = [s["input_ids"] for s in samples]
    path = folder / ("calib.jsonl" if fmt == "jsonl" and kind == "list" else "calib.json")
    if kind == "list-of-lists":
        body: Any = ids
    elif kind == "strings":
        body = ["hello world"] * len(ids)
    elif kind == "one-dict":
        body = {"input_ids": ids[0]}
    elif kind == "no-samples":
        body = []
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps({"input_ids": i}) + "\n" for i in ids))
        return path
    else:
        rows = [{"input_ids": i} for i in ids] if case["id"] % 2 else ids
        body = {"samples": rows} if fmt == "samples" else rows
    path.write_text(json.dumps(body))
    return path


def call_cli(case: dict[str, Any], checkpoint: Path, folder: Path, output: str | None) -> tuple[int, str, Any]:
    """Exit code, stderr and the exception that left ``apply_oneshot`` (None if none did)."""
    from recipe_spec.cli import main
    from recipe_spec.oneshot import api as api

    recipe = folder / "recipe.yaml"
    recipe.write_text(case["recipe"] or "")
    a = case["args"]
    argv = ["oneshot", str(recipe), "--model", str(checkpoint), "--calibration", str(_calibration_file(case, folder)),
            "--num-samples", str(a.get("num_calibration_samples", 4)), "--batch-size", str(a.get("batch_size", 1))]
    for key, flag in (("pipeline", "--pipeline"), ("compat", "--compat")):
        if key in a:
            argv += [flag, str(a[key])]
    if "sequential_targets" in a:
        argv += ["--sequential-targets", *map(str, a["sequential_targets"])]
    for name, value in (a.get("recipe_args") or {}).items():
        argv += ["--var", f"{name}={value}"]
    if a.get("shuffle_calibration_samples"):
        argv.append("--shuffle")
    if output is not None:
        argv += ["--output", output] + (["--force"] if a.get("overwrite_output_dir") is True else [])
    seen: list[BaseException] = []
    real = api.apply_oneshot

    def watched(*args: Any, **kwargs: Any) -> Any:
        try:
            return real(*args, **kwargs)
        except Exception as exc:
            seen.append(exc)
            raise
    err = io.StringIO()
    api.apply_oneshot = watched
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    finally:
        api.apply_oneshot = real
    return code, err.getvalue(), seen[-1] if seen else None


# -- fake surfaces: the harness's own tests ----------------------------------------------------------------

def _fake_refuse_after_change(case: dict[str, Any], side: Any, output: str | None) -> None:
    side.poke(case["_model"])
    raise ValueError("refused, but only after a weight changed")


def _fake_refuse_after_write(case: dict[str, Any], side: Any, output: str | None) -> None:
    assert output
    os.makedirs(output, exist_ok=True)
    Path(output, "model.safetensors").write_bytes(b"half")
    raise ValueError("refused, but only after writing")


def fake(case: dict[str, Any], side: Any, output: str | None) -> None:
    kind = case["surface"][len("fake-"):]
    if kind == "half":
        _fake_refuse_after_change(case, side, output)
    elif kind == "halfwrite":
        _fake_refuse_after_write(case, side, output)
    elif kind == "hang":
        time.sleep(3600)
    elif kind == "stuck":  # SIGALRM blocked: only the parent's watchdog ends it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(3600)
    elif kind == "crash":
        os._exit(3)
    elif kind == "raw":
        import numpy as np

        np.zeros(3)[5]  # noqa: B018 - an IndexError from numpy
    elif kind == "refuse":
        _fake_refuse(case)
    # "silent", "ok": return at once


def _fake_refuse(case: dict[str, Any]) -> None:
    raise ValueError("a clear refusal")
