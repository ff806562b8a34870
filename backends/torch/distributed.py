"""Several processes on one one-shot run, over ``torch.distributed``
(:mod:`recipe_spec.oneshot.distributed` says what is shared and when).

:func:`collective` is the run's :class:`TorchCollective` when ``torch.distributed`` is
initialised with more than one process, or when the process was started by ``torchrun`` (its
``WORLD_SIZE`` above 1 and ``MASTER_ADDR`` set; the process group is then initialised here,
``nccl`` where CUDA is available, else ``gloo``); None for one process.
:func:`share_module` sends one module's parameters and persistent buffers from the process that
computed them to the others. Tensors inside objects (:meth:`TorchCollective.gather`,
``send_object``, ``broadcast_object``) travel through host memory and arrive on this process's
device (its GPU under ``nccl``).
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["TorchCollective", "collective", "share_module"]


class TorchCollective:
    """:class:`recipe_spec.oneshot.distributed.Collective` over ``torch.distributed``."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.rank = int(dist.get_rank())
        self.world = int(dist.get_world_size())

    def sum(self, array: torch.Tensor) -> torch.Tensor:
        total = array.detach().clone().contiguous()
        self._dist.all_reduce(total, op=self._dist.ReduceOp.SUM)
        return total

    def sum_int(self, value: int) -> int:
        total = torch.tensor([int(value)], dtype=torch.int64, device=_device())
        self._dist.all_reduce(total, op=self._dist.ReduceOp.SUM)
        return int(total.item())

    def gather(self, value: Any) -> list[Any]:
        out: list[Any] = [None] * self.world
        self._dist.all_gather_object(out, _on(value, torch.device("cpu")))
        return [_on(v, _device()) for v in out]

    def barrier(self) -> None:
        self._dist.barrier()

    def send(self, array: torch.Tensor, dst: int) -> None:
        self._dist.send(array.detach().contiguous(), dst=dst)

    def receive(self, like: torch.Tensor, src: int) -> torch.Tensor:
        out = torch.empty_like(like, memory_format=torch.contiguous_format)
        self._dist.recv(out, src=src)
        return out

    def broadcast(self, array: torch.Tensor, src: int) -> torch.Tensor:
        out = array.detach().clone().contiguous()
        self._dist.broadcast(out, src=src)
        return out

    def send_object(self, value: Any, dst: int) -> None:
        self._dist.send_object_list([_on(value, torch.device("cpu"))], dst=dst, device=_device())

    def receive_object(self, src: int) -> Any:
        out: list[Any] = [None]
        self._dist.recv_object_list(out, src=src, device=_device())
        return _on(out[0], _device())

    def broadcast_object(self, value: Any, src: int) -> Any:
        out = [_on(value, torch.device("cpu"))]
        self._dist.broadcast_object_list(out, src=src, device=_device())
        return _on(out[0], _device())


def _on(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor inside it (lists, tuples, dicts) moved to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_on(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _on(v, device) for k, v in value.items()}
    return value


def _device() -> torch.device:
    import torch.distributed as dist

    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def collective() -> TorchCollective | None:
    """The run's processes (see the module docstring), None for one."""
    import torch.distributed as dist

    if not dist.is_available():
        return None
    if not dist.is_initialized():
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or "MASTER_ADDR" not in os.environ:
            return None
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    if dist.get_world_size() < 2:
        return None
    return TorchCollective()


def share_module(module: torch.nn.Module, src: int) -> None:
    """Every parameter and persistent buffer of ``module`` itself (not its children) sent
    from process ``src`` to the others, in place."""
    import torch.distributed as dist

    tensors = [p for p in module._parameters.values() if p is not None]
    tensors += [b for k, b in module._buffers.items() if b is not None and k not in module._non_persistent_buffers_set]
    for t in tensors:
        data = t.data
        buffer = data if data.is_contiguous() else data.contiguous()
        # gloo has no float8 (FP8 zero points): its bytes travel as uint8
        wire = buffer.view(torch.uint8) if buffer.element_size() == 1 and buffer.is_floating_point() else buffer
        dist.broadcast(wire, src=src)
        if buffer is not data:
            data.copy_(buffer)
