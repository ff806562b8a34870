"""Cost per optimizer step of asking the compiled plan what to do.

A 100-modifier recipe (the largest corpus recipe has 73 GMP modifiers: here 96 per-layer GMP
modifiers with staggered ranges, an LR function, a set-LR, weight decay and an epoch range)
over 1,000,000 steps, asking `plan.events_at(k)` for every k in order, against an empty
Python loop of the same length measured in the same run. Target: under 5 microseconds/step.

    python benchmarks/bench_plan.py [--steps 1000000]
"""

from __future__ import annotations

import argparse
import time

import recipe_spec
from recipe_spec.schedule import compile_plan


def recipe_text(n_prune: int = 96) -> str:
    lines = [
        "modifiers:",
        "  - !EpochRangeModifier {start_epoch: 0, end_epoch: 100}",
        "  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.1, final_lr: 0.001, start_epoch: 60, end_epoch: 100}",
        "  - !SetLearningRateModifier {learning_rate: 0.05, start_epoch: 0}",
        "  - !SetWeightDecayModifier {weight_decay: 0.0, start_epoch: 50}",
    ]
    for i in range(n_prune):
        start = i % 10
        lines.append(
            f"  - !GMPruningModifier {{params: [layer{i}.weight], init_sparsity: 0.05, "
            f"final_sparsity: 0.9, start_epoch: {start}, end_epoch: {start + 30}, update_frequency: 0.5}}"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--steps-per-epoch", type=int, default=10_000)
    args = parser.parse_args()
    recipe = recipe_spec.loads(recipe_text())
    assert len(recipe.modifiers) == 100

    t0 = time.perf_counter()
    plan = compile_plan(recipe, args.steps_per_epoch)
    compile_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    for _ in range(args.steps):
        pass
    empty_s = time.perf_counter() - t0

    events = 0
    t0 = time.perf_counter()
    for k in range(args.steps):
        events += len(plan.events_at(k))
    plan_s = time.perf_counter() - t0

    per_step = plan_s / args.steps * 1e6
    per_empty = empty_s / args.steps * 1e6
    print(f"recipe: 100 modifiers; steps_per_epoch {args.steps_per_epoch}; {args.steps:,} steps; {events:,} events")
    print(f"compile_plan: {compile_s * 1e3:.2f} ms (no per-step table is built)")
    print(f"empty loop      : {per_empty:.3f} us/step")
    print(f"plan.events_at  : {per_step:.3f} us/step (target < 5 us); ratio {per_step / per_empty:.1f}x the empty loop")


if __name__ == "__main__":
    main()
