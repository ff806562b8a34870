"""Per-step overhead of the PyTorch manager when no update is due, against the bare loop.

A ResNet-18-sized net (11.5M parameters: ResNet-18's convolutions and 1000-way classifier, batch
8 of 3x224x224, ImageNet's size; ``--size 64`` for a smaller input, where the fixed cost per
parameter weighs more) trains with SGD and momentum, one thread (this machine's timings vary by 5-15%
between identical runs on two threads). The recipe prunes every prunable weight with a GMP
modifier whose next update is far away (masks are held and enforced: gradient hooks, forward
pre-hooks, re-masking after the step) and sets the LR with a function modifier every step. Two
identical models, one bare and one managed, train alternately in blocks; the figure is the
median over rounds of each round's managed/bare ratio. A third model runs the same recipe through
an optimizer wrapper that calls the manager around ``step()`` (how ``modify()`` worked before
it put the recipe on the optimizer's own step hooks): the hooks' figure is also given against it. ``--model small`` runs the earlier
0.77M-parameter CNN (batch 32 of 3x32x32), where the fixed per-step costs weigh more.
Target: overhead under 3%.

    python benchmarks/bench_torch_manager.py [--steps 3] [--rounds 7] [--model resnet18|small] [--size 224] [--update-docs]

``--update-docs`` writes the figure into docs/pytorch.md (``benchmarks/docfigures.py``).
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


def resnet18() -> nn.Module:
    """ResNet-18's layers (basic blocks without the skip additions: the same parameters and
    about the same compute)."""

    def block(cin: int, cout: int, stride: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
        )

    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in [(64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1)]:
        layers.append(block(cin, cout, stride))
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))


def _sync(x: torch.Tensor) -> None:
    if x.is_cuda:
        torch.cuda.synchronize(x.device)


def loop(model: nn.Module, optimizer, x, y, steps: int) -> float:
    _sync(x)
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    _sync(x)
    return (time.perf_counter() - start) / steps


class WrapperStep:
    """The earlier way of driving the recipe: a wrapper whose ``step()`` calls the manager
    before and after the optimizer's (the optimizer's step hooks are taken off)."""

    def __init__(self, optimizer: torch.optim.Optimizer, manager: ScheduledModifierManager) -> None:
        manager.runtime.step_hooks.remove()
        self.optimizer, self.runtime = optimizer, manager.runtime

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    def step(self) -> None:
        self.runtime.before_step()
        self.optimizer.step()
        self.runtime.after_step()


def _timed(fn, x: torch.Tensor) -> float:
    _sync(x)
    start = time.perf_counter()
    fn()
    _sync(x)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", choices=["resnet18", "small"], default="resnet18")
    parser.add_argument("--size", type=int, default=224, help="resnet18: input height and width")
    parser.add_argument("--batch", type=int, default=8, help="resnet18: batch size")
    parser.add_argument("--update-docs", action="store_true")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the figure then is the GPU's)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    build, classes, shape = (
        (resnet18, 1000, (args.batch, 3, args.size, args.size)) if args.model == "resnet18" else (cnn, 10, (32, 3, 32, 32))
    )
    device = torch.device(args.device)
    x, y = torch.randn(*shape, device=device), torch.randint(0, classes, (shape[0],), device=device)

    bare_model = build().to(device)
    bare_opt = torch.optim.SGD(bare_model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(0)
    model = build().to(device)
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    optimizer = manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), steps_per_epoch=10_000)
    n_params = sum(p.numel() for p in model.parameters())
    torch.manual_seed(0)
    wrapped_model = build().to(device)
    wrapped_manager = ScheduledModifierManager.from_yaml(RECIPE)
    wrapped = WrapperStep(wrapped_manager.modify(
        wrapped_model, torch.optim.SGD(wrapped_model.parameters(), lr=0.05, momentum=0.9), steps_per_epoch=10_000,
    ), wrapped_manager)

    loop(bare_model, bare_opt, x, y, 3)  # warm-up, and the step-0 mask update of the managed run
    loop(model, optimizer, x, y, 3)
    loop(wrapped_model, wrapped, x, y, 3)
    bare, managed, ratios, vs_wrapper = [], [], [], []
    for _ in range(args.rounds):
        bare.append(loop(bare_model, bare_opt, x, y, args.steps))
        managed.append(loop(model, optimizer, x, y, args.steps))
        w = loop(wrapped_model, wrapped, x, y, args.steps)
        ratios.append(managed[-1] / bare[-1])
        vs_wrapper.append(managed[-1] / w)
    b, m = statistics.median(bare), statistics.median(managed)
    print(f"model: {n_params:,} parameters, {len(manager.runtime.masks.params)} masked weights; batch {'x'.join(map(str, shape))}")
    print(f"threads: {torch.get_num_threads()}")
    print(f"bare loop     : {b * 1e3:.3f} ms/step")
    print(f"with manager  : {m * 1e3:.3f} ms/step (masks held, LR set every step, no mask update due)")
    print(f"overhead      : {(statistics.median(ratios) - 1) * 100:+.2f}% median of {args.rounds} paired rounds "
          f"(min {(min(ratios) - 1) * 100:+.2f}%, max {(max(ratios) - 1) * 100:+.2f}%; target < 3%)")
    entries = list(manager.runtime.masks.params.values())
    with torch.no_grad():
        fill = min(_timed(lambda: [e.param.masked_fill_(~e.mask, 0) for e in entries], x) for _ in range(5))
        bits = min(_timed(lambda: [e.enforce() for e in entries], x) for _ in range(5))
    print(f"difference    : {(m - b) * 1e3:+.1f} ms/step (medians)")
    print(f"hooks/wrapper : {statistics.median(vs_wrapper):.3f} median of {args.rounds} paired rounds "
          f"(min {min(vs_wrapper):.3f}, max {max(vs_wrapper):.3f}; step hooks against the earlier wrapper)")
    print(f"enforcing     : {bits * 1e3:.1f} ms per pass over the masked weights (bits), "
          f"masked_fill_ with the bool masks {fill * 1e3:.1f} ms: {fill / bits:.1f}x")
    if args.update_docs:
        from docfigures import replace_block

        replace_block("pytorch.md", "bench_torch_manager", [
            f"Per-step overhead when no mask update is due, {n_params / 1e6:.1f}M parameters "
            f"({args.model}, batch {'x'.join(map(str, shape))}, SGD with momentum, "
            f"{len(manager.runtime.masks.params)} masked weights, LR set every step), "
            f"{torch.get_num_threads()} thread(s): **{(statistics.median(ratios) - 1) * 100:+.1f}%** against "
            f"the bare loop, median of {args.rounds} paired rounds (single rounds "
            f"{(min(ratios) - 1) * 100:+.1f}% .. {(max(ratios) - 1) * 100:+.1f}%; target < 3%); "
            f"bare {b * 1e3:.0f} ms/step, managed {m * 1e3:.0f} ms/step ({(m - b) * 1e3:+.1f} ms). Each step "
            "masks the gradients and then the weights: two passes over the masked weights.",
            "",
            f"The recipe on the optimizer's step hooks against the earlier optimizer wrapper, same "
            f"recipe and model: **{statistics.median(vs_wrapper):.3f}x** per step (single rounds "
            f"{min(vs_wrapper):.3f} .. {max(vs_wrapper):.3f}).",
            "",
            f"One pass of mask enforcement over those weights: {bits * 1e3:.1f} ms selecting bits, "
            f"{fill * 1e3:.1f} ms with `masked_fill_` and the bool masks ({fill / bits:.1f}x).",
        ])


if __name__ == "__main__":
    main()
