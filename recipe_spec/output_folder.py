"""The folder a one-shot run writes its compressed model into: ``recipe_spec.oneshot(...,
output_dir=...)``, ``ScheduledModifierManager.apply(model, calibration=..., output_dir=...)``
and ``recipe-spec oneshot --output``. Every surface follows one rule and one writer.

**The rule** (:func:`check_output_dir`, asked before the model is touched): the folder does
not exist yet (its parents are created), or is empty, or the caller asked to replace it
(``overwrite_output_dir=True``, ``--force``); then the *whole folder* is replaced, so no file
of what it held before (an old ``model.safetensors.index.json`` and its shards, a
``pytorch_model.bin``, a ``model.keras``, a note of yours) is left beside the new checkpoint
for a loader to read. A path that is a file, under a file, on a read-only file system or in a
folder this user may not write to is refused, naming the path and what to do.

**The writer** (:func:`writing`): everything (weights, config, ``recipe.yaml``, the tokenizer)
is written into a temporary folder beside the target, which takes the target's name only when
all of it is on disk (:func:`recipe_spec.atomic.replacing_dir`). A failed write (a full disk)
or an interrupted one (an error, Ctrl-C, SIGTERM) leaves no temporary folder and the target
as it was.

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "model"
>>> with writing(out) as folder:
...     _ = (pathlib.Path(folder) / "config.json").write_text("{}")
>>> check_output_dir(out)
Traceback (most recent call last):
...
recipe_spec.output_folder.OutputDirError: output_dir ...: the folder is not empty (config.json): pass overwrite_output_dir=True to replace the whole folder, or give a new or empty folder
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["OutputDirError", "check_output_dir", "writing", "Terminated", "sigterm_interrupts"]

#: How the Python API names the folder and the way to replace it; the CLI passes its flags.
API_NAMES = ("output_dir", "pass overwrite_output_dir=True")


class OutputDirError(OSError):
    """An output folder that cannot be written, or may not be replaced; the message names the
    path and what to do."""


def check_output_dir(path: str | os.PathLike[str], overwrite: bool = False,
                     names: tuple[str, str] = API_NAMES) -> str:
    """The absolute path of the folder to write (links followed), or :class:`OutputDirError`
    when the rule of the module docstring refuses it. Nothing is left behind: writability is
    tried by creating and removing a temporary folder in the target's parent (or the nearest
    folder that exists above it) and, when an existing folder is to be replaced, in it.
    ``names``: how messages name the folder and the way to replace it (``("--output",
    "add --force")`` on the command line)."""
    what, force = names
    shown = os.fspath(path)
    if not shown:
        raise OutputDirError(f"{what} is empty: give the path of a folder to write the model into")
    target = os.path.realpath(shown)
    if os.path.lexists(target) and not os.path.isdir(target):
        raise OutputDirError(f"{what} {shown} exists and is not a folder: give the path of a folder to write the "
                             "model into (or remove the file)")
    if os.path.isdir(target):
        try:
            entries = sorted(os.listdir(target))
        except OSError as exc:
            raise OutputDirError(f"{what} {shown}: the folder cannot be read ({_reason(exc)})") from None
        if entries and not overwrite:
            held = ", ".join(entries[:4]) + (f", ... ({len(entries)} entries)" if len(entries) > 4 else "")
            raise OutputDirError(f"{what} {shown}: the folder is not empty ({held}): {force} to replace the whole "
                                 "folder, or give a new or empty folder")
        if os.path.ismount(target):
            raise OutputDirError(f"{what} {shown} is a mount point, which cannot be replaced: give a new folder "
                                 "inside it")
        if entries:  # its files are removed once the new folder takes its name
            _probe(target, what, shown)
    parent = os.path.dirname(target)
    existing = parent
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise OutputDirError(f"{what} {shown} cannot be created: {existing} is a file, not a folder")
    _probe(existing, what, shown)
    return target


def _probe(directory: str, what: str, shown: str) -> None:
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".recipe-spec-", suffix=".probe", dir=directory))
    except OSError as exc:
        raise OutputDirError(f"{what} {shown}: cannot write in {directory} ({_reason(exc)}): give a folder on a "
                             "writable file system that this user may write to") from None


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


@contextlib.contextmanager
def writing(path: str | os.PathLike[str], overwrite: bool = False,
            names: tuple[str, str] = API_NAMES) -> Iterator[str]:
    """Check ``path`` again (:func:`check_output_dir`: a file may have appeared in it while the
    model was compressed) and yield the temporary folder to fill; see the module docstring. A
    write that fails with an ``OSError`` (a full disk) is an :class:`OutputDirError` saying that
    nothing was written."""
    target = check_output_dir(path, overwrite, names)
    from .atomic import replacing_dir

    try:
        with _cleaning_up_on_sigterm(), replacing_dir(target) as folder:
            yield folder
    except OutputDirError:
        raise
    except OSError as exc:
        raise OutputDirError(f"{names[0]} {os.fspath(path)}: writing the model failed ({_reason(exc)}); nothing "
                             "was written and the folder is as it was (the compressed model is still in memory: "
                             "free some space and save it again)") from exc


@contextlib.contextmanager
def _cleaning_up_on_sigterm() -> Iterator[None]:
    """While a folder is written from Python with SIGTERM at its default (the process ends at
    once), SIGTERM removes the temporary folder first and then ends the process as the default
    would. A program with its own SIGTERM handler (the command line's
    :func:`sigterm_interrupts`) keeps it."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    try:
        with sigterm_interrupts():
            yield
    except Terminated:
        os.kill(os.getpid(), signal.SIGTERM)  # the default action, now that the handler is back
        raise


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM inside
    :func:`sigterm_interrupts`: the run unwinds as on Ctrl-C (a temporary folder is removed)
    and the command exits with :attr:`exit_code`."""

    exit_code = 128 + int(signal.SIGTERM)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """For the duration of the block, SIGTERM raises :class:`Terminated` (once: a second one
    while the first unwinds is ignored, so clean-up finishes); the previous handler is put
    back after. Outside the main thread (where handlers cannot be set) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised: list[bool] = []

    def handler(signum: int, frame: Any) -> None:
        if not raised:
            raised.append(True)
            raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
