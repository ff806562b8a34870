"""Where a module's solve runs (:class:`Solver`): on the host's own arrays (``host.ops``), or,
where a host says so (``host.solver``), on another library's arrays and device. The Keras host
gathers its statistics in NumPy but solves SparseGPT, GPTQ and Wanda on Keras's tensors where
Keras runs on an accelerator: the weight and the statistic go over once per module, the
thousands of column steps run where the model does, and the solved weight comes back.

>>> from recipe_spec.masks.numpy_ops import NUMPY_OPS
>>> class Host:
...     ops = NUMPY_OPS
>>> s = solver_of(Host())
>>> s.ops is NUMPY_OPS, s.put(3) == 3, s.get(None) is None
(True, True, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Solver", "solver_of"]


def _same(x: Any) -> Any:
    return x


@dataclass(frozen=True)
class Solver:
    """The array operations a solve runs on (``ops``), and how an array goes from the host's
    arrays to them (``put``) and back (``get``). ``put``/``get`` pass None through."""

    ops: Any
    to_solver: Callable[[Any], Any] = _same
    to_host: Callable[[Any], Any] = _same

    def put(self, x: Any) -> Any:
        """``x`` (a host array, or None) as the solver's array."""
        return None if x is None else self.to_solver(x)

    def get(self, x: Any) -> Any:
        """``x`` (a solver's array, or None) as the host's array."""
        return None if x is None else self.to_host(x)


def solver_of(host: Any) -> Solver:
    """``host.solver`` where the host has one (not None), else the host's own ``ops`` with no
    conversion."""
    made = getattr(host, "solver", None)
    return made if made is not None else Solver(host.ops)
