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
  computed batched over all blocks with matrix products: ``vᵢ = D gᵢ − Σⱼ₍ⱼ<ᵢ₎ (vⱼᵀgᵢ / denⱼ) vⱼ``
  is Gaussian elimination without pivoting on ``M = m·I + D·K``, ``K = G Gᵀ`` the Gram matrix
  of each block: ``M = L·diag(den)·Lᵀ`` (``L`` unit lower triangular) and ``V = D·L⁻¹·G``.
  ``L⁻¹`` and ``den`` come from a recursive 2 x 2 block elimination of ``M`` (in float64, the
  same pivots in the same order as the recurrence, so a pivot that rounding made negative is
  used as the recurrence used it), or from one Cholesky factorisation ``M = R·Rᵀ`` and
  ``R⁻¹`` when ``M`` is positive definite (always, but for rounding), then ``V`` from one
  product. Two batched products of
  ``2·m²·d`` flops each (the Gram and ``V``) and ``O(m³·d/B)`` besides, instead of ``m``
  sequential passes over the gradients; the gradients are read in place (no block-major
  copy) except a ragged last block, which is padded on its own. ``V`` itself is never kept:
  the inverse holds ``C`` and ``den`` (``m² + m`` numbers per block) and reads the caller's
  gradients, forming ``V`` in pieces for :meth:`FisherInverse.diag` and computing
  ``F⁻¹x = D·x − Gᵀ·(Cᵀ·((C·(G·x)) ⊘ den))`` from ``G`` and ``C``. Memory: the gradients
  (``m·d``), which must not change while the inverse is used.
