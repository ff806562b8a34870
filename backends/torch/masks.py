"""Pruning masks for PyTorch: ``torch.bool`` masks (True = keep), the rules of
:mod:`recipe_spec.masks` (counting, ties, float64 group scores, SparseML's decisions), which
holds every algorithm; this module supplies torch's array operations (:class:`TorchOps`) and
the public entry points. A torch weight is already in canonical layout.

Nothing here touches a module or autograd: every function works under ``torch.no_grad`` on
detached tensors and returns a new mask of the weight's shape; :mod:`.pruning` is the one place
that writes masks into a model.

Selection is exact and fast (:mod:`recipe_spec.masks.selection`, with the sizes below): the k-th
smallest score is found by bracketing it with a fixed-seed random sample, counting the entries
below the bracket and running ``torch.kthvalue`` only on the few entries inside it (falling
back to ``torch.kthvalue`` on everything if the bracket misses). The result is the same value
``torch.kthvalue`` returns, in a few streaming passes and without concatenating or copying the
scores (only small inputs, up to ``_DIRECT_SELECT`` entries, and a missed bracket go to
``torch.kthvalue`` directly), which also keeps global masks memory-light.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from recipe_spec import masks as core
from recipe_spec.masks import MaskShapeError
from recipe_spec.masks.ops import InPlaceOps, SelectionLimits
from recipe_spec.masks.types import parse_mask_type

__all__ = [
    "MaskShapeError",
    "TorchOps",
    "parse_mask_type",
    "unstructured_mask",
    "global_unstructured_masks",
    "block_mask",
    "four_block_mask",
    "nm_mask",
    "channel_mask",
    "filter_mask",
    "compute_mask",
]

#: Tensors (or lists of them) up to this many entries go straight to ``torch.kthvalue``.
_DIRECT_SELECT = 1 << 16
#: Size of the random sample used to bracket the k-th smallest score.
_SAMPLE = 1 << 14
#: Entries counted per chunk when locating the n-th tied entry.
_CHUNK = 1 << 14


_DTYPES = {"float64": torch.float64, "float32": torch.float32, "int32": torch.int32, "bool": torch.bool}


class TorchOps(InPlaceOps):
    """:class:`recipe_spec.masks.ops.ArrayOps` over torch tensors (any device), with the linear
    algebra of second-order pruning (``FisherOps``) and of the one-shot solvers (``SolverOps``)."""

    def describe_shape(self, shape: Sequence[int]) -> str:
        return str(torch.Size(shape))

    def is_floating(self, x: torch.Tensor) -> bool:
        return x.is_floating_point()

    def astype(self, x: torch.Tensor, dtype: str) -> torch.Tensor:
        return x.to(_DTYPES[dtype])

    def isnan(self, x: torch.Tensor) -> torch.Tensor:
        return torch.isnan(x)

    def isfinite(self, x: torch.Tensor) -> torch.Tensor:
        return torch.isfinite(x)

    def sum_all(self, x: torch.Tensor) -> float:
        return float(x.sum())

    def count_nonzero(self, x: torch.Tensor) -> int:
        return int(torch.count_nonzero(x))

    def full(self, shape: Sequence[int], value: bool, like: torch.Tensor) -> torch.Tensor:
        return torch.full(tuple(shape), value, dtype=torch.bool, device=like.device)

    def expand(self, x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        return x.expand(tuple(shape)).contiguous()

    def concat(self, xs: Sequence[torch.Tensor], axis: int) -> torch.Tensor:
        return torch.cat(list(xs), dim=axis)

    def selection_limits(self) -> SelectionLimits:
        return SelectionLimits(_DIRECT_SELECT, _SAMPLE, _CHUNK)  # read now: tests change them

    def kth_direct(self, flat: torch.Tensor, k: int) -> torch.Tensor:
        return torch.kthvalue(flat, k).values

    def random_sample(self, flats: Sequence[torch.Tensor], counts: Sequence[int], seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)  # on the CPU: the same draws on every device
        return torch.cat([f[torch.randint(0, f.shape[0], (c,), generator=gen).to(f.device)]
                          for f, c in zip(flats, counts, strict=True)])

    def row_counts(self, flags: torch.Tensor) -> torch.Tensor:
        return flags.sum(1)

    def cumsum(self, x: torch.Tensor) -> torch.Tensor:
        return x.cumsum(0)

    def flat_nonzero(self, flags: torch.Tensor) -> torch.Tensor:
        return flags.reshape(-1).nonzero().flatten()

    # -- linear algebra (recipe_spec.pruning.second_order.ops.FisherOps) --------------------------
    def zeros(self, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        return torch.zeros(tuple(shape), dtype=like.dtype, device=like.device)

    def eye(self, n: int, like: torch.Tensor) -> torch.Tensor:
        return torch.eye(n, dtype=like.dtype, device=like.device)

    def cast(self, x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return x.to(dtype=like.dtype, device=like.device)

    def matmul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)

    def permute(self, x: torch.Tensor, axes: Sequence[int]) -> torch.Tensor:
        return x.permute(*axes).contiguous()

    def permute_view(self, x: torch.Tensor, axes: Sequence[int]) -> torch.Tensor:
        return x.permute(*axes)

    def same_values(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        if a is b:
            return True
        return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
                and a.dtype == b.dtype and a.device == b.device and a._version == b._version)

    def inverse(self, a: torch.Tensor) -> torch.Tensor:
        return torch.linalg.inv(a)

    def cholesky(self, a: torch.Tensor) -> torch.Tensor | None:
        r, info = torch.linalg.cholesky_ex(a)
        return None if bool(info.any()) else r

    def solve(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.linalg.solve(a, b)

    def lower_inverse(self, r: torch.Tensor) -> torch.Tensor | None:
        if r.device.type == "cpu":  # one LAPACK call per matrix: the caller's doubling instead
            return None
        eye = torch.eye(r.shape[-1], dtype=r.dtype, device=r.device).expand(r.shape)
        return torch.linalg.solve_triangular(r, eye, upper=False)

    def working_entries(self, like: torch.Tensor) -> int:
        return 1 << 20 if like.device.type == "cpu" else 1 << 24

    def sum(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return x.sum(axis)

    def diagonal(self, x: torch.Tensor) -> torch.Tensor:
        return torch.diagonal(x, dim1=-2, dim2=-1)

    def take(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return x[index]

    def put(self, x: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        x[index] = values.to(x.dtype)
        return x

    def where(self, flags: torch.Tensor, a: torch.Tensor, b: Any) -> torch.Tensor:
        return torch.where(flags, a, b)

    def min_value(self, x: torch.Tensor) -> float:
        return float(x.min())

    def stack(self, xs: Sequence[torch.Tensor], axis: int) -> torch.Tensor:
        return torch.stack(list(xs), dim=axis)

    def to_device(self, x: torch.Tensor, device: Any) -> torch.Tensor:
        return x.to(device)

    def device_of(self, x: torch.Tensor) -> torch.device:
        return x.device

    # -- one-shot solvers (recipe_spec.pruning.second_order.ops.SolverOps) ------------------------
    def copy(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean()

    def sqrt(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(x)

    def row_norms(self, x: torch.Tensor) -> torch.Tensor:
        return torch.norm(x, p=2, dim=1)

    def subtract_outer(self, x: torch.Tensor, start: int, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        x[start:].sub_(torch.outer(a, b))  # a view: no copy back
        return x

    def gram(self, a: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, a.t())  # the whole product: llm-compressor's bits

    def gram_matrix(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def scale_add(self, x: torch.Tensor, alpha: float, y: torch.Tensor) -> torch.Tensor:
        if alpha != 1.0:  # x·1 is x: no pass over x (GPTQ's plain sum adds with alpha 1)
            x.mul_(alpha)
        return x.add_(y)

    def add_diagonal(self, a: torch.Tensor, values: Any) -> torch.Tensor:
        a.diagonal().add_(values)
        return a

    def inverse_upper_factor(self, lower: torch.Tensor) -> torch.Tensor | None:
        r, info = torch.linalg.cholesky_ex(torch.cholesky_inverse(lower), upper=True)
        return None if bool(info.any()) else r

    def argsort_last(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=-1, stable=True)[1]

    def scatter_last(self, flags: torch.Tensor, index: torch.Tensor, value: bool) -> torch.Tensor:
        return flags.scatter_(-1, index, value)

    def assign(self, x: torch.Tensor, index: tuple, values: Any) -> torch.Tensor:
        x[index] = values
        return x

    def subtract(self, x: torch.Tensor, index: tuple, values: torch.Tensor) -> torch.Tensor:
        x[index].sub_(values)  # a view: no copy back
        return x

    @contextlib.contextmanager
    def serial(self, like: torch.Tensor) -> Iterator[None]:
        threads = torch.get_num_threads()
        if like.device.type != "cpu" or threads == 1:
            yield
            return
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)

    def index_select(self, x: torch.Tensor, axis: int, index: torch.Tensor) -> torch.Tensor:
        return torch.index_select(x, axis, index.to(x.device))

    # -- the quantization grid (recipe_spec.quantization.ops.QuantOps) ----------------------------
    def round_even(self, x: torch.Tensor) -> torch.Tensor:
        return torch.round(x)

    def divide(self, x: torch.Tensor, value: float) -> torch.Tensor:
        return x / torch.tensor(value, dtype=x.dtype, device=x.device)

    def clip(self, x: torch.Tensor, low: float, high: float) -> torch.Tensor:
        return torch.clamp(x, low, high)

    def minimum(self, x: torch.Tensor, y: Any) -> torch.Tensor:
        return torch.clamp(x, max=y) if isinstance(y, (int, float)) else torch.minimum(x, y)

    def maximum(self, x: torch.Tensor, y: Any) -> torch.Tensor:
        return torch.clamp(x, min=y) if isinstance(y, (int, float)) else torch.maximum(x, y)

    def amin(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.amin(x, dim=axis, keepdim=True)

    def amax(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.amax(x, dim=axis, keepdim=True)

    def round_fp8_e4m3(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float8_e4m3fn).to(x.dtype)

    def frexp(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m, e = torch.frexp(x)
        return m, e.to(x.dtype)

    def ldexp(self, m: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        return torch.ldexp(m, e.to(torch.int32)).to(m.dtype)

    # -- smoothing (recipe_spec.oneshot.smoothquant.solve.SmoothingOps) ------------------------------
    def log2(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log2(x)


TORCH_OPS = TorchOps()


# -- public entry points (rules and messages: recipe_spec.masks) -----------------------------
@torch.no_grad()
def unstructured_mask(scores: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Prune the ``round(sparsity * numel)`` smallest ``scores``, entry by entry.

    Exactly that many entries are False (``k = 0`` -> all True, ``sparsity = 1`` -> all
    False); ties at the threshold keep the earlier entries, so the same scores always give the
    same mask. ``sparsity`` outside [0, 1] or NaN scores raise ``ValueError``.

    >>> unstructured_mask(torch.tensor([0.3, 0.1, 0.2, 0.1]), 0.5).tolist()
    [True, False, True, False]
    """
    return core.unstructured_mask(TORCH_OPS, scores.detach(), sparsity)


