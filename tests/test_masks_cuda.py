"""Masks on a CUDA device equal the CPU masks bit for bit, for every mask type: scores that
decide ties are summed by the core in float64 elementwise additions, whose results do not
depend on the device (run where a GPU is available; skipped otherwise)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from recipe_spec_torch.masks import compute_mask, global_unstructured_masks  # noqa: E402

MASK_TYPES = ["unstructured", "block4", [1, 4], [2, 2], "channel", "filter", "2:4"]


def _weights(seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = [torch.randn(shape, generator=gen) for shape in [(64, 48), (32, 16, 3, 3), (16, 12, 5, 5)]]
    out.append((torch.randn(40, 64, generator=gen) * 4).round() / 4)  # many ties
    return out


@pytest.mark.cuda
@pytest.mark.parametrize("mask_type", MASK_TYPES, ids=str)
def test_cuda_masks_equal_cpu_masks(mask_type: object) -> None:
    for seed in range(3):
        for w in _weights(seed):
            sparsity = 0.5 if mask_type == "2:4" else 0.63
            cpu = compute_mask(w, sparsity, mask_type)
            gpu = compute_mask(w.cuda(), sparsity, mask_type)
            assert gpu.device.type == "cuda"
            assert torch.equal(gpu.cpu(), cpu), (seed, tuple(w.shape), mask_type)


@pytest.mark.cuda
def test_cuda_global_masks_equal_cpu_masks() -> None:
    scores = [w.abs() for w in _weights(7)]
    cpu = global_unstructured_masks(scores, 0.7)
    gpu = global_unstructured_masks([s.cuda() for s in scores], 0.7)
    assert all(torch.equal(g.cpu(), c) for g, c in zip(gpu, cpu, strict=True))
