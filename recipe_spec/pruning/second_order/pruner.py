"""One second-order modifier's pruning steps, driven by a backend runtime: where gradients
come from (the training steps' own, in a :class:`~.window.GradientWindow`, or a grad
sampler), when they are taken, and the steps of :mod:`.scoring`.

The runtime supplies a :class:`Host`: reading and writing the parameters in canonical layout,
the current gradients, sampled gradients, the devices, and, under data parallelism, the
gathering of sampled gradients across processes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from ...masks.ops import Array
from ...modifiers.second_order_args import SecondOrderSettings
from ..base import TargetPruner, WeightHost
from .fisher import FisherInverse
from .ops import FisherOps
from .scoring import StepResult, input_last, mfac_step, obs_step
from .window import GradientWindow

__all__ = ["Host", "SecondOrderPruner", "SecondOrderError", "actual_sparsity"]


class SecondOrderError(RuntimeError):
    """A second-order pruning step cannot run (the message says why and what to change)."""


class Host(WeightHost, Protocol):
    """What a backend runtime gives a :class:`SecondOrderPruner` (canonical layout): a
    :class:`~recipe_spec.pruning.base.WeightHost` with :class:`~.ops.FisherOps` as ``ops``, and
    what sampling and sizing the inverse Fisher take."""

    ops: FisherOps

    def sample(self, names: Sequence[str], count: int, kwargs: Any) -> Iterator[list[Array]]:
        """``count`` gradients from the grad sampler, one list per sample."""

    def devices(self, settings: SecondOrderSettings) -> list[Any] | None:
        """The devices the inverse is computed on (None: where the gradients are)."""

    def buffer_like(self, settings: SecondOrderSettings, weights: Sequence[Array]) -> Array:
        """An array of the dtype and device the gradient window is kept in."""

    def gather_rows(self, rows: Array) -> Array:
        """Sampled gradient rows of every process, stacked in rank order (one process: as is)."""

    def world_size(self) -> int:
        """Processes training together (1 without data parallelism)."""

    def itemsize(self, names: Sequence[str]) -> int:
        """Bytes per number of the gradients kept for these parameters."""

    def free_memory(self, settings: SecondOrderSettings) -> tuple[int, str] | None:
        """Bytes free where the gradients and the inverse will live, and that place's name
        (None: unknown)."""


class SecondOrderPruner(TargetPruner):
    """The pruning steps of one ``MFACPruningModifier`` or ``OBSPruningModifier``."""

    samples = True

    def __init__(self, host: Host, settings: SecondOrderSettings, names: Sequence[str], where: str,
                 sampled: bool, index: int = 0):
        self.host, self.settings, self.names, self.where = host, settings, list(names), where
        self.index = index
        self.sampled = sampled
        self.window: GradientWindow | None = None
        self.last_sparsity = 0.0  # the masks' sparsity after the previous step
        self.last_targets: list[float] | None = None  # the previous step's targets
        self.collect_from = 0  # the first step whose gradients can matter (training-time M-FAC)
        self.collect_until: int | None = None  # the last pruning step
        self.collect_start = 0  # the step the run (or the window) started at

    # -- training-time gradients ------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.settings.grads_for(self.last_sparsity)

    def collect(self, step: int) -> None:
        """Take the current gradients of optimizer step ``step`` into the window (before the
        optimizer step). Steps before the last ``num_grads`` of the first pruning step and
        after the last pruning step are skipped: their gradients are never used."""
        if self.sampled or step < self.collect_from or (self.collect_until is not None and step > self.collect_until):
            return
        grads = self.host.gradients(self.names)
        if grads is None:
            return
        ops = self.host.ops
        flat = ops.concat([ops.reshape(g, (-1,)) for g in grads], 0)
        if self.window is None:
            weights, masks = self.host.read(self.names)
            keep = ops.flat_nonzero(ops.concat([ops.reshape(m, (-1,)) for m in masks], 0))
            self.window = GradientWindow(ops, keep, self.capacity, self.host.buffer_like(self.settings, weights))
            self.window.next = (step - self.collect_start) % self.capacity  # the slot the step's own would be
        self.window.add(flat)

    # -- saving, resuming ----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What continuing exactly needs: the previous step's sparsity and targets, and the
        gradient window's rows as they lie in its slots (arrays of the backend)."""
        window = None
        if self.window is not None:
            rows = [r for r in self.window.slots if r is not None]
            window = {"capacity": self.window.capacity, "next": self.window.next, "count": self.window.count,
                      "rows": self.host.ops.stack(rows, 0) if rows else None}
        return {"last_sparsity": self.last_sparsity, "last_targets": self.last_targets, "window": window}

    def load(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state` (after the masks are restored)."""
        self.last_sparsity = float(state["last_sparsity"])
        self.last_targets = None if state["last_targets"] is None else [float(t) for t in state["last_targets"]]
        saved = state.get("window")
        self.window = None
        if saved is None:
            return
        ops = self.host.ops
        weights, masks = self.host.read(self.names)
        keep = ops.flat_nonzero(ops.concat([ops.reshape(m, (-1,)) for m in masks], 0))
        like = self.host.buffer_like(self.settings, weights)
        self.window = GradientWindow(ops, keep, int(saved["capacity"]), like)
        rows = saved["rows"]
        count = int(saved["count"])
        for i in range(count):
            self.window.slots[i] = ops.cast(rows[i], like)
        self.window.count, self.window.next = count, int(saved["next"])

    # -- pruning ------------------------------------------------------------------------------
    def prune(self, targets: Sequence[float]) -> StepResult:
        """Prune to ``targets`` (one per parameter) and correct the remaining weights."""
        return self._obs(targets) if self.settings.kind == "obs" else self._mfac(targets)

    def _mfac(self, targets: Sequence[float]) -> StepResult:
        ops, s = self.host.ops, self.settings
        weights, masks = self.host.read(self.names)
        flat_mask = ops.concat([ops.reshape(m, (-1,)) for m in masks], 0)
        keep = ops.flat_nonzero(flat_mask)
        if not math.prod(keep.shape):  # every weight is pruned already: nothing to rank or correct
            self.last_sparsity, self.last_targets = 1.0, [float(t) for t in targets]
            return StepResult(list(weights), list(masks), [], 1.0)
        m = self.capacity
        if self.sampled:
            grads = self._sampled_rows(m, weights, keep)
        else:
            have = self.window.count if self.window is not None else 0
            if have < m:
                raise SecondOrderError(
                    f"{self.where}: M-FAC pruning needs num_grads={m} gradients, but only {have} "
                    "training steps gave one since the start (a step whose parameters had no "
                    "gradient is skipped); lower num_grads, or start pruning later"
                )
            assert self.window is not None
            grads = self.window.matrix()
        result = mfac_step(ops, weights, masks, grads, keep, targets, s.damp, s.block_size,
                           s.mask_type, s.global_sparsity, self.host.devices(s))
        self.host.write(self.names, result.weights, result.masks, self.index)
        self.last_sparsity = result.sparsity
        self.last_targets = [float(t) for t in targets]
        if self.window is not None:
            new_flat = ops.concat([ops.reshape(x, (-1,)) for x in result.masks], 0)
            self.window.restrict(ops.take(new_flat, keep), self.capacity, ops.flat_nonzero(new_flat))
        return result

    def _sampled_rows(self, m: int, weights: Sequence[Array], keep: Array) -> Array:
        ops = self.host.ops
        like = self.host.buffer_like(self.settings, weights)
        per_rank = self._per_rank(m)
        rows = []
        for grads in self._draw(per_rank):
            flat = ops.concat([ops.reshape(g, (-1,)) for g in grads], 0)
            rows.append(ops.cast(ops.take(flat, keep), like))
        return self.host.gather_rows(ops.stack(rows, 0))

    def _per_rank(self, m: int) -> int:
        world = self.host.world_size()
        if m % world:
            raise SecondOrderError(
                f"{self.where}: num_grads={m} gradients are sampled in equal parts by the "
                f"{world} processes; use a multiple of {world}"
            )
        return m // world

    def _draw(self, count: int) -> Iterator[list[Array]]:
        got = 0
        for grads in self.host.sample(self.names, count, self.settings.grad_sampler_kwargs):
            got += 1
            yield grads
            if got == count:
                return
        raise SecondOrderError(
            f"{self.where}: the grad sampler's data loader ran out after {got} batches, but "
            f"{count} gradients are needed (num_grads); give it more batches (or a callable "
            "builder that is re-called), or lower num_grads"
        )

    def _obs(self, targets: Sequence[float]) -> StepResult:
        ops, s = self.host.ops, self.settings
        last = self.last_targets or [0.0] * len(targets)
        result: StepResult | None = None
        for i in range(1, s.num_recomputations + 1):
            step_targets = [a + (b - a) * i / s.num_recomputations for a, b in zip(last, targets, strict=True)]
            weights, masks = self.host.read(self.names)
            fishers = self._obs_fishers(weights, masks)
            result = obs_step(ops, weights, masks, fishers, step_targets, s.mask_type, s.global_sparsity)
            self.host.write(self.names, result.weights, result.masks, self.index)
        self.last_targets = [float(t) for t in targets]
        assert result is not None
        self.last_sparsity = result.sparsity
        return result

    def _obs_fishers(self, weights: Sequence[Array], masks: Sequence[Array]) -> list[FisherInverse]:
        """One inverse Fisher per parameter from ``num_grads`` masked sampled gradients."""
        ops, s = self.host.ops, self.settings
        block4 = s.mask_type == "block4"
        like = self.host.buffer_like(s, weights)
        flat_masks = [ops.reshape(input_last(ops, m) if block4 else m, (-1,)) for m in masks]
        rows: list[list[Array]] = [[] for _ in self.names]
        for grads in self._draw(self._per_rank(s.num_grads)):
            for j, (g, fm) in enumerate(zip(grads, flat_masks, strict=True)):
                flat = ops.reshape(input_last(ops, g) if block4 else g, (-1,))
                rows[j].append(ops.cast(ops.where(fm, flat, 0.0), like))
        devices = self.host.devices(s)
        return [FisherInverse(ops, self.host.gather_rows(ops.stack(r, 0)), s.damp, s.block_size, devices) for r in rows]


def actual_sparsity(counts: Sequence[int], targets: Sequence[float], global_sparsity: bool) -> float:
    """The mask sparsity unstructured pruning to ``targets`` gives (``round(n·s)`` zeros per
    parameter, or of all together when global)."""
    total = sum(counts)
    if not total:
        return 0.0
    if global_sparsity:
        return round(total * float(targets[0])) / total
    return sum(round(n * float(t)) for n, t in zip(counts, targets, strict=True)) / total

