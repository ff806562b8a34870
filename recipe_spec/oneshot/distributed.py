"""One one-shot run over several processes (``torchrun --nproc-per-node N script.py``, each
process calling the same ``oneshot(...)``), as llm-compressor 0.14 runs it:

- the calibration batches are shared out (:func:`own_batches`): when every process was given
  the same data, process ``r`` of ``n`` feeds batches ``floor(B·r/n)`` to ``floor(B·(r+1)/n)``
  of the ``B`` the one-process run would feed (llm-compressor's ``_get_partition_start_end``),
  so each runs about ``1/n`` of the forward calls and together they feed the same batches;
  when each was given its own part (llm-compressor's scripts load ``get_rank_partition``'s
  split in each process), each feeds its own;
- at each block's end every process gets the statistic of every batch: joined over the
  processes (:func:`combine`: each statistic's ``combine``; SparseGPT's Hessians, Wanda's row
  scalars and OWL's activation norms summed, SmoothQuant's channel ranges and static
  ``static_minmax`` input ranges by their extremes), or relayed (:func:`receive_partial` before a process's calibration pass, its
  running sums continued from the process before it, and :func:`pass_on` after it), so that
  the sum runs in one process's order and gives its bits (GPTQ's Hessians, by default:
  ``distributed_statistics``, :data:`HOW`, :func:`relayed`; GPTQ's Hessians, AWQ's activation
  means and static input ranges by default);
- each module's solve runs on one process (:func:`assign`: compressed-tensors'
  ``greedy_bin_packing``, weighted by the module's input columns, heaviest first, each to the
  least-loaded process) and its results (weight, bias, quantization parameters) are sent to
  the others (the host's ``share``), before the block runs again for the next one's inputs;
- a smoothing transform's scales are computed in every process from the joined statistics
  (the same scales everywhere, nothing sent); AWQ's search runs each process's own recorded
  calls and adds every call's loss in the one process's order (:func:`in_order`);
- process 0 writes the output folder.

The result is the one-process run's (relayed: bit for bit; summed: up to the order of
floating-point sums). A statistic that cannot be joined is refused before any weight changes
(:func:`refuse_unshared`).

The backend supplies a :class:`Collective` (the host's ``collective()``; None for one process).

>>> share_out(list(range(10)), 0, 3), share_out(list(range(10)), 2, 3)
([0, 1, 2], [6, 7, 8, 9])
>>> assign(["a", "b", "c", "d"], [4096, 1024, 1024, 1024], 2)
{'a': 0, 'b': 1, 'c': 1, 'd': 1}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

__all__ = ["Collective", "share_out", "assign", "combine", "relayed", "receive_partial", "pass_on",
           "refuse_unshared", "HOW", "check_distributed_statistics", "collective_of", "calibrate", "in_order",
           "joined_extremes", "added_in_order", "own_batches"]

#: ``oneshot(distributed_statistics=...)``: how the processes' statistics are joined.
HOW = ("auto", "relay", "sum")


def check_distributed_statistics(how: object) -> None:
    """A ValueError unless ``how`` is one of :data:`HOW`."""
    if how not in HOW:
        raise ValueError(f"distributed_statistics={how!r}: give 'auto' (GPTQ's statistics relayed in one process's "
                         "order, pruning's summed), 'relay' (every statistic relayed: the one-process result) or "
                         "'sum' (every statistic summed, llm-compressor's way: faster)")

T = TypeVar("T")


class Collective(Protocol):
    """The processes of a run, as a backend supplies them."""

    rank: int
    world: int

    def sum(self, array: Any) -> Any:
        """``array`` summed over the processes (every process gets the sum)."""

    def sum_int(self, value: int) -> int:
        """``value`` summed over the processes."""

    def gather(self, value: Any) -> list[Any]:
        """Every process's ``value`` (picklable), in rank order."""

    def barrier(self) -> None:
        """Wait until every process is here."""

    def send(self, array: Any, dst: int) -> None:
        """Send ``array`` to process ``dst`` (which :meth:`receive` s it)."""

    def receive(self, like: Any, src: int) -> Any:
        """An array of ``like``'s shape, dtype and device sent by process ``src``."""

    def broadcast(self, array: Any, src: int) -> Any:
        """Process ``src``'s ``array`` (every process passes one of the same shape)."""

    def send_object(self, value: Any, dst: int) -> None:
        """Send picklable ``value`` to process ``dst``."""

    def receive_object(self, src: int) -> Any:
        """The picklable value process ``src`` sent."""

    def broadcast_object(self, value: Any, src: int) -> Any:
        """Process ``src``'s picklable ``value``."""


def share_out(items: Sequence[T], rank: int, world: int) -> list[T]:
    """Process ``rank``'s share of ``items`` (see the module docstring)."""
    n = len(items)
    return list(items[math.floor(n * rank / world):math.floor(n * (rank + 1) / world)])


def own_batches(batches: Sequence[T], fingerprint: str, collective: Collective) -> list[T]:
    """This process's batches: its share (:func:`share_out`) when every process holds the same
    data (the same ``fingerprint``), else all of its own (the data was partitioned by the
    script, as llm-compressor's ``get_rank_partition`` does)."""
    prints = collective.gather(fingerprint)
    if all(p == prints[0] for p in prints):
        return share_out(batches, collective.rank, collective.world)
    return list(batches)