- **dense** (``B <= m``, OBS's case): each ``B x B`` block inverted directly (in float64):
  ``d·B`` numbers instead of ``m·d``.

>>> import numpy as np
>>> from recipe_spec.masks.numpy_ops import NUMPY_OPS
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

from ...masks.ops import Array
from .ops import FisherOps

__all__ = ["FisherInverse", "block_layout", "fisher_bytes"]

#: The most entries of ``V`` that :meth:`FisherInverse.diag` squares at a time (its
#: temporaries' size; ``FisherOps.working_entries`` gives the size on each device).
_CHUNK = 1 << 24


def block_layout(d: int, block_size: int | None) -> tuple[int, int]:
    """``(B, number of blocks)`` for ``d`` coordinates: ``None``, 0 or ``B >= d`` is one block."""
    if not block_size or block_size >= d:
        return max(d, 1), 1
    return block_size, math.ceil(d / block_size)


def fisher_bytes(m: int, d: int, block_size: int | None, itemsize: int) -> int:
    """The bytes :class:`FisherInverse` holds for ``m`` gradients of ``d`` coordinates, plus
    its largest temporary while it is built (the float64 Gram or outer-product matrices, and
    a padded copy of a ragged last block, or of all gradients in the dense case)."""
    b, nb = block_layout(d, block_size)
    padded = nb * b
    if b <= m:  # dense blocks, built in float64
        kept = nb * b * b * itemsize
        temporary = b * m * itemsize + 3 * nb * b * b * 8
    else:
        kept = nb * m * m * (itemsize + 8) + nb * m * 8
        temporary = b * m * itemsize + 7 * nb * m * m * 8 + min(padded, _CHUNK) * itemsize * 2
    return kept + temporary


class FisherInverse:
    """``F⁻¹`` of the gradients ``grads`` (``m x d``, any float dtype; see the module
    docstring), with :meth:`diag`, :meth:`mul` and :meth:`diag_blocks`.

    ``devices``: the blocks are split into that many consecutive groups, each computed and
    kept on its device (``ops.to_device``); results come back on the device of ``grads``.
    The gradients are not modified (SparseML's ``FisherInverseFast`` overwrote them), but the
    low-rank representation reads them when used: do not change them while the inverse is in
    use (the ``devices`` split and a ragged last block work on copies).
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
        self.like = grads[:1, 0]  # the gradients' dtype and device, for casts
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
            full = (hi - lo) // self.block
            if 0 < full < count:  # a ragged last block on its own: the others need no padding
                self._parts.append((first, full, device, self._build(part[:, :full * self.block], full)))
                first, count, part = first + full, 1, part[:, full * self.block:]
            self._parts.append((first, count, device, self._build(part, count)))

    # -- building -----------------------------------------------------------------------------
    def _blocks(self, x: Array, count: int) -> Array:
        """``x`` (``rows x width``) zero-padded to ``count`` blocks, as ``(count, rows, B)``: a
        view of ``x`` where no padding is needed (to be read, never written)."""
        ops = self.ops
        rows, width = int(x.shape[0]), int(x.shape[1])
        pad = count * self.block - width
        if pad:
            x = ops.concat([x, ops.zeros((rows, pad), x)], 1)
        return ops.permute_view(ops.reshape(x, (rows, count, self.block)), (1, 0, 2))

    def _build(self, grads: Array, count: int) -> Any:
        ops = self.ops
        g = self._blocks(grads, count)  # (nb, m, B)
        gt = ops.permute_view(g, (0, 2, 1))  # (nb, B, m)
        if self.dense:
            outer = ops.astype(ops.matmul(gt, g), "float64")  # (nb, B, B)
            eye = ops.astype(ops.eye(self.block, g), "float64")
            return ops.cast(ops.inverse(outer / self.m + eye * self.damp), g)
        gram = ops.astype(ops.matmul(g, gt), "float64")  # (nb, m, m)
        coeffs, den = self._coefficients(gram)
        return ops.cast(coeffs, g), den, g  # V = C·G is formed only in pieces, when used

    def _vectors(self, data: Any, lo: int, hi: int) -> Array:
        """The recurrence's vectors ``V = C·G`` of blocks ``lo:hi`` of a low-rank part."""
        coeffs, _, g = data
        return self.ops.matmul(coeffs[lo:hi], g[lo:hi])

    def _coefficients(self, gram: Array) -> tuple[Array, Array]:
        """``C = D·L⁻¹`` and ``den = p`` of the recurrence, ``M = m·I + D·K = L·diag(p)·Lᵀ``
        (float64). ``M`` is positive definite, so one Cholesky factorisation ``M = R·Rᵀ`` gives
        them (``L = R·diag(R)⁻¹``, ``p = diag(R)²``); when rounding of a rank-deficient
        float32 Gram matrix made it indefinite, :meth:`_ldl_inverse` eliminates as the
        recurrence does, negative pivots and all."""
        ops, big, m = self.ops, 1.0 / self.damp, self.m
        eye = ops.astype(ops.eye(m, gram), "float64")
        a = gram * big + eye * float(m)
        r = ops.cholesky(ops.permute_view(a, (0, 2, 1)))  # its lower triangle: K above the diagonal, as the recurrence reads it
        if r is None:
            inv_l, den = self._ldl_inverse(a)
            return inv_l * big, den
        scale = ops.diagonal(r)  # (nb, m)
        inv_r = ops.lower_inverse(r)
        if inv_r is None:
            inv_r = self._lower_inverse(r)
        return inv_r * ops.reshape(scale * big, (-1, m, 1)), scale * scale

    def _lower_inverse(self, r: Array) -> Array:
        """``R⁻¹`` for a batch of lower triangular ``n x n`` matrices, by doubling: the
        inverses of all diagonal blocks of 1, 2, 4, ... rows, one size at a time
        (``[[A, 0], [B, C]]⁻¹ = [[A⁻¹, 0], [−C⁻¹·B·A⁻¹, C⁻¹]]``), ``n`` padded to a power of
        two with the identity. Batched products and a few copies in ``log₂ n`` rounds, instead
        of a batched triangular solve: that makes one small multithreaded LAPACK call per
        matrix, and on a machine whose other cores are busy each call can stall (seconds in
        all for 500 blocks on a shared 2-core VM)."""
        ops = self.ops
        nb, n = int(r.shape[0]), int(r.shape[-1])
        size = 1 << (n - 1).bit_length()
        r = ops.permute(r, (0, 1, 2))  # contiguous (LAPACK's factors are column-major): reshaped below
        if size > n:  # [[R, 0], [0, I]]
            extra = size - n
            ones = ops.expand(ops.reshape(ops.eye(extra, r), (1, extra, extra)), (nb, extra, extra))
            r = ops.concat([ops.concat([r, ops.zeros((nb, n, extra), r)], 2),
                            ops.concat([ops.zeros((nb, extra, n), r), ones], 2)], 1)
        inv = ops.reshape(1.0 / ops.diagonal(r), (nb, size, 1, 1))  # (nb, blocks, s, s)
        s = 1
        while s < size:
            p = size // (2 * s)
            pairs = ops.permute_view(ops.reshape(r, (nb, p, 2 * s, p, 2 * s)), (0, 2, 4, 1, 3))
            blocks = ops.permute_view(ops.diagonal(pairs), (0, 3, 1, 2))  # (nb, p, 2s, 2s): R's diagonal blocks
            first, second = inv[:, 0::2], inv[:, 1::2]
            below = ops.matmul(second, ops.matmul(blocks[:, :, s:, :s], first)) * -1.0
            top = ops.concat([first, ops.zeros((nb, p, s, s), r)], 3)
            inv = ops.concat([top, ops.concat([below, second], 3)], 2)
            s *= 2
        out = ops.reshape(inv, (nb, size, size))
        return out[:, :n, :n] if size > n else out

    def _ldl_inverse(self, a: Array) -> tuple[Array, Array]:
        """``(L⁻¹, p)`` with ``a = L·diag(p)·Lᵀ``, ``L`` unit lower triangular, for a batch of
        symmetric ``n x n`` matrices (float64): Gaussian elimination without pivoting, by
        halves. The M-FAC recurrence's coefficients are ``C = D·L⁻¹`` and ``den = p`` for
        ``a = m·I + D·K``: row ``i`` of ``L⁻¹`` eliminates the gradients before ``i``, and ``pᵢ``
        is the Schur complement ``m + gᵢᵀvᵢ``."""
        ops = self.ops
        n = int(a.shape[-1])
        if n == 1:
            return ops.zeros(a.shape, a) + 1.0, ops.reshape(a, (-1, 1))
        if n == 2:  # the general step below, written out: fewer small operations
            p_1, upper = a[:, 0, 0], a[:, 0, 1]
            l_21 = upper / p_1
            one, zero = ops.zeros(p_1.shape, a) + 1.0, ops.zeros(p_1.shape, a)
            inv = ops.reshape(ops.stack([one, zero, l_21 * -1.0, one], 1), (-1, 2, 2))
            return inv, ops.stack([p_1, a[:, 1, 1] - l_21 * upper], 1)
        h = n // 2
        inv_1, p_1 = self._ldl_inverse(a[:, :h, :h])
        lower = ops.permute_view(a[:, :h, h:], (0, 2, 1))  # (nb, n - h, h), read above the diagonal as the recurrence does
        x = ops.matmul(lower, ops.permute_view(inv_1, (0, 2, 1)))  # L₂₁·diag(p₁)
        l_21 = x / ops.reshape(p_1, (-1, 1, h))
        inv_2, p_2 = self._ldl_inverse(a[:, h:, h:] - ops.matmul(l_21, ops.permute_view(x, (0, 2, 1))))
        below = ops.matmul(inv_2, ops.matmul(l_21, inv_1)) * -1.0  # −L₂₂⁻¹·L₂₁·L₁₁⁻¹
        top = ops.concat([inv_1, ops.zeros((int(a.shape[0]), h, n - h), a)], 2)
        return ops.concat([top, ops.concat([below, inv_2], 2)], 1), ops.concat([p_1, p_2], 1)

    # -- using --------------------------------------------------------------------------------
    def _gather(self, pieces: list[Array]) -> Array:
        ops = self.ops
        flat = ops.concat([ops.to_device(ops.reshape(p, (-1,)), self.home) for p in pieces], 0)
        return flat[: self.d]

    def diag(self) -> Array:
        """The diagonal of ``F⁻¹`` (length ``d``)."""
        ops, pieces = self.ops, []
        for _, count, _, data in self._parts:
            if self.dense:
                pieces.append(ops.diagonal(data))
                continue
            coeffs, den, _ = data
            weights = ops.cast(ops.reshape(1.0 / den, (count, 1, self.m)), coeffs)
            step = max(1, min(_CHUNK, ops.working_entries(coeffs)) // (self.m * self.block))  # blocks at a time
            for lo in range(0, count, step):
                vc = self._vectors(data, lo, lo + step)  # Σᵢ vᵢ²/denᵢ as a (1 x m)·(m x B) product per block
                pieces.append(ops.matmul(weights[lo:lo + step], vc * vc) * -1.0 + 1.0 / self.damp)
        return self._gather(pieces)

    def mul(self, x: Array) -> Array:
        """``F⁻¹ x`` for a vector ``x`` of length ``d``."""
        ops, pieces = self.ops, []
        for first, count, device, data in self._parts:
            lo, hi = first * self.block, min((first + count) * self.block, self.d)
            xb = self._blocks(ops.reshape(ops.to_device(x[lo:hi], device), (1, hi - lo)), count)  # (nb, 1, B)
            # products with a row on the left ((F⁻¹x)ᵀ = xᵀF⁻¹ᵀ): batched matrix-vector products are slow
            if self.dense:
                pieces.append(ops.matmul(ops.cast(xb, data), ops.permute_view(data, (0, 2, 1))))
            else:
                coeffs, den, g = data  # Vx = C·(G·x), Vᵀy = Gᵀ·(Cᵀ·y): V is never formed
                xb = ops.cast(xb, coeffs)
                proj = ops.matmul(ops.matmul(xb, ops.permute_view(g, (0, 2, 1))), ops.permute_view(coeffs, (0, 2, 1)))
                proj = proj / ops.cast(ops.reshape(den, (count, 1, self.m)), coeffs)
                pieces.append(xb * (1.0 / self.damp) - ops.matmul(ops.matmul(proj, coeffs), g))
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
                v, den = self._vectors(data, 0, count), data[1]
                w = ops.permute(ops.reshape(v, (count, self.m, per, k)), (0, 2, 1, 3))  # (nb, B/k, m, k)
                scaled = w / ops.cast(ops.reshape(den, (count, 1, self.m, 1)), v)
                eye = ops.eye(k, v) * (1.0 / self.damp)
                pieces.append(eye - ops.matmul(ops.permute(scaled, (0, 1, 3, 2)), w))
        blocks = ops.concat([ops.to_device(ops.reshape(p, (-1, k, k)), self.home) for p in pieces], 0)
        return blocks[: self.d // k]
