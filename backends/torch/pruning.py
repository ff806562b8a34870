"""Masks on PyTorch parameters: bool buffers, enforced on gradients, on every forward pass and
after every optimizer step while a pruning modifier holds them.

Enforcement selects, it does not multiply: a pruned entry becomes exactly +0.0 even where the
weight or its gradient is NaN or infinite (NaN * 0 is NaN). Each entry keeps, next to the bool
mask, the same mask as *bits* (:func:`keep_bits`: an integer tensor of the weight's item size,
all ones where kept, 0 where pruned), so enforcing is one in-place ``bitwise_and_`` on the
weight's bits: exactly ``where(mask, w, +0.0)``, and on CPU several times faster than
``masked_fill_`` with a bool mask (``benchmarks/bench_torch_manager.py``). Weights of other
dtypes take ``masked_fill_``. Gradients are masked the same way, in place, by a hook that runs
once each backward pass has accumulated them (``register_post_accumulate_grad_hook``, before
DDP's reducer reads them), so accumulated micro-batches and gradient clipping see them masked.

All mutation of the model happens here: :class:`MaskSet` registers its hooks once, updates
masks in place, and removes every hook it added when it is released or the manager finalizes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from recipe_spec.pruning.magnitude import NonFiniteWeightsError, update_masks

from .masks import TORCH_OPS

__all__ = ["MaskedParam", "MaskSet", "NonFiniteWeightsError", "keep_bits", "select_kept"]

#: the integer dtype whose bits a floating dtype's are (same item size)
_BITS = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def keep_bits(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """``mask`` as bits for a tensor of ``dtype``: -1 (all bits set) where True, 0 where False,
    in the integer dtype of ``dtype``'s item size; None for a dtype without one.

    >>> keep_bits(torch.tensor([True, False]), torch.float32)
    tensor([-1,  0], dtype=torch.int32)
    """
    bits = _BITS.get(dtype)
    return None if bits is None else mask.to(bits).neg_()


def select_kept(t: torch.Tensor, mask: torch.Tensor, bits: torch.Tensor | None = None) -> torch.Tensor:
    """A new tensor: ``t`` where ``mask`` is True, exactly +0.0 elsewhere (NaN and inf
    included); through ``bits`` (:func:`keep_bits` of ``mask``) when they fit ``t``.

    >>> m = torch.tensor([True, False, False])
    >>> select_kept(torch.tensor([1.5, float("nan"), -0.0]), m, keep_bits(m, torch.float32))
    tensor([1.5000, 0.0000, 0.0000])
    """
    if bits is not None and t.layout == torch.strided and _BITS.get(t.dtype) == bits.dtype:
        return t.view(bits.dtype).bitwise_and(bits).view(t.dtype)
    return t.masked_fill(torch.logical_not(mask), 0)


@dataclass(eq=False)
class MaskedParam:
    """One parameter under a mask."""

    name: str
    param: torch.nn.Parameter
    module: torch.nn.Module
    mask: torch.Tensor
    owner: int  # the index of the modifier holding the mask
    handles: list[Any] = field(default_factory=list)
    applied_sparsity: float | None = None
    version: int = -1  # param._version right after it was last masked
    #: the mask as bits (:func:`keep_bits`), or, for a dtype without them, ``~mask``
    bits: torch.Tensor | None = field(default=None, repr=False)
    pruned: torch.Tensor | None = field(default=None, repr=False)
    grad_hook: bool = False  # its gradient is masked by a hook (MaskSet.watch_grad)

    def __post_init__(self) -> None:
        self.bits = keep_bits(self.mask, self.param.dtype)
        self.pruned = torch.logical_not(self.mask) if self.bits is None else None

    @torch.no_grad()
    def set_mask(self, mask: torch.Tensor) -> None:
        """Change the mask in place (the gradient hook reads the same tensors)."""
        self.mask.copy_(mask)
        if self.bits is not None:
            self.bits.copy_(self.mask).neg_()
        else:
            torch.logical_not(self.mask, out=self.pruned)

    @torch.no_grad()
    def mask_grad(self) -> None:
        """The accumulated gradient's pruned entries become exactly +0.0, in place (a sparse
        gradient becomes a dense one)."""
        grad = self.param.grad
        if grad is None:
            return
        if grad.layout != torch.strided:
            self.param.grad = select_kept(grad.to_dense(), self.mask)
        elif self.bits is not None and _BITS.get(grad.dtype) == self.bits.dtype:
            grad.view(self.bits.dtype).bitwise_and_(self.bits)
        else:
            grad.masked_fill_(torch.logical_not(self.mask), 0)

    @torch.no_grad()
    def enforce(self) -> None:
        """Pruned entries of the weight become exactly +0.0 (a selection, in place)."""
        if self.bits is not None and _BITS.get(self.param.dtype) == self.bits.dtype:
            self.param.view(self.bits.dtype).bitwise_and_(self.bits)
        else:
            self.param.masked_fill_(self.pruned if self.pruned is not None else torch.logical_not(self.mask), 0)
        self.version = self.param._version


class MaskSet:
    """Every mask of a model, keyed by parameter name."""

    def __init__(self) -> None:
        self.params: dict[str, MaskedParam] = {}
        self._module_hooks: dict[int, Any] = {}
        self._by_module: dict[int, list[MaskedParam]] = {}

    # -- lifecycle ------------------------------------------------------------------------
    def hold(self, name: str, param: torch.nn.Parameter, module: torch.nn.Module, owner: int,
             mask: torch.Tensor | None = None) -> MaskedParam:
        """Put ``param`` under a mask (all True, the given one, or its current one)."""
        entry = self.params.get(name)
        if entry is None:
            initial = mask if mask is not None else torch.ones_like(param, dtype=torch.bool)
            entry = MaskedParam(name, param, module, initial.to(device=param.device, dtype=torch.bool).clone(), owner)
            self.params[name] = entry
            self.watch_grad(entry)
            self._by_module.setdefault(id(module), []).append(entry)
            self._ensure_forward_hook(module)
        else:
            entry.owner = owner
            if mask is not None:
                entry.set_mask(mask)
        return entry

    @staticmethod
    def watch_grad(entry: MaskedParam) -> None:
        """Mask ``entry``'s gradient once each backward pass has accumulated it: select, not
        multiply (a NaN or infinite gradient of a pruned weight becomes 0), in place, before
        DDP's reducer reads it. A frozen parameter (``requires_grad`` False, e.g. by a
        TrainableParamsModifier) has no gradient and takes no hook: the hook is added when it
        is made trainable again (:meth:`watch_grads`)."""
        if entry.param.requires_grad and not entry.grad_hook:
            entry.handles.append(entry.param.register_post_accumulate_grad_hook(lambda p, e=entry: e.mask_grad()))
            entry.grad_hook = True

    def watch_grads(self, name: str) -> None:
        """Parameter ``name`` may have gradients from now on: mask them if it is masked."""
        entry = self.params.get(name)
        if entry is not None:
            self.watch_grad(entry)

    def _ensure_forward_hook(self, module: torch.nn.Module) -> None:
        key = id(module)
        if key in self._module_hooks:
            return

        entries = self._by_module[key]

        def pre_forward(mod: torch.nn.Module, args: Any) -> None:
            # Re-mask only weights changed in place since they were last masked (an optimizer
            # step already re-masked them; anything else, e.g. user code, bumps _version).
            for entry in entries:
                if entry.param._version != entry.version:
                    self.apply((entry,))

        self._module_hooks[key] = module.register_forward_pre_hook(pre_forward)

    def release(self, names: Iterable[str]) -> None:
        """Stop enforcing the masks of ``names`` (the weights may regrow from now on)."""
        for name in list(names):
            entry = self.params.pop(name, None)
            if entry is None:
                continue
            for handle in entry.handles:
                handle.remove()
            siblings = self._by_module.get(id(entry.module), [])
            if entry in siblings:
                siblings.remove(entry)
            if not siblings:
                self._by_module.pop(id(entry.module), None)
                hook = self._module_hooks.pop(id(entry.module), None)
                if hook is not None:
                    hook.remove()

    def release_all(self) -> None:
        self.release(list(self.params))

    # -- masks --------------------------------------------------------------------------
    @torch.no_grad()
    def apply(self, entries: Iterable[MaskedParam] | None = None) -> None:
        """``weight = where(mask, weight, 0)`` in place for ``entries`` (default: every masked
        parameter): pruned entries exactly 0, even NaN or infinite ones."""
        for entry in self.params.values() if entries is None else entries:
            entry.enforce()

    @torch.no_grad()
    def update(self, entries: list[MaskedParam], sparsity: float, mask_type: Any, global_sparsity: bool,
               step: int) -> None:
        """Recompute the masks of ``entries`` for ``sparsity`` from the weights' magnitudes (the
        core's policy, :func:`recipe_spec.pruning.magnitude.update_masks`)."""
        masks = update_masks(TORCH_OPS, [e.param.detach() for e in entries], sparsity, mask_type,
                             global_sparsity, [e.name for e in entries], step)
        for entry, mask in zip(entries, masks, strict=True):
            entry.set_mask(mask)
            entry.applied_sparsity = sparsity
            entry.enforce()
