"""Atomic file writes: every file recipe-spec writes (a generated recipe, a parameter manifest, a
schedule plot, a Keras checkpoint and its recipe state) appears whole or not at all.

The content goes to a temporary file in the target's own directory (same file system), is
flushed to disk, and then takes the target's name with :func:`os.replace`, which is atomic on
POSIX and Windows: a reader, or a run killed mid-write, sees the old file or the new one, never
half of one. A failed write removes its temporary file and leaves the old file as it was.
Recipes themselves are only ever read. A folder (a compressed model) is written the same way
with :func:`replacing_dir`: into a temporary folder beside it, which then takes its name.

>>> import tempfile, pathlib
>>> target = pathlib.Path(tempfile.mkdtemp()) / "recipe.yaml"
>>> write_text(target, "modifiers: []\\n")
>>> target.read_text()
'modifiers: []\\n'
>>> with replacing(target) as tmp:
...     _ = pathlib.Path(tmp).write_text("version: 1\\n")
>>> target.read_text(), sorted(p.name for p in target.parent.iterdir())
('version: 1\\n', ['recipe.yaml'])
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

__all__ = ["replacing", "replacing_dir", "write_text"]


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
    :func:`recipe_spec.output_folder.check_output_dir`.

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
