"""What refuses a second-order modifier before training (M012), once the model, the steps per
epoch and the grad sampler are known: too few gradients before a pruning step, a missing
grad sampler, a mask type or block size the scores cannot use, and a gradient buffer plus
inverse that will not fit in memory. Each finding names the argument at fault."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from ...diagnostics import codes
from ...modifiers.second_order_args import SecondOrderSettings, arg_key
from ...recipe.findings import Finding
from .fisher import fisher_bytes
from .pruner import actual_sparsity
from .settings import settings_for, static_findings

if TYPE_CHECKING:
    from ...recipe.model import Modifier
    from ...schedule.plan import Plan

__all__ = ["second_order_findings", "memory_needed", "host_memory_available", "SAMPLER_HINT"]

SAMPLER_HINT = (
    "Pass grad_sampler={'data_loader_builder': build, 'loss_function': loss} to modify() or "
    "apply(): build(grad_sampler_kwargs) returns batches (args, kwargs, target), one gradient each."
)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


def host_memory_available() -> int | None:
    """Bytes of host memory a new allocation can get: Linux's ``MemAvailable`` (free memory
    plus the caches the kernel can drop), else the free physical pages; None if unknown."""
    import os

    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_needed(s: SecondOrderSettings, sizes: Sequence[int], itemsize: int) -> int:
    """Bytes a pruning step holds at most: the gradients (window or samples) and the inverse
    (M-FAC: one over all unpruned weights; OBS: one parameter's at a time, all samples kept)."""
    m, d = s.max_grads, sum(sizes)
    if s.kind == "mfac":
        return m * d * itemsize + fisher_bytes(m, d, s.block_size, itemsize)
    return m * d * itemsize + max(fisher_bytes(m, n, s.block_size, itemsize) for n in sizes)


def second_order_findings(
    m: Modifier, index: int, plan: Plan, shapes: Mapping[str, Sequence[int]], has_sampler: bool,
    oneshot: bool, world_size: int, itemsize: int, memory: Callable[[SecondOrderSettings], tuple[int, str] | None],
    first_step: int = 0, has_gradients: bool = False,
) -> Iterator[Finding]:
    """M012 findings about modifier ``m`` (number ``index`` of the recipe) on parameters of
    ``shapes``; ``memory(settings)``: the bytes free where the buffer and inverse will live."""
    s = settings_for(m)
    name = "M-FAC" if s.kind == "mfac" else "OBS"
    static = list(static_findings(m))
    yield from static
    if any(f.code is codes.M009 for f in static):
        return
    sampled = s.samples(has_sampler, oneshot)
    if oneshot and not sampled and not (has_gradients and s.grads_for(0.0) <= 1):
        yield Finding(codes.M012, f"M-FAC applied one-shot needs num_grads={s.grads_for(0.0)} gradients, but no grad sampler was "
                      "given" + (" (the parameters' current gradients count as one)" if has_gradients else ""),
                      SAMPLER_HINT, m)
    elif sampled and not has_sampler:
        why = "samples its gradients" if s.kind == "obs" else "has use_gradient_buffering: false"
        yield Finding(codes.M012, f"{m.type} {why}, but no grad sampler was given", SAMPLER_HINT, m)
    names = [n for n in shapes]
    sizes = [math.prod(shapes[n]) for n in names]
    if s.kind == "obs" and s.mask_type == "block4" and s.block_size % 4:
        yield Finding(codes.M012, f"fisher_block_size must be divisible by 4 for block4 pruning; got {s.block_size}",
                      "Use a multiple of 4 (each group of 4 weights is scored with its 4x4 inverse-Fisher block).",
                      m, arg_key(m, "fisher_block_size"))
    elif s.kind == "obs" and s.mask_type == "block4":
        for n in names:
            shape = shapes[n]
            if math.prod(shape) % s.block_size or len(shape) < 2 or shape[1] % 4:
                yield Finding(codes.M012, f"OBS block4 on '{n}' of shape {list(shape)} needs input channels (dimension 1) "
                              f"in groups of 4 and a size divisible by fisher_block_size {s.block_size}",
                              "Exclude the parameter, or choose a fisher_block_size that divides its size.",
                              m, arg_key(m, "fisher_block_size"))
    if sampled and world_size > 1:
        for count in {s.grads_for(t) for t in (0.0, 1.0)} | {s.max_grads}:
            if count % world_size:
                yield Finding(codes.M012, f"num_grads {count} cannot be split evenly over {world_size} processes",
                              f"Use a multiple of {world_size}: each process samples num_grads / {world_size} gradients.",
                              m, arg_key(m, "num_grads"))
                break
    if not sampled and not oneshot:
        yield from _enough_gradients(m, index, s, plan, sizes, first_step)
    try:
        free = memory(s)
    except (RuntimeError, ValueError, TypeError) as exc:  # the framework refuses a device name
        where = "available_devices" if s.devices else "grads_device"
        yield Finding(codes.M012, f"{where} {list(s.devices) if s.devices else repr(s.grads_device)} does not name a device: {exc}",
                      "Write 'cpu', 'cuda', 'cuda:N' or a CUDA index N (an integer, not quoted).",
                      m, arg_key(m, where))
        return
    need = memory_needed(s, sizes, itemsize)
    if free is not None and need > free[0]:
        yield Finding(codes.M012, f"{name} needs about {_gib(need)} for its gradients and inverse "
                      f"({s.max_grads} gradients of {sum(sizes):,} weights), but {free[1]} has {_gib(free[0])} free",
                      "Lower num_grads or fisher_block_size, prune fewer parameters with this modifier, or list a larger device in available_devices.",
                      m, arg_key(m, "num_grads"))


def _enough_gradients(m: Modifier, index: int, s: SecondOrderSettings, plan: Plan, sizes: Sequence[int],
                      first_step: int) -> Iterator[Finding]:
    """Training-time M-FAC: every pruning step needs ``num_grads`` gradients taken at or
    before it (steps ``first_step``..k give ``k + 1 - first_step``)."""
    steps = sorted({e.step: e.value for e in plan.iter_events(first_step)
                    if e.modifier == index and e.target == "sparsity"}.items())
    last = 0.0
    for step, target in steps:
        need = s.grads_for(last)
        have = step + 1 - first_step
        if need > have:
            epoch = step / plan.steps_per_epoch if plan.steps_per_epoch else step
            yield Finding(
                codes.M012,
                f"M-FAC needs num_grads={need} gradients at its pruning step {step} (epoch {epoch:g}), "
                f"but only {have} training steps come before it (including its own)",
                f"Lower num_grads to at most {have}, start pruning later, or pass "
                "grad_sampler={'data_loader_builder': ..., 'loss_function': ...} to sample them.",
                m, arg_key(m, "num_grads"),
            )
            return
        last = actual_sparsity(sizes, [float(target)] * len(sizes), True)
