"""Atomic file writes: every file recipe-spec writes (a generated recipe, a parameter manifest, a
schedule plot, a Keras checkpoint and its recipe state) appears whole or not at all.

The content goes to a temporary file in the target's own directory (same file system), is
flushed to disk, and then takes the target's name with :func:`os.replace`, which is atomic on
POSIX and Windows: a reader, or a run killed mid-write, sees the old file or the new one, never
half of one. A failed write removes its temporary file and leaves the old file as it was.
Recipes themselves are only ever read. A folder (a compressed model) is written the same way
with :func:`replacing_dir`: into a temporary folder beside it, which then takes its name.

**The output folder of a one-shot run** (``recipe_spec.oneshot(..., output_dir=...)``,
``ScheduledModifierManager.apply(model, calibration=..., output_dir=...)``, ``recipe-spec
oneshot --output``) follows one rule and one writer on every surface. The rule
(:func:`check_output_dir`, asked before the model is touched): the folder does not exist yet
(its parents are created), or is empty, or the caller asked to replace it
(``overwrite_output_dir=True``, ``--force``); then the *whole folder* is replaced, so no file of
what it held before (an old ``model.safetensors.index.json`` and its shards, a
``pytorch_model.bin``, a ``model.keras``, a note of yours) is left beside the new checkpoint for
a loader to read. A path that is a file, under a file, on a read-only file system or in a
folder this user may not write to is refused, naming the path and what to do. The writer
(:func:`writing`): everything (weights, config, ``recipe.yaml``, the tokenizer) goes into a
temporary folder beside the target, which takes the target's name only when all of it is on
disk (:func:`replacing_dir`); a failed write (a full disk) or an interrupted one (an error,
Ctrl-C, SIGTERM) leaves no temporary folder and the target as it was.

>>> import tempfile, pathlib
>>> target = pathlib.Path(tempfile.mkdtemp()) / "recipe.yaml"
>>> write_text(target, "modifiers: []\\n")
>>> target.read_text()
'modifiers: []\\n'
>>> with replacing(target) as tmp:
...     _ = pathlib.Path(tmp).write_text("version: 1\\n")
>>> target.read_text(), sorted(p.name for p in target.parent.iterdir())
('version: 1\\n', ['recipe.yaml'])
>>> out = target.parent / "model"
>>> with writing(out) as folder:
...     _ = pathlib.Path(folder, "config.json").write_text("{}")
>>> check_output_dir(out)
Traceback (most recent call last):
...
recipe_spec.atomic.OutputDirError: output_dir ...: the folder is not empty (config.json): pass overwrite_output_dir=True to replace the whole folder, or give a new or empty folder
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["replacing", "replacing_dir", "write_text", "OutputDirError", "check_output_dir", "writing",
           "Terminated", "sigterm_interrupts"]


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], suffix: str | None = None) -> Iterator[str]:
    """Yield a temporary path next to ``path`` for the caller to write; when the block ends
    without an error it replaces ``path`` (the permissions a new file gets from the umask). The
    temporary name keeps ``path``'s suffix (or ``suffix``), for writers that choose the format
    by the name (``savefig``, ``model.save``)."""
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    end = os.path.splitext(target)[1] if suffix is None else suffix
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=f".tmp{end}", dir=directory)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:  # on disk before the name changes
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def replacing_dir(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a new empty folder next to ``path`` for the caller to fill; when the block ends
    without an error it takes ``path``'s name (an existing folder there is moved aside first
    and removed after, so a reader sees the old folder or the new one, never a mix, and no file
    of the old folder survives beside the new ones). A failed or interrupted block (an error,
    ``KeyboardInterrupt``) removes the temporary folder and leaves ``path`` as it was, also
    when the last rename fails. A ``path`` that is a link to a folder: the folder it names is
    replaced and the link kept. What may be written there is checked by
    :func:`check_output_dir`.

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "model"
    >>> with replacing_dir(out) as tmp:
    ...     _ = (pathlib.Path(tmp) / "config.json").write_text("{}")
    >>> sorted(p.name for p in out.iterdir()), sorted(p.name for p in out.parent.iterdir())
    (['config.json'], ['model'])
    """
    import shutil

    target = os.path.realpath(os.fspath(path))
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=parent)
    old = None
    try:
        yield tmp
        for root, _dirs, files in os.walk(tmp):  # on disk before the name changes
            for name in files:
                with open(os.path.join(root, name), "rb+") as f:
                    os.fsync(f.fileno())
        os.chmod(tmp, 0o777 & ~_umask())
        if os.path.lexists(target):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", suffix=".old", dir=parent)
            os.replace(target, os.path.join(old, "previous"))
        os.replace(tmp, target)
        _fsync_dir(parent)
    finally:
        if old is not None:  # the new folder did not take the name: the old one takes it back
            previous = os.path.join(old, "previous")
            if os.path.lexists(previous) and not os.path.lexists(target):
                os.replace(previous, target)
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _fsync_dir(directory: str) -> None:
    """The renames in ``directory`` on disk (POSIX; nothing where a folder cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path`` atomically."""
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


_UMASK: list[int] = []


def _umask() -> int:
    if not _UMASK:  # read once: os.umask can only be read by setting it
        mask = os.umask(0o022)
        os.umask(mask)
        _UMASK.append(mask)
    return _UMASK[0]


# --------------------------------------------------------------------------- output folders

#: How the Python API names the folder and the way to replace it; the CLI passes its flags.
API_NAMES = ("output_dir", "pass overwrite_output_dir=True")


class OutputDirError(OSError):
    """An output folder that cannot be written, or may not be replaced; the message names the
    path and what to do."""


def check_output_dir(path: str | os.PathLike[str], overwrite: bool = False,
                     names: tuple[str, str] = API_NAMES, source: str | os.PathLike[str] | None = None) -> str:
    """The absolute path of the folder to write (links followed), or :class:`OutputDirError`
    when the rule of the module docstring ("The output folder") refuses it. Nothing is left
    behind: writability is tried by creating and removing a temporary folder in the target's
    parent (or the nearest folder that exists above it) and, when an existing folder is to be
    replaced, in it.
    ``names``: how messages name the folder and the way to replace it (``("--output",
    "add --force")`` on the command line). ``source``: the checkpoint folder the model is read
    from, which the folder may neither be nor hold (replacing it would delete the checkpoint)."""
    what, force = names
    shown = os.fspath(path)
    if not shown:
        raise OutputDirError(f"{what} is empty: give the path of a folder to write the model into")
    if "\0" in shown:
        raise OutputDirError(f"{what} {shown!r} holds a NUL character, which no file system takes in a path: "
                             "give the path of a folder to write the model into")
    target = os.path.realpath(shown)
    if source is not None and os.path.isdir(source):
        held = os.path.realpath(source)
        if os.path.commonpath([target, held]) == target:
            raise OutputDirError(f"{what} {shown} {'is' if held == target else 'holds'} the checkpoint folder the "
                                 f"model is read from ({os.fspath(source)}): writing there would delete it; give "
                                 "another folder")
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
    model was compressed) and yield the temporary folder to fill (the module docstring, "The
    output folder"). A write that fails with an ``OSError`` (a full disk) is an
    :class:`OutputDirError` saying that nothing was written."""
    target = check_output_dir(path, overwrite, names)
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
