"""What a person sees while a one-shot run works: the default ``progress=`` of
:func:`recipe_spec.oneshot` and the progress of ``recipe-spec oneshot``.

:class:`OneShotProgress` is a :data:`~.pipeline.Progress` callable. For each pass it writes
log lines in llm-compressor's manner, through :mod:`logging` (logger ``recipe_spec.oneshot``,
level INFO): the pass and its number of layers when it starts, then
``[k/n] model.layers.3 (1.25 s)`` after each unit. When the stream (stderr) is a terminal it also
draws a bar per pass: tqdm's when tqdm is installed, else one line rewritten with ``\\r``. A
program that has not configured :mod:`logging` would see no INFO line, so then (and without a
bar) the lines are written to the stream itself, so that a run never prints nothing for
minutes. ``oneshot(progress=False)`` silences it all; a callable of one's own replaces it.

>>> import io
>>> out = io.StringIO()
>>> p = OneShotProgress(out, bar=False, log=False)
>>> p("SparseGPTModifier (sequential)", 0, 2); p("model.layers.0", 1, 2); p("model.layers.1", 2, 2)
>>> print(out.getvalue().replace("\\r", "").strip())  # doctest: +ELLIPSIS
SparseGPTModifier (sequential): 2 layer(s)
  [1/2] model.layers.0 (... s)
  [2/2] model.layers.1 (... s)
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["OneShotProgress", "default_progress"]

_LOG = logging.getLogger("recipe_spec.oneshot")


def _shown(logger: logging.Logger) -> bool:
    """Whether an INFO record of ``logger`` reaches a handler (logging is configured for it)."""
    return logger.isEnabledFor(logging.INFO) and logger.hasHandlers()


class _LineBar:
    """A progress bar without tqdm: one line on a terminal, rewritten with ``\\r``."""

    def __init__(self, stream: TextIO, desc: str, total: int):
        self.stream, self.desc, self.total, self.n = stream, desc, total, 0
        self._draw("")

    def _draw(self, postfix: str) -> None:
        width = 20
        filled = width * self.n // self.total if self.total else width
        self.stream.write(f"\r{self.desc}: [{'#' * filled}{' ' * (width - filled)}] {self.n}/{self.total}"
                          f"{' ' + postfix if postfix else ''}\033[K")
        self.stream.flush()

    def update(self, postfix: str) -> None:
        self.n += 1
        self._draw(postfix)

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


class OneShotProgress:
    """A :data:`~.pipeline.Progress` for a person (see the module docstring).

    ``stream``: where the bar (and the lines, when :mod:`logging` would not show them) go,
    default ``sys.stderr``; ``bar``: draw a bar (default: when ``stream`` is a terminal);
    ``log``: write the lines through the ``recipe_spec.oneshot`` logger (INFO); without it, or
    when logging would show no INFO line, they are written to ``stream`` unless a bar is drawn.
    """

    def __init__(self, stream: TextIO | None = None, *, bar: bool | None = None, log: bool = True):
        self.stream = stream if stream is not None else sys.stderr
        if bar is None:
            isatty = getattr(self.stream, "isatty", None)
            bar = bool(isatty()) if callable(isatty) else False
        self.draw = bar
        self.log = log
        self._bar: Any = None
        self._since = time.monotonic()

    def _line(self, text: str) -> None:
        if self.log and _shown(_LOG):
            _LOG.info(text.strip())
        elif self._bar is None:
            print(text, file=self.stream, flush=True)

    def _open(self, what: str, total: int) -> None:
        if not self.draw:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            self._bar = _LineBar(self.stream, what, total)
            return
        self._bar = tqdm(total=total, desc=what, file=self.stream, unit="layer", leave=True)

    def __call__(self, what: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == 0:
            self.close()
            self._open(what, total)
            self._line(f"{what}: {total} layer(s)")
        else:
            if self._bar is not None:
                if hasattr(self._bar, "set_postfix_str"):  # tqdm
                    self._bar.set_postfix_str(what, refresh=False)
                    self._bar.update(1)
                else:
                    self._bar.update(what)
            self._line(f"  [{done}/{total}] {what} ({now - self._since:.2f} s)")
            if done >= total:
                self.close()
        self._since = now

    def close(self) -> None:
        """End the bar of the pass under way, if one is drawn."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def default_progress(progress: Any) -> Callable[[str, int, int], None] | None:
    """What ``oneshot(progress=...)`` reports to: None or True -> a new :class:`OneShotProgress`,
    False -> nothing (None), a callable -> itself; anything else is a TypeError."""
    if progress is None or progress is True:
        return OneShotProgress()
    if progress is False:
        return None
    if not callable(progress):
        raise TypeError(f"progress must be a callable progress(what, done, total), True, False or None, "
                        f"not {type(progress).__name__}")
    return progress
