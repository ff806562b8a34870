"""The pruner of an ``MFACPruningModifier`` (``scores="mfac"``) or ``OBSPruningModifier``
(``scores="obs"``): its arguments read, checked against the model and the host before training
(M012 and the memory checks, :mod:`.checks`), and the steps its gradient window covers."""

from __future__ import annotations

from ..base import PrunerContext
from .checks import second_order_findings
from .pruner import SecondOrderPruner
from .settings import settings_for

__all__ = ["build"]


def build(ctx: PrunerContext) -> SecondOrderPruner:
    """A second-order pruner, or findings in ``ctx.problems`` saying why it cannot run."""
    m, host = ctx.modifier, ctx.weights()
    shapes = ctx.shapes()
    sampler = ctx.grad_sampler is not None
    ctx.problems.extend(second_order_findings(
        m, ctx.index, ctx.plan, {n: shapes[n] for n in ctx.names}, sampler, ctx.oneshot,
        host.world_size(), host.itemsize(ctx.names), host.free_memory, ctx.step,
        host.gradients(ctx.names) is not None,
    ))
    s = settings_for(m)
    pruner = SecondOrderPruner(host, s, ctx.names, ctx.where, s.samples(sampler, ctx.oneshot), ctx.index)
    pruner.names_for = ctx.names_for
    steps = [] if ctx.oneshot else ctx.prune_steps()
    if steps:
        pruner.collect_start = ctx.step
        pruner.collect_from = max(ctx.step, steps[0] - s.grads_for(0.0) + 1)
        pruner.collect_until = steps[-1]
    return pruner
