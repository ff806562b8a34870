"""The block-diagonal inverse empirical Fisher of second-order pruning, written once.

``F = damp·I + (1/m)·Σᵢ gᵢ gᵢᵀ`` over the ``m`` rows of a gradient matrix ``G`` (``m x d``),
block diagonal with blocks of ``B`` consecutive coordinates (the last one ragged; ``B = None``
or ``B >= d``: one block). Each block's inverse is what SparseML's M-FAC recurrence
(``FisherInverseFast``: ``F⁻¹ₖ = F⁻¹ₖ₋₁ − F⁻¹ₖ₋₁ gₖ gₖᵀ F⁻¹ₖ₋₁ / (m + gₖᵀ F⁻¹ₖ₋₁ gₖ)``, from
``F⁻¹₀ = I/damp``) and OBS's per-block updates (``EmpiricalBlockFisherInverse``) compute.
Padding a ragged block with zero gradient coordinates changes nothing: a zero coordinate
only adds ``damp`` on its own diagonal entry.

Two representations, whichever is smaller, both exact:

- **low rank** (``m < B``, M-FAC's case): ``F⁻¹ = D·I − Σᵢ vᵢ vᵢᵀ / denᵢ`` (``D = 1/damp``),
  the recurrence's own vectors ``vᵢ = F⁻¹ᵢ₋₁ gᵢ`` and ``denᵢ = m + gᵢᵀ vᵢ``. They are
  computed batched over all blocks with matrix products: the Gram matrix ``K = G Gᵀ`` of each
  block, the recurrence run on the ``m x m`` coefficients ``C`` of ``V = C G`` (``C`` lower
  triangular, ``vᵢ = D gᵢ − Σⱼ₍ⱼ<ᵢ₎ (vⱼᵀgᵢ / denⱼ) vⱼ`` with ``vⱼᵀgᵢ = (C K)ⱼᵢ``, in float64),
  then ``V = C G``. Two batched products of ``2·m²·d`` flops each and ``O(m³·d/B)``
  besides, instead of ``m`` sequential passes over the gradients. Memory: ``V``, ``m·d``.
- **dense** (``B <= m``, OBS's case): each ``B x B`` block inverted directly (in float64):
  ``d·B`` numbers instead of ``m·d``.

>>> import numpy as np
>>> from recipe_spec.numpy_ops import NUMPY_OPS
>>> g = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0]])
>>> f = FisherInverse(NUMPY_OPS, g, damp=0.5, block_size=None)
>>> dense = np.linalg.inv(0.5 * np.eye(3) + g.T @ g / 2)
>>> bool(np.allclose(f.diag(), np.diag(dense))), bool(np.allclose(f.mul(np.ones(3)), dense.sum(1)))
(True, True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..array_ops import Array
from .ops import FisherOps

__all__ = ["FisherInverse", "block_layout", "fisher_bytes"]


def block_layout(d: int, block_size: int | None) -> tuple[int, int]:
    """``(B, number of blocks)`` for ``d`` coordinates: ``None``, 0 or ``B >= d`` is one block."""
    if not block_size or block_size >= d:
        return max(d, 1), 1
    return block_size, math.ceil(d / block_size)


def fisher_bytes(m: int, d: int, block_size: int | None, itemsize: int) -> int:
    """The bytes :class:`FisherInverse` holds for ``m`` gradients of ``d`` coordinates, plus
    its largest temporary while it is built (the padded, block-major copy of the gradients
    and the Gram or outer-product matrices)."""
    b, nb = block_layout(d, block_size)
    padded = nb * b
    if b <= m:  # dense blocks, built in float64
        kept = nb * b * b * itemsize
        temporary = padded * m * itemsize + 2 * nb * b * b * 8
    else:
        kept = padded * m * itemsize + nb * m * 8
        temporary = padded * m * itemsize + 3 * nb * m * m * 8
    return kept + temporary


class FisherInverse:
    """``F⁻¹`` of the gradients ``grads`` (``m x d``, any float dtype; see the module
    docstring), with :meth:`diag`, :meth:`mul` and :meth:`diag_blocks`.

    ``devices``: the blocks are split into that many consecutive groups, each computed and
    kept on its device (``ops.to_device``); results come back on the device of ``grads``.
    The gradients are not modified (SparseML's ``FisherInverseFast`` overwrote them).
    """

    def __init__(self, ops: FisherOps, grads: Array, damp: float, block_size: int | None = None,
                 devices: Sequence[Any] | None = None):
        if isinstance(damp, bool) or not isinstance(damp, (int, float)) or not damp > 0:
            raise ValueError(f"damp must be a positive number. Received: damp={damp!r}")
        if len(grads.shape) != 2 or grads.shape[0] < 1:
            raise ValueError(f"grads must be a matrix with one gradient per row. Received shape {tuple(grads.shape)}")
        self.ops = ops
        self.m, self.d = int(grads.shape[0]), int(grads.shape[1])
        self.damp = float(damp)
        self.block, self.num_blocks = block_layout(self.d, block_size)
        self.home = ops.device_of(grads)
        self.dense = self.block <= self.m
        groups = list(devices) if devices else [self.home]
        per = math.ceil(self.num_blocks / len(groups))
        self._parts: list[tuple[int, int, Any, Any]] = []  # (first block, blocks, device, data)
        for g, device in enumerate(groups):
            first = g * per
            count = min(per, self.num_blocks - first)
            if count <= 0:
                break
            lo, hi = first * self.block, min((first + count) * self.block, self.d)
            part = ops.to_device(grads[:, lo:hi], device)
            self._parts.append((first, count, device, self._build(part, count)))

    # -- building -----------------------------------------------------------------------------
    def _blocks(self, x: Array, count: int) -> Array:
        """``x`` (``rows x width``) zero-padded to ``count`` blocks, as ``(count, rows, B)``."""
        ops = self.ops
        rows, width = int(x.shape[0]), int(x.shape[1])
        pad = count * self.block - width
        if pad:
            x = ops.concat([x, ops.zeros((rows, pad), x)], 1)
        return ops.permute(ops.reshape(x, (rows, count, self.block)), (1, 0, 2))

    def _build(self, grads: Array, count: int) -> Any:
        ops = self.ops
        g = self._blocks(grads, count)  # (nb, m, B)
        if self.dense:
            outer = ops.astype(ops.matmul(ops.permute(g, (0, 2, 1)), g), "float64")  # (nb, B, B)
            eye = ops.astype(ops.eye(self.block, g), "float64")
            return ops.cast(ops.inverse(outer / self.m + eye * self.damp), g)
        gram = ops.astype(ops.matmul(g, ops.permute(g, (0, 2, 1))), "float64")  # (nb, m, m)
        coeffs, den = self._recurrence(gram)
        return ops.matmul(ops.cast(coeffs, g), g), den  # V (nb, m, B), den (nb, m) float64

    def _recurrence(self, gram: Array) -> tuple[Array, Array]:
        """The M-FAC recurrence on the coefficients: rows ``C[i]`` with ``vᵢ = Σⱼ C[i, j] gⱼ``
        and ``denᵢ = m + gᵢᵀvᵢ``, for every block at once (float64)."""
        ops, m, big = self.ops, self.m, 1.0 / self.damp
        eye = ops.astype(ops.eye(m, gram), "float64")
        rows: list[Array] = []
        dens: list[Array] = []
        for i in range(m):
            k_i = gram[:, :, i]  # (nb, m): gⱼᵀgᵢ for every j
            c_i = ops.expand(ops.reshape(eye[i] * big, (1, m)), (gram.shape[0], m))
            if rows:
                prev = ops.stack(rows, 1)  # (nb, i, m)
                dots = ops.reshape(ops.matmul(prev, ops.reshape(k_i, (-1, m, 1))), (-1, i))  # vⱼᵀgᵢ
                scale = dots / ops.stack(dens, 1)
                c_i = c_i - ops.reshape(ops.matmul(ops.reshape(scale, (-1, 1, i)), prev), (-1, m))
            rows.append(c_i)
            dens.append(ops.sum(c_i * k_i, 1) + float(m))
        return ops.stack(rows, 1), ops.stack(dens, 1)

    # -- using --------------------------------------------------------------------------------
    def _gather(self, pieces: list[Array]) -> Array:
        ops = self.ops
        flat = ops.concat([ops.to_device(ops.reshape(p, (-1,)), self.home) for p in pieces], 0)
        return flat[: self.d]

    def diag(self) -> Array:
        """The diagonal of ``F⁻¹`` (length ``d``)."""
        ops, pieces = self.ops, []
        for _, _, _, data in self._parts:
            if self.dense:
                pieces.append(ops.diagonal(data))
            else:
                v, den = data
                weights = ops.cast(ops.reshape(1.0 / den, (den.shape[0], den.shape[1], 1)), v)
                pieces.append(ops.sum(v * v * weights, 1) * -1.0 + 1.0 / self.damp)
        return self._gather(pieces)

    def mul(self, x: Array) -> Array:
        """``F⁻¹ x`` for a vector ``x`` of length ``d``."""
        ops, pieces = self.ops, []
        for first, count, device, data in self._parts:
            lo, hi = first * self.block, min((first + count) * self.block, self.d)
            xb = self._blocks(ops.reshape(ops.to_device(x[lo:hi], device), (1, hi - lo)), count)
            xb = ops.permute(xb, (0, 2, 1))  # (nb, B, 1)
            if self.dense:
                pieces.append(ops.matmul(data, ops.cast(xb, data)))
            else:
                v, den = data
                xb = ops.cast(xb, v)
                proj = ops.matmul(v, xb) / ops.cast(ops.reshape(den, (den.shape[0], den.shape[1], 1)), v)
                pieces.append(xb * (1.0 / self.damp) - ops.matmul(ops.permute(v, (0, 2, 1)), proj))
        return self._gather(pieces)

    def diag_blocks(self, k: int) -> Array:
        """The ``k x k`` diagonal sub-blocks of ``F⁻¹`` over consecutive coordinates,
        ``(d / k, k, k)``; ``k`` must divide both ``B`` and ``d`` (OBS ``block4``)."""
        ops = self.ops
        if self.block % k or self.d % k:
            raise ValueError(f"sub-blocks of {k} need a block size and a size divisible by {k}; got B={self.block}, d={self.d}")
        pieces = []
        per = self.block // k
        for _, count, _, data in self._parts:
            if self.dense:
                subs = [data[:, j * k:(j + 1) * k, j * k:(j + 1) * k] for j in range(per)]
                pieces.append(ops.stack(subs, 1))  # (nb, B/k, k, k)
            else:
                v, den = data
                w = ops.permute(ops.reshape(v, (count, self.m, per, k)), (0, 2, 1, 3))  # (nb, B/k, m, k)
                scaled = w / ops.cast(ops.reshape(den, (count, 1, self.m, 1)), v)
                eye = ops.eye(k, v) * (1.0 / self.damp)
                pieces.append(eye - ops.matmul(ops.permute(scaled, (0, 1, 3, 2)), w))
        blocks = ops.concat([ops.to_device(ops.reshape(p, (-1, k, k)), self.home) for p in pieces], 0)
        return blocks[: self.d // k]
