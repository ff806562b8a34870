"""The clock of the tests that bound how long something takes (a hang guard, not a speed
target: those live in ``benchmarks/``): the CPU seconds this process and its finished child
processes have used, which other work on a shared machine does not inflate as it does wall
time."""

from __future__ import annotations

import resource


def cpu_time() -> float:
    """User and system CPU seconds of this process and of its children waited for so far.

    >>> start = cpu_time(); sum(range(10**5)) > 0 and cpu_time() - start < 5
    True
    """
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
