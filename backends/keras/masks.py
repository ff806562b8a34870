"""Pruning masks for Keras kernels: a kernel in, a NumPy ``bool`` mask of the kernel's shape out
(True = keep), the same mask the PyTorch backend gives for the equivalent torch weight.

Nothing here imports Keras or torch, and no mask rule is written here: the algorithms are those
of :mod:`recipe_spec.masks`, run over NumPy (:mod:`recipe_spec.masks.numpy_ops`), and both backends
run the same float64 group scores (see there), so masks agree bit for bit, ties and near-ties
included. What this module knows is the Keras kernel layout (:func:`kernel_layout`): every rule
speaks of torch's axes ("dimension 0/1" = torch's (out, in)), every tie of torch's flat order,
and every message shows torch-layout shapes; the algorithms read those axes in the kernel as it
is, without transposing it.

:class:`MaskShapeError` is the core's, with ``keras_shape`` (the kernel's own shape) added.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from recipe_spec import masks as core
from recipe_spec.masks.layout import Layout
from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec.masks.types import parse_mask_type

from .layout import canonical_axes

__all__ = [
    "MaskShapeError",
    "parse_mask_type",
    "kernel_layout",
    "to_torch_layout",
    "from_torch_layout",
    "compute_mask",
    "global_unstructured_masks",
]

class MaskShapeError(core.MaskShapeError):
    """A mask type cannot be applied to a kernel of this shape: the core's error (same
    messages as the torch backend, torch-layout ``shape``) with ``keras_shape``, the kernel's
    own shape."""

    def __init__(self, message: str, *, shape: Sequence[int] = (), mask_type: Any = None,
                 keras_shape: Sequence[int] | None = None) -> None:
        super().__init__(message, shape=shape, mask_type=mask_type)
        self.keras_shape = None if keras_shape is None else tuple(int(d) for d in keras_shape)


# -- layouts ---------------------------------------------------------------------------------
def kernel_layout(shape: Sequence[int], layer_type: str) -> Layout:
    """The :class:`~recipe_spec.masks.layout.Layout` of a ``layer_type`` kernel of ``shape``: which
    kernel axis holds each canonical (torch) axis (the backend's :func:`canonical_axes`).

    >>> kernel_layout((3, 3, 4, 8), "Conv2D").canonical_shape
    (8, 4, 3, 3)
    """
    return Layout(tuple(shape), canonical_axes(layer_type, len(shape)))


def to_torch_layout(kernel: np.ndarray, layer_type: str) -> np.ndarray:
    """The torch weight that holds the same values as a Keras ``kernel`` (a view, no copy).

    >>> to_torch_layout(np.zeros((3, 3, 4, 8)), "Conv2D").shape
    (8, 4, 3, 3)
    """
    kernel = np.asarray(kernel)
    return kernel.transpose(kernel_layout(kernel.shape, layer_type).axes)


def from_torch_layout(array: np.ndarray, layer_type: str, shape: Sequence[int]) -> np.ndarray:
    """The inverse of :func:`to_torch_layout`: ``array`` (torch layout) as a Keras array of
    ``shape`` (the kernel's shape, checked)."""
    array = np.asarray(array)
    shape = tuple(int(d) for d in shape)
    out = array.transpose(np.argsort(canonical_axes(layer_type, len(shape))))
    if out.shape != shape:
        raise ValueError(
            f"an array of torch-layout shape {list(array.shape)} is not a {layer_type} kernel of "
            f"shape {list(shape)}"
        )
    return out


# -- public API ------------------------------------------------------------------------------
def compute_mask(kernel: Any, sparsity: float, mask_type: Any = "unstructured",
                 layer_type: str = "Dense") -> np.ndarray:
    """The keep-mask (``bool``, the kernel's shape) of a Keras ``kernel`` at ``sparsity`` for a
    recipe's ``mask_type``: the mask ``recipe_spec_torch.masks.compute_mask`` gives for
    ``to_torch_layout(kernel, layer_type)``, in the Keras layout. Scores are ``|w|``.

    Same checks in the same order as the torch backend: the mask type (``ValueError``), the
    sparsity (``ValueError``), NaN/inf weights (``ValueError``), then the shape
    (:class:`MaskShapeError`, shape in torch layout). For N:M the target must be 0 or within
    1e-2 of ``1 - N/M``.

    >>> compute_mask(np.array([[0.3, 0.1], [0.2, 0.4]]), 0.5).tolist()
    [[True, False], [False, True]]
    """
    args = core.mask_args(mask_type, sparsity)
    kernel = np.asarray(kernel)
    layout = kernel_layout(kernel.shape, layer_type)
    try:
        return core.mask_for(NUMPY_OPS, kernel, args, layout)
    except core.MaskShapeError as err:
        raise MaskShapeError(str(err), shape=err.shape, mask_type=err.mask_type,
                             keras_shape=kernel.shape) from None


def global_unstructured_masks(kernels_and_types: Sequence[tuple[Any, str]],
                              sparsity: float) -> list[np.ndarray]:
    """One magnitude threshold over all kernels together (SparseML's ``global_sparsity``), as
    ``recipe_spec_torch.masks.global_unstructured_masks`` on the torch-layout ``|w|``.

    Exactly ``round(sparsity * total_size)`` entries are False across the list; ties at the
    threshold keep the entries first in the list's order, then in flat torch-layout order.
    NaN weights raise ``ValueError`` (infinities rank highest, as in torch).

    >>> [m.tolist() for m in global_unstructured_masks(
    ...     [(np.array([[1.0, 0.5]]), "Dense"), (np.array([0.5, 2.0]), "bias")], 0.5)]
    [[[True, False]], [False, True]]
    """
    sparsity = core.check_sparsity(sparsity)
    kernels = [np.asarray(kernel) for kernel, _ in kernels_and_types]
    layouts = [kernel_layout(k.shape, t) for k, (_, t) in zip(kernels, kernels_and_types, strict=True)]
    return core.global_unstructured_masks(NUMPY_OPS, [np.abs(k) for k in kernels], sparsity, layouts)
