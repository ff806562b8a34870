"""What SparseGPT and Wanda share: the reading of a recipe entry (the sparsity: one value, one
per target match, or the OWL profile, :func:`~recipe_spec.oneshot.owl.profile.read_sparsity`;
the N:M ``mask_structure``, targets and ignore, SparseGPT's block size and dampening; each
argument's default is the catalogue's, :mod:`recipe_spec.oneshot.settings`), and a solve that
prunes one module from its statistic and writes it back (:class:`PruningAlgorithm`)."""

from __future__ import annotations

import re
from typing import Any

from ...diagnostics.base import Diagnostic
from ...recipe.model import Modifier, Recipe
from ..algorithm import Algorithm, OneShotModifier, Prepared, Solved
from ..owl.profile import read_sparsity
from ..settings import b001, refuse_unrun, strings, value
from .obs import PruneResult, SolverError
from .solver import Solver, solver_of

__all__ = ["read_pruning", "nm", "PruningAlgorithm"]

_NM = re.compile(r"^([0-9]+):([0-9]+)$")


def nm(structure: Any) -> tuple[int, int] | None:
    """``(N, M)`` of an ``'N:M'`` mask structure (``(0, 0)`` for ``'0:0'``); None otherwise."""
    match = _NM.match(str(structure))
    if match is None:
        return None
    n, size = int(match.group(1)), int(match.group(2))
    return (n, size if n else 0)


def read_pruning(kind: str, recipe: Recipe, m: Modifier, errors: list[Diagnostic]) -> list[OneShotModifier]:
    """Entry ``m`` as algorithm ``kind`` (``sparsegpt`` or ``wanda``) runs it, with a located
    error in ``errors`` for each argument the run does not honour (the entry is still read, for
    the checks against a model); [] when its sparsity cannot be read."""
    refuse_unrun(recipe, m, errors)
    read = read_sparsity(m.args)
    if read is None:
        errors.append(b001(recipe, m, f"{m.type} with sparsity {m.args.get('sparsity')!r}: "
                           "recipe_spec.oneshot runs a number or a list of numbers",
                           "Write one number (sparsity: 0.5) or one per target match.", "sparsity"))
        return []
    sparsity, listed, owl = read
    n, size = nm(value(m, "mask_structure")) or (0, 0)
    return [OneShotModifier(
        m.type, kind, m, strings(value(m, "targets")), strings(value(m, "ignore")), sparsity, n, size,
        block_size=int(value(m, "block_size") or 0), dampening_frac=float(value(m, "dampening_frac") or 0.0),
        preserve_mask=bool(value(m, "preserve_sparsity_mask")), sparsities=listed, owl=owl)]


class PruningAlgorithm(Algorithm):
    """An algorithm that prunes each target from a statistic of its inputs (SparseGPT, Wanda):
    it reads its entry with :func:`read_pruning`, calibrates on data, and its solve is
    :meth:`prune` with the module's sparsity (a list's or OWL's value for it), the weight
    written back."""

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        return read_pruning(self.name, recipe, m, errors)

    def needs_data(self, mod: OneShotModifier) -> bool:
        return True

    def prune(self, solver: Solver, weight: Any, stats: Any, mod: OneShotModifier, sparsity: float,
              prepared: Any = None) -> PruneResult:
        """The pruned weight of one module (``weight``: ``solver``'s array) from its statistic
        ``stats`` (the host's arrays: ``solver.put`` brings them over; ``prepared``: what
        :meth:`prepare` made of it, None when nothing was)."""
        raise NotImplementedError

    def solve(self, host: Any, mod: OneShotModifier, name: str, stats: Any, group: Any,
              prepared: Prepared | None = None) -> Solved:
        solver = solver_of(host)
        try:
            made = prepared() if prepared is not None else None
            result = self.prune(solver, solver.put(host.weight(name)), stats, mod, mod.levels.get(name, mod.sparsity),
                                made)
        except (SolverError, ValueError) as exc:
            raise type(exc)(f"{mod.type} ({mod.where}) on {name}: {exc}; no later layer was "
                            "compressed") from None
        weight = solver.get(result.weight)
        host.set_weight(name, weight)
        return Solved(weight, result.loss, result.report or "")
