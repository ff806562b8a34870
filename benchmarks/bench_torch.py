"""The PyTorch backend's figures in one run: the manager's per-step overhead on a small CNN
(bench_torch_manager.py) and mask updates against torch.kthvalue over ~25M parameters,
layer-wise and global, with the masks' memory (bench_torch_masks.py).

    python benchmarks/bench_torch.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_torch_manager  # noqa: E402
import bench_torch_masks  # noqa: E402

if __name__ == "__main__":
    argv = sys.argv
    print("== manager overhead ==")
    sys.argv = [argv[0]]
    bench_torch_manager.main()
    print("\n== mask updates ==")
    sys.argv = [argv[0]]
    bench_torch_masks.main()