@torch.no_grad()
def global_unstructured_masks(scores_list: Sequence[torch.Tensor], sparsity: float) -> list[torch.Tensor]:
    """One threshold over all ``scores_list`` together (SparseML's ``global_sparsity``).

    Exactly ``round(sparsity * total_numel)`` entries are False across the list, the smallest
    scores of all tensors. The list is taken in order as one flat vector for the tie rule, but
    not concatenated (above 65,536 entries in all): the threshold comes from a bracketing
    sample and per-tensor counts, so the extra memory is the bool masks plus the few entries
    near the threshold.
    """
    return core.global_unstructured_masks(TORCH_OPS, [s.detach() for s in scores_list], sparsity)


@torch.no_grad()
def block_mask(weight: torch.Tensor, sparsity: float, block_shape: Sequence[int]) -> torch.Tensor:
    """SparseML's ``BlockMaskCreator``: prune whole ``a x b`` blocks of dims 0 and 1 (see
    :func:`recipe_spec.masks.block_mask`); a block shape that does not divide the weight raises
    :class:`MaskShapeError`."""
    return core.block_mask(TORCH_OPS, weight.detach(), sparsity, block_shape)


@torch.no_grad()
def four_block_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """SparseML's ``FourBlockMaskCreator`` (``mask_type: block4``): groups of 4 input channels,
    the last one padded (see :func:`recipe_spec.masks.four_block_mask`)."""
    return core.four_block_mask(TORCH_OPS, weight.detach(), sparsity)


