"""Second-order pruning (M-FAC, OBS) on PyTorch: the tensors, gradients, grad sampler and
devices that :mod:`recipe_spec.pruning.second_order` works with. The maths lives there, once.

>>> import torch
>>> g = torch.randn(8, 10, dtype=torch.float64)
>>> f = fisher_inverse(g, damp=1e-2, block_size=4)
>>> f.diag().shape, f.mul(torch.ones(10, dtype=torch.float64)).shape
(torch.Size([10]), torch.Size([10]))
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from recipe_spec.modifiers.second_order_args import SecondOrderSettings
from recipe_spec.pruning.second_order.checks import host_memory_available
from recipe_spec.pruning.second_order.fisher import FisherInverse
from recipe_spec.pruning.second_order.sampler import batches, sampler_parts

from .masks import TORCH_OPS

if TYPE_CHECKING:
    from recipe_spec.runtime import RecipeRuntime

__all__ = ["fisher_inverse", "GradSampler", "TorchHost", "resolve_device"]


def fisher_inverse(grads: torch.Tensor, damp: float, block_size: int | None = None,
                   devices: Sequence[str | torch.device] | None = None) -> FisherInverse:
    """The inverse empirical Fisher ``(damp·I + (1/m) Σ g gᵀ)⁻¹`` of the ``m x d`` gradients
    ``grads``, block diagonal with blocks of ``block_size`` consecutive coordinates (``None``:
    one block). ``.diag()`` and ``.mul(v)`` give its diagonal and ``F⁻¹v`` (see
    :class:`recipe_spec.pruning.second_order.fisher.FisherInverse`). ``grads`` is not modified."""
    return FisherInverse(TORCH_OPS, grads.detach(), damp, block_size, devices)


def resolve_device(name: Any) -> torch.device:
    """A device of ``available_devices``/``grads_device``: ``"cuda:1"``, ``1`` (CUDA index),
    ``"cpu"``; a CUDA device on a machine without CUDA is the CPU."""
    text = f"cuda:{name}" if isinstance(name, int) and not isinstance(name, bool) else str(name)
    device = torch.device(text)
    if device.type == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu")
    return device


class GradSampler:
    """SparseML's ``{"data_loader_builder": f, "loss_function": loss}``: ``f(kwargs)`` returns
    an iterable of ``(forward_args, forward_kwargs, loss_target)`` (or a callable returning
    one, called again for each pass); one forward and backward per item is one gradient.
    Sampling runs in ``eval()`` mode and ends with ``zero_grad()``, as SparseML's did."""

    def __init__(self, spec: Mapping[str, Any]):
        self.builder, self.loss = sampler_parts(spec)

    def gradients(self, model: torch.nn.Module, params: Sequence[torch.nn.Parameter], kwargs: Any) -> Iterator[list[torch.Tensor]]:
        was_training = model.training
        model.eval()
        try:
            for args, kw, target in batches(self.builder, kwargs):
                model.zero_grad()
                out = model(*args, **kw)
                if isinstance(out, (tuple, list)):
                    out = out[0]
                self.loss(out, target).backward()
                yield [p.grad.detach() if p.grad is not None else torch.zeros_like(p) for p in params]
        finally:
            model.zero_grad()
            model.train(was_training)


class TorchHost:
    """:class:`recipe_spec.pruning.second_order.pruner.Host` on a :class:`~recipe_spec_torch.manager.TorchManager`."""

    ops = TORCH_OPS

    def __init__(self, manager: RecipeRuntime, grad_sampler: Any):
        self.manager = manager
        self.sampler = GradSampler(grad_sampler) if grad_sampler is not None else None

    def _param(self, name: str) -> torch.nn.Parameter:
        return self.manager._params[name][1]

    def read(self, names: Sequence[str]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        weights, masks = [], []
        for n in names:
            p = self._param(n).detach()
            entry = self.manager.masks.params.get(n)
            weights.append(p)
            masks.append(entry.mask if entry is not None else torch.ones_like(p, dtype=torch.bool))
        return weights, masks

    @torch.no_grad()
    def write(self, names: Sequence[str], weights: Sequence[torch.Tensor], masks: Sequence[torch.Tensor], owner: int) -> None:
        for n, w, m in zip(names, weights, masks, strict=True):
            entry = self.manager._hold(n, owner, False)
            entry.set_mask(m)
            entry.param.copy_(w)
            entry.enforce()

    def has(self, name: str) -> bool:
        return name in self.manager._params

    def gradients(self, names: Sequence[str]) -> list[torch.Tensor] | None:
        grads = [self._param(n).grad for n in names]
        if any(g is None for g in grads):
            return None
        return [g.detach() for g in grads if g is not None]

    def sample(self, names: Sequence[str], count: int, kwargs: Any) -> Iterator[list[torch.Tensor]]:
        assert self.sampler is not None
        model = self.manager.model
        yield from self.sampler.gradients(model, [self._param(n) for n in names], kwargs)

    def devices(self, settings: SecondOrderSettings) -> list[torch.device] | None:
        if settings.devices is None:
            return [torch.device("cuda:0")] if torch.cuda.is_available() else None
        if not settings.devices:
            return None
        return list(dict.fromkeys(resolve_device(d) for d in settings.devices))

    def buffer_like(self, settings: SecondOrderSettings, weights: Sequence[torch.Tensor]) -> torch.Tensor:
        dtype = weights[0].dtype if weights and weights[0].dtype in (torch.float32, torch.float64) else torch.float32
        return torch.zeros((), dtype=dtype, device=resolve_device(settings.grads_device))

    def itemsize(self, names: Sequence[str]) -> int:
        p = self._param(names[0]) if names else None
        return 8 if p is not None and p.dtype == torch.float64 else 4

    def free_memory(self, settings: SecondOrderSettings) -> tuple[int, str] | None:
        devices = self.devices(settings) or [resolve_device(settings.grads_device)]
        device = devices[0]
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            return int(free), str(device)
        free = host_memory_available()
        return None if free is None else (free, "the CPU's memory")

    def world_size(self) -> int:
        dist = torch.distributed
        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1

    def gather_rows(self, rows: torch.Tensor) -> torch.Tensor:
        world = self.world_size()
        if world == 1:
            return rows
        dist = torch.distributed
        send = rows.contiguous()
        if send.device.type == "cpu" and dist.get_backend() == dist.Backend.NCCL:
            # NCCL gathers CUDA tensors only; the rows live on grads_device (the CPU by default)
            send = send.to(torch.device("cuda", torch.cuda.current_device()))
        parts = [torch.empty_like(send) for _ in range(world)]
        dist.all_gather(parts, send)
        return torch.cat(parts, 0).to(rows.device)