def assign(names: Sequence[str], weights: Sequence[int], world: int) -> dict[str, int]:
    """Which process solves each module: the heaviest first, each to the process with the
    least weight so far (the lowest rank on a tie)."""
    load = [0] * world
    out: dict[str, int] = {}
    for name, weight in sorted(zip(names, weights, strict=True), key=lambda nw: -nw[1]):
        rank = min(range(world), key=lambda r: load[r])
        out[name] = rank
        load[rank] += weight
    return out


def collective_of(host: Any) -> Collective | None:
    """The processes of ``host``'s run (its ``collective()``), None for one."""
    get = getattr(host, "collective", None)
    return get() if callable(get) else None


def combine(stats: dict[Any, Any], collective: Collective) -> None:
    """Every statistic of ``stats`` made the one of all processes' batches (in place)."""
    for key in sorted(stats, key=repr):  # the same order on every process
        stats[key].combine(collective)


def calibrate(stats: dict[Any, Any], collective: Collective | None, how: str, run: Callable[[], Any]) -> None:
    """One calibration pass (``run``) into ``stats``; over several processes, the statistics
    of every process's batches: relayed from process to process in the one process's order
    where ``how`` says so (:func:`relayed`), else joined (:func:`combine`)."""
    if collective is None:
        run()
    elif relayed(stats, how):
        receive_partial(stats, collective)
        run()
        pass_on(stats, collective)
    else:
        run()
        combine(stats, collective)


def in_order(values: list[Any], collective: Collective | None) -> list[Any]:
    """Every process's ``values`` (one per batch it ran), in the one process's batch order."""
    if collective is None:
        return values
    return [v for part in collective.gather(values) for v in part]


def added_in_order(value: Any, collective: Collective) -> Any:
    """Every process's ``value`` added in rank order (None where a process has none; None when
    none has one)."""
    total = None
    for part in collective.gather(value):
        if part is not None:
            total = part if total is None else total + part
    return total


def joined_extremes(low: Any, high: Any, ops: Any, collective: Collective) -> tuple[Any, Any]:
    """The elementwise minimum of every process's ``low`` and maximum of its ``high`` (None
    where a process saw nothing; None, None when none did)."""
    pairs = [(lo, hi) for lo, hi in collective.gather((low, high)) if lo is not None]
    if not pairs:
        return None, None
    low, high = pairs[0]
    for lo, hi in pairs[1:]:
        low, high = ops.minimum(low, lo), ops.maximum(high, hi)
    return low, high


def relayed(stats: dict[Any, Any], how: str = "auto") -> bool:
    """Whether the statistics of ``stats`` are relayed rather than summed (``how``: see
    :data:`HOW`): with ``"auto"``, when one of them asks for it (GPTQ's: its grid follows every
    bit of its Hessian, and a sum in another order than one process's changes grid values,
    then the next blocks' inputs)."""
    if how != "auto":
        return how == "relay"
    return any(getattr(s, "relayed", False) for s in stats.values())


def receive_partial(stats: dict[Any, Any], collective: Collective) -> None:
    """Before a process's calibration pass of a relayed block: its statistics continue from
    those of the processes before it (process ``r`` waits for ``r - 1``'s; process 0 starts
    from zero), so the sum runs in the one process's order."""
    if collective.rank == 0:
        return
    src = collective.rank - 1
    for key in sorted(stats, key=repr):
        arrays, _ = stats[key].state()
        got = [collective.receive(a, src) for a in arrays]
        stats[key].set_state(got, collective.receive_object(src))


def pass_on(stats: dict[Any, Any], collective: Collective) -> None:
    """After a process's calibration pass of a relayed block: its statistics go to the next
    process, and the last process's (every batch's, in the one process's order) to all."""
    keys = sorted(stats, key=repr)
    if collective.rank + 1 < collective.world:
        for key in keys:
            arrays, counts = stats[key].state()
            for a in arrays:
                collective.send(a, collective.rank + 1)
            collective.send_object(list(counts), collective.rank + 1)
    last = collective.world - 1
    for key in keys:
        arrays, counts = stats[key].state()
        got = [collective.broadcast(a, last) for a in arrays]
        stats[key].set_state(got, collective.broadcast_object(list(counts), last))


def refuse_unshared(mods: Sequence[Any], sample: dict[Any, Any]) -> None:
    """A ValueError naming the first modifier whose statistic (``sample``: one per modifier
    index, as the pipeline makes them) cannot be joined over processes (no ``combine``, or
    ``combinable`` false)."""
    for i, mod in enumerate(mods):
        if i in sample and sample[i] is not None and not (
                callable(getattr(sample[i], "combine", None)) and getattr(sample[i], "combinable", True)):
            raise ValueError(f"{mod.type} ({mod.where}) cannot run over several processes: its calibration "
                             f"statistic ({type(sample[i]).__name__}) is not joined over processes; run it in "
                             "one process (without torchrun)")
