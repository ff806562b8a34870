"""Where the runtime puts its tensors, checked while it runs (for the device tests).

:class:`PlacementAudit` is a ``TorchFunctionMode`` that watches every torch call made while it
is active and records two kinds of mistake made by the project's own code (``recipe_spec`` and
``backends/``):

- *undeclared placement*: a factory (``torch.zeros``, ``torch.tensor``, ``torch.eye``, ...)
  called without ``device=``, so the tensor lands on the default device (the CPU) whatever
  device the model is on. On a machine without a GPU this is the mistake that would put a
  tensor on the CPU beside a CUDA model, so a CPU run shows it too;
- *implicit transfer*: one operation whose tensor arguments lie on different devices (torch
  accepts a 0-dim CPU tensor beside CUDA tensors, and a CPU index into a CUDA tensor, copying
  them silently). Explicit moves (``.to``, ``.cpu()``, ``.cuda()``, ``copy_``) are allowed.
  Only a run with tensors on two devices can show this one.

A call counts as the project's when the first frame outside torch that made it is in the
project's source (a ``torch.nn.Linear`` built by the runtime counts, one built by a test does
not).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

ROOT = Path(__file__).resolve().parent.parent
#: the project's source folders (a call made from here is the runtime's)
PROJECT = (str(ROOT / "recipe_spec") + "/", str(ROOT / "backends") + "/")
_TORCH = str(Path(torch.__file__).resolve().parent) + "/"

_FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.tensor, torch.arange, torch.eye,
              torch.rand, torch.randn, torch.randint, torch.randperm, torch.linspace, torch.as_tensor,
              torch.scalar_tensor}
_MOVES = {torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.copy_}


def _installed_roots() -> tuple[str, ...]:
    """The project's folders as imported (``pip install .`` on the GPU machine, or links to
    ``backends/``), besides the source tree."""
    roots = list(PROJECT)
    for name in ("recipe_spec", "recipe_spec_torch"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            folder = Path(spec.origin).parent
            roots += [str(folder) + "/", str(folder.resolve()) + "/"]  # a link (.shim/) and its target
    return tuple(dict.fromkeys(roots))


def _devices(args: tuple[Any, ...], kwargs: dict[str, Any]) -> set[torch.device] | None:
    """The devices of the tensors among ``args`` and ``kwargs`` (and in lists of them) when
    there are several, else None (kept cheap: it runs for every torch call)."""
    first: torch.device | None = None
    found: set[torch.device] | None = None
    for value in (*args, *kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if isinstance(item, torch.Tensor):
                if first is None:
                    first = item.device
                elif item.device != first:
                    found = (found or {first}) | {item.device}
    return found


class PlacementAudit(TorchFunctionMode):
    """Records undeclared placements and implicit transfers made by code under ``roots``."""

    def __init__(self, roots: tuple[str, ...] | None = None) -> None:
        super().__init__()
        self.roots = roots if roots is not None else _installed_roots()
        self.undeclared: list[str] = []
        self.mixed: list[str] = []

    def _caller(self) -> str | None:
        """``file:line`` of the first frame outside torch and this module, if it is the project's."""
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if not name.startswith(_TORCH) and name != __file__:
                if name.startswith(self.roots):
                    return f"{name.removeprefix(str(ROOT) + '/')}:{frame.f_lineno}"
                return None
            frame = frame.f_back  # type: ignore[assignment]
        return None

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _FACTORIES and kwargs.get("device") is None:
            if not (func is torch.as_tensor and args and isinstance(args[0], torch.Tensor)):
                where = self._caller()
                if where is not None:
                    self.undeclared.append(f"{where}: {func.__name__}() without device=")
        elif func not in _MOVES:
            devices = _devices(args, kwargs)
            if devices is not None:
                where = self._caller()
                if where is not None:
                    self.mixed.append(f"{where}: {getattr(func, '__name__', func)} on {sorted(map(str, devices))}")
        return func(*args, **kwargs)

    def problems(self) -> list[str]:
        return sorted(set(self.undeclared)) + sorted(set(self.mixed))


@contextmanager
def placement_checked() -> Iterator[PlacementAudit]:
    """Run the block under a :class:`PlacementAudit` and fail if the runtime placed a tensor
    without saying where or mixed devices in one operation."""
    audit = PlacementAudit()
    with audit:
        yield audit
    problems = audit.problems()
    assert not problems, "tensors placed without a device or moved implicitly:\n" + "\n".join(problems)
