"""Per-step overhead of the PyTorch manager when no update is due, against the bare loop.

A small CNN (about 0.77M parameters, batch 32 of 3x32x32) trains with SGD, one thread (this
machine's timings vary by 5-15% between identical runs on two threads). The recipe prunes every
prunable weight with a GMP modifier whose next update is far away (masks are held and enforced:
gradient hooks, forward pre-hooks, re-masking after the step) and sets the LR with a function
modifier every step. Two identical models, one bare and one managed, train alternately in blocks;
the figure is the median over rounds of each round's managed/bare ratio.
Target: overhead under 3%.

    python benchmarks/bench_torch_manager.py [--steps 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from recipe_spec import ScheduledModifierManager

RECIPE = """
modifiers:
  - !GMPruningModifier
    params: __ALL_PRUNABLE__
    init_sparsity: 0.5
    final_sparsity: 0.9
    start_epoch: 0
    end_epoch: 100
    update_frequency: 50
  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 100}
"""


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
        nn.Linear(2048, 256), nn.ReLU(), nn.Linear(256, 10),
    )


def loop(model: nn.Module, optimizer, x, y, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))

    bare_model = cnn()
    bare_opt = torch.optim.SGD(bare_model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(0)
    model = cnn()
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    optimizer = manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), steps_per_epoch=10_000)
    n_params = sum(p.numel() for p in model.parameters())

    loop(bare_model, bare_opt, x, y, 10)  # warm-up, and the step-0 mask update of the managed run
    loop(model, optimizer, x, y, 10)
    bare, managed, ratios = [], [], []
    for _ in range(args.rounds):
        bare.append(loop(bare_model, bare_opt, x, y, args.steps))
        managed.append(loop(model, optimizer, x, y, args.steps))
        ratios.append(managed[-1] / bare[-1])
    b, m = statistics.median(bare), statistics.median(managed)
    print(f"model: {n_params:,} parameters, {len(manager.runtime.masks.params)} masked weights; batch 32x3x32x32")
    print(f"threads: {torch.get_num_threads()}")
    print(f"bare loop     : {b * 1e3:.3f} ms/step")
    print(f"with manager  : {m * 1e3:.3f} ms/step (masks held, LR set every step, no mask update due)")
    print(f"overhead      : {(statistics.median(ratios) - 1) * 100:+.2f}% median of {args.rounds} paired rounds "
          f"(min {(min(ratios) - 1) * 100:+.2f}%, max {(max(ratios) - 1) * 100:+.2f}%; target < 3%)")


if __name__ == "__main__":
    main()
