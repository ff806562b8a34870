"""A one-shot run that fails leaves the model as it was.

Every check that does not need the compression runs before the first module is touched
(:mod:`.preflight`). What can only fail during the run (a Hessian that stays singular, a
Ctrl-C, a disk that fills while the folder is written) is undone by :class:`Journal`: it
stands for the host while the pipeline runs, keeps a copy of each module's own parameters
before their first change (``host.keep(name)``), and on :meth:`Journal.restore` writes them
back (``host.put_back``) and removes what attaching quantization added to the model
(``host.shell()`` taken before, ``host.restore_shell``), which also puts back experts a REAP
run removed (each module kept is recorded under its name before the experts were numbered anew).

The copies cost the memory of the modules changed (held where the host keeps them: host
memory on PyTorch); ``oneshot(..., restore_on_error=False)`` runs without them. A host
without ``keep`` cannot be restored: its run is not journalled.

>>> class Host:
...     def __init__(self): self.w = {"a": 1.0}
...     def keep(self, name): return self.w[name]
...     def put_back(self, name, kept): self.w[name] = kept
...     def set_weight(self, name, value): self.w[name] = value
>>> host = Host(); journal = Journal(host)
>>> journal.set_weight("a", 0.0); journal.set_weight("a", 2.0); host.w["a"]
2.0
>>> journal.restore(); host.w["a"]
1.0
"""

from __future__ import annotations

from typing import Any

__all__ = ["Journal", "journalled"]


class Journal:
    """``host`` with every module it writes kept first (see the module docstring)."""

    def __init__(self, host: Any) -> None:
        self._host = host
        self._kept: list[tuple[str, Any]] = []
        self._seen: set[str] = set()
        self._renames: list[tuple[str, list[int]]] = []
        shell = getattr(host, "shell", None)
        self._shell = shell() if callable(shell) else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    def _keep(self, name: str) -> None:
        first = self._first_name(name)
        if first not in self._seen:
            self._seen.add(first)
            self._kept.append((first, self._host.keep(name)))

    def _first_name(self, name: str) -> str:
        """``name`` as the module was called before any experts were removed (REAP numbers the
        experts kept anew: ``experts.5`` after dropping expert 3 of 8 was ``experts.6``)."""
        for prefix, kept in reversed(self._renames):
            if name.startswith(prefix):
                index, _, rest = name[len(prefix):].partition(".")
                if index.isdigit() and int(index) < len(kept):
                    name = f"{prefix}{kept[int(index)]}" + (f".{rest}" if rest else "")
        return name

    def set_weight(self, name: str, value: Any) -> None:
        self._keep(name)
        self._host.set_weight(name, value)

    def set_bias(self, name: str, value: Any) -> None:
        self._keep(name)
        self._host.set_bias(name, value)

    def set_quantized(self, name: str, weight: Any, qparams: Any) -> None:
        self._keep(name)
        self._host.set_quantized(name, weight, qparams)

    def share(self, name: str, src: int) -> None:
        self._keep(name)
        self._host.share(name, src)

    def apply_rotations(self, rotation: Any) -> None:
        # a rotation changes the embeddings, norms and layers it fuses into: every module kept
        for info in self._host.modules():
            self._keep(info.name)
        self._host.apply_rotations(rotation)

    def prune_experts(self, layer: Any, kept: Any) -> None:
        # the experts' modules go and those kept are numbered anew: the shell puts the old ones
        # back, and every name kept from now on is recorded under its number before
        if self._shell is None:
            raise RuntimeError("this host cannot undo removing experts: run with restore_on_error=False")
        self._renames.append((f"{layer.experts}.", [int(k) for k in kept]))
        self._host.prune_experts(layer, kept)

    def save(self, output_dir: str, recipe_text: str) -> Any:
        # saving may change every quantized module (compressed-tensors packs them)
        for name in getattr(self._host, "quantized_now", lambda: [])():
            self._keep(name)
        return self._host.save(output_dir, recipe_text)

    def restore(self) -> None:
        """Put the model back as it was when the journal began (last change undone first)."""
        restore_shell = getattr(self._host, "restore_shell", None)
        if self._shell is not None and callable(restore_shell):
            restore_shell(self._shell)
        for name, kept in reversed(self._kept):
            self._host.put_back(name, kept)
        self._kept.clear()
        self._seen.clear()
        self._renames.clear()


def journalled(host: Any, enabled: bool = True) -> Any:
    """A :class:`Journal` over ``host``, or ``host`` itself when ``enabled`` is False or the host
    cannot keep a module."""
    return Journal(host) if enabled and callable(getattr(host, "keep", None)) else host