@torch.no_grad()
def nm_mask(weight: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """N:M sparsity (``"N:M"``, ``"tensorrt"`` = 2:4): the ``n`` largest ``|w|`` of every ``m``
    consecutive input channels kept (see :func:`recipe_spec.masks.nm_mask`)."""
    return core.nm_mask(TORCH_OPS, weight.detach(), n, m)


@torch.no_grad()
def channel_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Prune whole input channels (slices of dim 1) by L1 norm."""
    return core.channel_mask(TORCH_OPS, weight.detach(), sparsity)


@torch.no_grad()
def filter_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Prune whole output filters (slices of dim 0) by L1 norm."""
    return core.filter_mask(TORCH_OPS, weight.detach(), sparsity)


@torch.no_grad()
def compute_mask(weight: torch.Tensor, sparsity: float, mask_type: Any = "unstructured") -> torch.Tensor:
    """The mask of ``weight`` at ``sparsity`` for a recipe's ``mask_type``; scores = ``|w|``.

    Weights holding NaN or inf raise ``ValueError`` (the caller adds the parameter's name and
    the step). For N:M types the sparsity is the pattern's own (``1 - N/M``): ``sparsity == 0``
    gives an all-True mask and a target further than 1e-2 from ``1 - N/M`` raises
    ``ValueError``.
    """
    return core.compute_mask(TORCH_OPS, weight.detach(), sparsity, mask_type)
